"""Search answers and failures as MCP tool results (``content``, ``structuredContent``, ``isError``).

Hosts load either the text ``content`` or ``structuredContent`` into the model, so each result
carries the same substance in both: catalog search its markdown, code search its
text-first lines, action search one line per row with every field of its structured rows. A failure the caller can fix is a tool result with ``isError: true`` whose text says what
to fix; the model reads it and calls again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CallToolResult = dict[str, Any]


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def catalog_result(body: Mapping[str, Any]) -> CallToolResult:
    """From the ``/v1/catalog/search`` answer: markdown content, the structured document, timing."""
    result: CallToolResult = {
        "content": [text(str(body["content"]))],
        "structuredContent": body["structuredContent"],
        "isError": bool(body["isError"]),
    }
    if "timing" in body:
        # Catalog search puts timing at the top level; SDK clients drop unknown fields, so _meta has it too.
        result["timing"] = body["timing"]
        result["_meta"] = {"timing": body["timing"]}
    return result


def code_result(body: Mapping[str, Any]) -> CallToolResult:
    """From the workspace search answer: its text-first output lines, the whole answer structured."""
    return {"content": [text(str(body["output"]))], "structuredContent": dict(body), "isError": False}


def waiting_result(body: Mapping[str, Any]) -> CallToolResult:
    """From the ``GET /v1/catalog/waiting`` answer: its markdown, the list structured."""
    return {"content": [text(str(body["content"]))], "structuredContent": dict(body["structuredContent"]), "isError": False}


def registered_result(body: Mapping[str, Any]) -> CallToolResult:
    """From the ``POST /v1/workspaces`` answer: what was registered and the call that searches it."""
    verb = "Registered" if body.get("created") else "Already registered (settings updated):"
    lines = [
        f"{verb} workspace {body['id']} at {body['root']} (index {body.get('state')}, {body.get('files')} files so far).",
        f"Next step: call code_search with workspace \"{body['id']}\" and your query; the index builds in the background and searches answer meanwhile.",
    ]
    return {"content": [text("\n".join(lines))], "structuredContent": dict(body), "isError": False}


def action_result(body: Mapping[str, Any]) -> CallToolResult:
    return {"content": [text(action_text(body))], "structuredContent": dict(body), "isError": False}


def error_result(code: str, message: str, *, details: Mapping[str, Any] | None = None, catalog: bool = False) -> CallToolResult:
    """A failure the caller can fix. Catalog search keeps its structured error document
    (``kind: error``, with ``rateLimit`` when that tripped); the others answer in text alone, as
    their output schemas describe only answers."""
    result: CallToolResult = {"content": [text(f"{code}: {message}")], "isError": True}
    if catalog:
        doc: dict[str, Any] = {"kind": "error", "error": {"code": code, "message": message}}
        if details and isinstance(details.get("rateLimit"), Mapping):
            doc["rateLimit"] = dict(details["rateLimit"])
        elif details:
            doc["error"]["details"] = dict(details)
        result["structuredContent"] = doc
    return result


def for_version(result: CallToolResult, *, structured: bool) -> CallToolResult:
    """Protocol versions before 2025-06-18 know no ``structuredContent``: the text carries it all."""
    if structured or "structuredContent" not in result:
        return result
    return {key: value for key, value in result.items() if key != "structuredContent"}


# ---- action rows as text ------------------------------------------------------------------------


def action_text(body: Mapping[str, Any]) -> str:
    rows: list[Mapping[str, Any]] = list(body.get("results") or [])
    browse = (body.get("meta") or {}).get("mode") == "browse"
    query = str(body.get("query", ""))
    lines: list[str] = []
    if not rows:
        lines.append(
            f'No (service, action) pairs match "{query}". Rephrase the query, pass include_catalog: true to see '
            "services not set up yet, or browse with an empty query."
            if not browse
            else "No callable service instances. Pass include_catalog: true to see services that can be set up."
        )
    elif browse:
        lines.append(f"{len(rows)} callable service instance{'s' if len(rows) != 1 else ''} (browse mode, no actions):")
        lines.extend(f"- {_browse_line(row)}" for row in rows)
    else:
        lines.append(f'{len(rows)} result{"s" if len(rows) != 1 else ""} for "{query}", best first:')
        lines.extend(f"{position}. {_search_line(row)}" for position, row in enumerate(rows, start=1))
    lines.extend(f"notice: {notice}" for notice in body.get("notices") or [])
    if rows:
        lines.append(_next_step(rows))
    return "\n".join(lines)


def _service_label(row: Mapping[str, Any]) -> str:
    if "service" in row:
        return f"service {row['service']}"
    return f"template {row['template']} (setup required)"


def _search_line(row: Mapping[str, Any]) -> str:
    parts = [f"{_service_label(row)} · action {row['action']} — {row.get('description', '')}".rstrip(" —")]
    parts.append(f"risk {row['risk']}")
    parts.extend(_common_parts(row))
    parts.append(f"score {row['score']}")
    return " | ".join(parts)


def _browse_line(row: Mapping[str, Any]) -> str:
    return " | ".join([_service_label(row), *_common_parts(row)])


def _common_parts(row: Mapping[str, Any]) -> list[str]:
    auth = row.get("auth") or {}
    access = " ".join(str(part) for part in (auth.get("type"), auth.get("provider")) if part)
    parts = [
        f"template {row['template']} ({row['service_display_name']})",
        f"tier {row['tier']}",
        f"auth {access}, {'connected' if auth.get('connected') else 'not connected'}",
    ]
    if "account_email" in row:
        parts.append(f"account {row['account_email']}")
    if "secret_name" in row:
        parts.append(f"secret {row['secret_name']}")
    if "setup_required" in row:
        parts.append(f"setup_required {str(row['setup_required']).lower()}")
    return parts


def _next_step(rows: list[Mapping[str, Any]]) -> str:
    callable_rows = [row for row in rows if "service" in row]
    if not callable_rows:
        return "Next step: none of these is set up yet; the user sets one up in the dashboard before it can be called."
    return (
        f"Next step: call the action with service set to the instance name shown (e.g. {callable_rows[0]['service']}), "
        "never the template key."
    )
