"""Call contracts: runtime accessors, inlined call shapes, execute snippets and TypeScript types from JSON Schema.

Built-in capabilities are flat on the runtime object (``kody.emailSend(params)``); MCP tools are
namespaced by server (``kody.mcp["home"].set_pin(params)``). The runtime's name (``kody`` by
default) is the ``runtime_name`` setting, passed to every function that writes one. An inlined call shape is the accessor plus the
whitespace-collapsed input type, truncated when long, so an agent can call from execute without
opening the entity first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from service.catalog.markdown import collapse_whitespace

CALL_SHAPE_CHARS = 180
_IDENTIFIER = re.compile(r"^[A-Za-z_$][\w$]*$")
_MAX_SCHEMA_DEPTH = 4


def _member(name: str) -> str:
    """``.name`` for an identifier, ``["name"]`` otherwise."""
    return f".{name}" if _IDENTIFIER.match(name) else f'["{name}"]'


def accessor(payload: Mapping[str, Any], *, runtime: str) -> str:
    """The runtime accessor of a capability or MCP tool record (``runtime``: the runtime object's name)."""
    server = payload.get("server")
    if server and payload.get("tool"):
        return f'{runtime}.mcp["{server}"]{_member(str(payload["tool"]))}'
    return f"{runtime}{_member(str(payload.get('entity_id', '')))}"


def mcp_tool_accessor(server: str, *, runtime: str) -> str:
    """``kody.mcp["home"]``: where the tools of one connected MCP server are called."""
    return f'{runtime}.mcp["{server}"]'


def input_type(payload: Mapping[str, Any]) -> str:
    """The input type as TypeScript: the declared ``inputType`` or one derived from the tool's JSON Schema."""
    if payload.get("server") and payload.get("tool"):
        return schema_to_ts(payload.get("input_schema") or {})
    return str(payload.get("input_type") or "{}")


def output_type(payload: Mapping[str, Any]) -> str:
    if payload.get("server") and payload.get("tool"):
        schema = payload.get("output_schema") or {}
        return schema_to_ts(schema) if schema else "unknown"
    return str(payload.get("output_type") or "unknown")


def has_required_fields(payload: Mapping[str, Any]) -> bool:
    """Whether the input type names a required field (callers pass ``{}`` when it has none).

    MCP tools say so in their JSON Schema's ``required``; a built-in's TypeScript input type has one
    when a top-level member is declared without ``?`` (``{ to: string; cc?: string }``).
    """
    if payload.get("server") and payload.get("tool"):
        schema = payload.get("input_schema") or {}
        return bool(isinstance(schema, Mapping) and schema.get("required"))
    text = str(payload.get("input_type") or "").strip()
    if not text.startswith("{"):
        return text not in ("", "{}", "void", "undefined", "Record<string, never>")
    depth = 0
    member: str | None = ""  # the current top-level member's name; None while reading its type
    previous = ""
    for char in text:
        if char in "{[(<":
            depth += 1
        elif char in "}])>" and not (char == ">" and previous == "="):  # `=>` closes nothing
            depth -= 1
        elif depth == 1 and char in ";,\n":
            member = ""
        elif depth == 1 and char == ":" and member is not None:
            if member.strip() and not member.strip().endswith("?"):
                return True
            member = None
        elif depth == 1 and member is not None:
            member += char
        previous = char
    return False


def call_shape(payload: Mapping[str, Any], *, runtime: str, limit: int = CALL_SHAPE_CHARS) -> str:
    """``kody.emailSend(params: { to: string; subject: string })``, collapsed and truncated to ``limit``."""
    head = f"{accessor(payload, runtime=runtime)}(params: "
    room = max(8, limit - len(head) - 1)
    return f"{head}{collapse_whitespace(input_type(payload), room)})"


def execute_snippet(call: str, *, runtime: str) -> str:
    """A ready-to-run execute module importing the runtime and calling ``call`` (an accessor) with the execute params."""
    return "\n".join(
        [
            f"import {{ {runtime} }} from '{runtime}:runtime'",
            "",
            "export default async function main(params) {",
            f"\treturn await {call}(params)",
            "}",
        ]
    )


def package_specifier(package_name: str, subpath: str) -> str:
    """The import specifier of one package export: ``@alice/home-controls/bond-area-shades``."""
    return package_name if subpath in (".", "") else f"{package_name}/{subpath}"


def export_snippet(specifier: str, callable_name: str | None) -> str:
    """A ready-to-run execute module importing one export and calling it with the execute params."""
    if callable_name is None:
        return "\n".join([f"import * as mod from '{specifier}'", "", "export default async function main(params) {", "\treturn mod", "}"])
    return "\n".join(
        [
            f"import {{ {callable_name} }} from '{specifier}'",
            "",
            "export default async function main(params) {",
            f"\treturn await {callable_name}(params)",
            "}",
        ]
    )


def export_usage(payload: Mapping[str, Any]) -> str:
    names = list(payload.get("callables") or [])
    return f"{names[0]}(params)" if names else f"import * as mod from '{package_specifier(str(payload.get('package_name')), str(payload.get('subpath')))}'"


def export_contract(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An export's call contract: the same substance ``entity: package:{id}#{subpath}`` returns."""
    names = list(payload.get("callables") or [])
    specifier = package_specifier(str(payload.get("package_name") or payload.get("package_id")), str(payload.get("subpath")))
    contract: dict[str, Any] = {
        "importSpecifier": specifier,
        "usage": export_usage(payload),
        "execute": export_snippet(specifier, names[0] if names else None),
        "signature": payload.get("signature") or None,
        "typeDefinition": payload.get("type_definition") or None,
    }
    return contract


# ---- JSON Schema -> TypeScript ------------------------------------------------------------------


def schema_to_ts(schema: Any, depth: int = 0) -> str:
    """A compact TypeScript type for a JSON Schema (objects, arrays, enums, unions; ``unknown`` otherwise)."""
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return "unknown"
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(_literal(v) for v in schema["enum"][:20]) or "never"
    if "const" in schema:
        return _literal(schema["const"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(schema_to_ts(s, depth + 1) for s in schema[key][:10]) or "unknown"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(schema_to_ts({**schema, "type": k}, depth + 1) for k in kind)
    if kind == "object" or "properties" in schema:
        return _object_ts(schema, depth)
    if kind == "array":
        item = schema_to_ts(schema.get("items", {}), depth + 1)
        return f"Array<{item}>"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}.get(str(kind), "unknown")


def _object_ts(schema: Mapping[str, Any], depth: int) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return "Record<string, unknown>" if schema.get("additionalProperties", True) else "{}"
    required = set(schema.get("required") or [])
    parts = []
    for name, sub in properties.items():
        key = name if _IDENTIFIER.match(name) else f'"{name}"'
        optional = "" if name in required else "?"
        parts.append(f"{key}{optional}: {schema_to_ts(sub, depth + 1)}")
    return "{ " + "; ".join(parts) + " }"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
