"""The tools' JSON Schemas, taken from the HTTP contract (``openapi.yaml``) so the two never drift.

OpenAPI 3.0 schemas are nearly JSON Schema; two things differ and are converted here: ``$ref``
into ``#/components/schemas`` (inlined: MCP clients validate each schema on its own) and
``nullable: true`` (becomes ``"type": [T, "null"]``). Descriptions written for a model replace the
contract's where the tool definitions give one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from typing import Any

from service.health import load_contract

_REF_PREFIX = "#/components/schemas/"


@cache
def _components() -> dict[str, Any]:
    schemas: dict[str, Any] = load_contract()["components"]["schemas"]
    return schemas


def contract_schema(name: str, *, descriptions: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The component ``name`` as a self-contained JSON Schema object.

    ``descriptions``: property name -> a description for a model; ``extra``: properties to add
    (each required)."""
    schema: dict[str, Any] = _convert(_components()[name])
    properties = schema.setdefault("properties", {})
    for prop, text in (descriptions or {}).items():
        properties[prop] = {**properties[prop], "description": text}
    if extra:
        schema["properties"] = {**copy.deepcopy(dict(extra)), **properties}
        schema["required"] = [*extra, *schema.get("required", [])]
    return schema


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        return _convert(_components()[ref.removeprefix(_REF_PREFIX)])
    converted = {key: _convert(value) for key, value in node.items() if not (key == "nullable" and isinstance(value, bool))}
    if node.get("nullable") is not True:
        return converted
    kind = converted.get("type")
    if not isinstance(kind, str):  # a oneOf of types: null is one more alternative
        notes = {key: converted.pop(key) for key in ("description", "default") if key in converted}
        return {**notes, "anyOf": [converted, {"type": "null"}]}
    converted["type"] = [kind, "null"]
    if isinstance(converted.get("enum"), list) and None not in converted["enum"]:
        converted["enum"] = [*converted["enum"], None]
    return converted
