"""Search answers as markdown ``content`` and ``structuredContent``, for every answer kind.

Hosts load one channel or the other, so both carry the same actionable substance: entity refs,
why-matched terms, inlined call contracts, notices and the recommended next step. The markdown is
written *from* the structured document by the functions below, never from a separate source, so
the two cannot drift; it never defers to structured content for call details.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.catalog.callshapes import call_shape
from service.catalog.lookup import section_part
from service.catalog.ranking import Scored

CALL_SHAPE_TOP = 3
TYPE_LABELS = {"package-export": "package export", "mcp-server": "MCP server"}


def _ts(code: str) -> str:
    return f"```ts\n{code}\n```"


def _label(kind: str) -> str:
    return TYPE_LABELS.get(kind, kind)


# ---- cards -----------------------------------------------------------------------------------------


def card(hit: Scored, *, with_call_shape: bool, runtime: str) -> dict[str, Any]:
    """The structured result card of one ranked hit (``runtime``: the name call shapes call into)."""
    payload = hit.payload
    kind = hit.kind
    card_type = {"export": "package-export", "mcp-tool": "capability"}.get(kind, kind)
    out: dict[str, Any] = {
        "type": card_type,
        "entity": payload.get("entity"),
        "title": payload.get("title"),
        "summary": payload.get("summary") or "",
        "score": round(hit.score, 4),
        "whyMatched": list(hit.why),
    }
    if card_type == "capability":
        out["domain"] = payload.get("domain")
        if with_call_shape:
            out["callShape"] = call_shape(payload, runtime=runtime)
    if kind == "mcp-server":
        out["domain"] = payload.get("domain")
        if payload.get("instructions"):
            out["instructions"] = _one_line(str(payload["instructions"]), 300)
    if kind == "package":
        if payload.get("hidden"):
            out["hidden"] = True
        if hit.extras.get("bestActions"):
            out["bestActions"] = hit.extras["bestActions"]
        fork = payload.get("fork") or {}
        if fork.get("listingAhead"):
            out["listingAhead"] = True  # its absorb step comes in extras["nextStep"]
    if kind == "export" and hit.extras.get("contract"):
        out["contract"] = hit.extras["contract"]
    if hit.extras.get("nextStep"):
        out["nextStep"] = hit.extras["nextStep"]
    if hit.extras.get("scoreFrom"):
        out["scoreFrom"] = hit.extras["scoreFrom"]
    if hit.extras.get("rankedWith"):
        out["rankedWith"] = hit.extras["rankedWith"]
    if hit.extras.get("exact"):
        out["exact"] = True
    return out


def cards(hits: Sequence[Scored], *, runtime: str, call_shapes: int = CALL_SHAPE_TOP) -> list[dict[str, Any]]:
    """Cards in order; the first ``call_shapes`` capability hits inline their call shape."""
    out = []
    shaped = 0
    for hit in hits:
        is_capability = hit.kind in ("capability", "mcp-tool")
        out.append(card(hit, with_call_shape=is_capability and shaped < call_shapes, runtime=runtime))
        shaped += 1 if is_capability else 0
    return out


def _one_line(text: str, limit: int = 200) -> str:
    collapsed = " ".join(text.split())
    return collapsed if len(collapsed) <= limit else collapsed[: limit - 1] + "…"


def item_step(item: Mapping[str, Any], answer_step: Any) -> list[str]:
    """An item's own step as a ``To do:`` line; none when it is the answer's one ``Next step:`` already."""
    step = item.get("nextStep")
    return [f"To do: {step}"] if step and step != answer_step else []


def card_markdown(position: int, item: Mapping[str, Any], answer_step: Any = None) -> str:
    head = f"{position}. **{item.get('title')}** — {_label(str(item.get('type')))}"
    if item.get("domain"):
        head += f" · domain `{item['domain']}`"
    if item.get("entity"):
        head += f" · `{item['entity']}`"
    if item.get("exact"):
        head += " · exact match"
    if item.get("hidden"):
        head += " · hidden"
    lines = [head]
    if item.get("summary"):
        lines.append(f"   {item['summary']}")
    if item.get("instructions"):
        lines.append(f"   Instructions: {item['instructions']}")
    if item.get("callShape"):
        lines.append(f"   Call: `{item['callShape']}`")
    for action in item.get("bestActions") or []:
        lines.append(f"   Best action: `{action['entity']}` — {action.get('purpose') or action.get('subpath')}")
    contract = item.get("contract")
    if contract:
        lines.append(f"   Import: `{contract['importSpecifier']}` · usage `{contract['usage']}`")
        signature = str(contract.get("signature") or "")
        if signature and "\n" not in signature and len(signature) <= 300:
            lines.append(f"   Signature: `{signature}`")
        elif signature:  # never cut: markdown carries the whole contract, like structured content
            lines.append("   Signature:\n" + _indent(_ts(signature), 3))
        if contract.get("typeDefinition"):
            lines.append("   Types:\n" + _indent(_ts(str(contract["typeDefinition"])), 3))
        lines.append("   Execute:\n" + _indent(_ts(str(contract["execute"])), 3))
    if item.get("rankedWith"):
        lines.append(f"   Ranked with `{item['rankedWith']}` (wraps that MCP server)")
    if item.get("whyMatched"):
        lines.append(f"   Why: {', '.join(item['whyMatched'])}")
    elif item.get("type") != "domain" and "whyMatched" in item:
        lines.append("   Why: semantic match")
    lines += [f"   {line}" for line in item_step(item, answer_step)]
    return "\n".join(lines)


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.split("\n"))


# ---- ranked / exact -------------------------------------------------------------------------------------


def ranked_markdown(doc: Mapping[str, Any]) -> str:
    parts: list[str] = []
    waiting = doc.get("waiting")
    if waiting and waiting.get("items"):
        parts.append(waiting_markdown(waiting))
    if doc.get("memories"):
        parts.append("## Memories\n" + "\n".join(f"- {m['summary']} (`memory:{m['id']}`)" for m in doc["memories"]))
    results = doc.get("results") or []
    scope = f" in domain `{doc['domain']}`" if doc.get("domain") else ""
    if doc.get("kind") == "exact-package":
        title = f"## Exact package match for \"{doc.get('query')}\""
    else:
        title = f"## Results for \"{doc.get('query')}\"{scope} ({doc.get('mode')}, {len(results)} shown)"
    if results:
        parts.append(title + "\n" + "\n".join(card_markdown(i + 1, r, doc.get("nextStep")) for i, r in enumerate(results)))
    else:
        parts.append(title + "\nNo matches.")
    parts.append(notices_markdown(doc))
    return "\n\n".join(p for p in parts if p)


def waiting_markdown(waiting: Mapping[str, Any]) -> str:
    lines = ["## Waiting"]
    for item in waiting["items"]:
        line = f"- **{item['title']}** ({item['status']})"
        if item.get("nextStep"):
            line += f" — {item['nextStep']}"
        lines.append(line)
    if waiting.get("more"):
        lines.append(f"- {waiting['more']} more: {waiting['summary']}")
    return "\n".join(lines)


def notices_markdown(doc: Mapping[str, Any]) -> str:
    lines = []
    for notice in doc.get("notices") or []:
        lines.append(f"Notice: {notice}")
    if doc.get("nextStep"):
        lines.append(f"Next step: {doc['nextStep']}")
    return "\n".join(lines)


# ---- domains ----------------------------------------------------------------------------------------------


def domain_index_markdown(doc: Mapping[str, Any]) -> str:
    rows = doc.get("results") or []
    lines = ["## Domains", "| domain | description | capabilities | samples |", "|---|---|---|---|"]
    for row in rows:
        samples = ", ".join(f"`{s}`" for s in row["samples"])
        lines.append(f"| `{row['domain']}` | {_cell(row['description'])} | {row['capabilityCount']} | {samples} |")
    if not rows:
        lines.append("| (none) | no capabilities or MCP servers yet | 0 | |")
    return "\n".join(lines) + "\n\n" + notices_markdown(doc)


def _cell(text: str) -> str:
    return _one_line(text, 160).replace("|", "\\|")


def domain_listing_markdown(doc: Mapping[str, Any]) -> str:
    results = doc.get("results") or []
    title = f"## Domain `{doc['domain']}` ({doc.get('total', len(results))} capabilities, curated order)"
    body = "\n".join(card_markdown(i + 1, r, doc.get("nextStep")) for i, r in enumerate(results)) or "No capabilities."
    return f"{title}\n{body}\n\n{notices_markdown(doc)}"


# ---- entity detail ----------------------------------------------------------------------------------------


def entity_markdown(doc: Mapping[str, Any]) -> str:
    step = doc.get("nextStep")
    sections = [detail_markdown(item, step) if item.get("ok") else f"## {item['entity']}\nError ({item['error']['code']}): {item['error']['message']}" for item in doc.get("results") or []]
    tail = notices_markdown(doc)
    return "\n\n".join([*sections, tail] if tail else sections)


def guide_section_header(guide_id: str, title: str, summary: str, slug: str) -> str:
    """What ``detail_markdown`` writes around an opened guide heading's text (its longest part label)."""
    item = {"type": "guide", "entity": f"guide:{guide_id}#{slug}", "title": title, "summary": summary, "part": section_part(slug, contents=True), "markdown": ""}
    return detail_markdown(item)


def detail_markdown(item: Mapping[str, Any], answer_step: Any = None) -> str:
    kind = item.get("type")
    head = f"## `{item.get('entity')}` — {item.get('title')}"
    lines = [head]
    if item.get("summary"):
        lines.append(str(item["summary"]))
    if kind == "capability":
        lines.append(f"Domain: `{item.get('domain')}`")
        if item.get("description") and item["description"] != item.get("summary"):
            lines.append(str(item["description"]))
        lines += [f"Call shape: `{item['callShape']}`", "Execute:", _ts(str(item["execute"])), "Input type:", _ts(str(item["inputTypeDefinition"])), "Output type:", _ts(str(item["outputTypeDefinition"]))]
        if "relatedOperationCount" in item:
            lines.append(
                f"Related operations: {item['relatedOperationCount']} other tools on `{item['related']}`; "
                f"list them with `search({{ entity: \"{item['related']}\" }})`."
            )
    elif kind == "guide":
        lines += [f"Part: {item.get('part')}", str(item.get("markdown", ""))]
    elif kind == "package-file":
        lines += [f"File `{item.get('path')}` of `{item.get('package')}` ({item.get('part')})", str(item.get("text", ""))]
    elif kind == "package":
        lines += _package_lines(item)
    elif kind == "package-export":
        lines += _export_lines(item)
    elif kind == "integration":
        lines += _integration_lines(item)
    elif kind == "mcp-server":
        lines += _server_lines(item)
    elif kind == "secret":
        lines += [f"{k}: {item[k]}" for k in ("description", "provider", "expiresAt") if item.get(k)]
        if item.get("hosts"):
            lines.append(f"hosts: {', '.join(item['hosts'])}")
        lines.append(str(item.get("note")))
    lines += item_step(item, answer_step)
    return "\n".join(lines)


def _package_lines(item: Mapping[str, Any]) -> list[str]:
    lines = []
    if item.get("hidden"):
        lines.append("Hidden from ranked search (still available by id).")
    if item.get("tags"):
        lines.append(f"Tags: {', '.join(item['tags'])}")
    lines.append("Exports:")
    lines += [f"- `{e['entity']}` — {e['purpose']}" for e in item.get("exports") or []] or ["- (none)"]
    if item.get("jobs"):
        lines.append(f"Jobs: {', '.join(item['jobs'])}")
    if item.get("retrievers"):
        lines.append(f"Retrievers: {', '.join(item['retrievers'])}")
    if item.get("intent"):
        lines += ["Intent:", str(item["intent"])]
    if item.get("files"):
        lines.append(f"Files: {', '.join(item['files'])} (open one with `{item['entity']}#<path>`)")
    if item.get("secrets"):
        lines.append("Package secrets (metadata only; values are never returned, use them by name inside execute):")
        lines += [_secret_line(secret) for secret in item["secrets"]]
    if item.get("listingAhead"):
        lines.append("listingAhead: true")
    return lines


def _secret_line(secret: Mapping[str, Any]) -> str:
    line = f"- `{secret['name']}`"
    if secret.get("description"):
        line += f" — {secret['description']}"
    if secret.get("expiresAt"):
        line += f" (expires {secret['expiresAt']})"
    return line


def _export_lines(item: Mapping[str, Any]) -> list[str]:
    lines = [f"Package: `{item.get('package')}` · subpath `{item.get('subpath')}`"]
    if item.get("purpose"):
        lines.append(f"Purpose: {item['purpose']}")
    lines += [f"Import: `{item['importSpecifier']}` · usage `{item['usage']}`", "Execute:", _ts(str(item["execute"]))]
    if item.get("signature"):
        lines += ["Signature:", _ts(str(item["signature"]))]
    if item.get("typeDefinition"):
        lines += ["Type definition:", _ts(str(item["typeDefinition"]))]
    for function in item.get("functions") or []:
        lines.append(f"- function `{function['name']}` {function.get('signature') or ''} — {function.get('purpose') or ''}".rstrip(" —"))
    if item.get("referencedTypes"):
        lines += ["Referenced types:", _ts(str(item["referencedTypes"]))]
    if item.get("example"):
        lines += ["Example:", _ts(str(item["example"]))]
    return lines


def _integration_lines(item: Mapping[str, Any]) -> list[str]:
    lines = [f"Provider: {item.get('provider')}"]
    for key, label in (("authType", "Auth"), ("tokenUrl", "Token URL"), ("authorizeUrl", "Authorize URL"), ("apiBaseUrl", "API base URL"), ("clientId", "Client id"), ("docsUrl", "Docs")):
        if item.get(key):
            lines.append(f"{label}: {item[key]}")
    if item.get("requiredHosts"):
        lines.append(f"Required hosts: {', '.join(item['requiredHosts'])}")
    if item.get("scopes"):
        lines.append(f"Scopes: {', '.join(item['scopes'])}")
    refresh = item.get("lastRefresh")
    if refresh:
        lines.append(f"Last refresh: {refresh.get('status')} {refresh.get('at') or ''}".rstrip())
    lines.append(str(item.get("tokens")))
    related = item.get("relatedPackages") or []
    if related:
        lines.append("Related packages:")
        lines += [f"- `{p['entity']}` — {p.get('summary') or p.get('name')}" for p in related]
    return lines


def _server_lines(item: Mapping[str, Any]) -> list[str]:
    lines = [f"Domain: `{item.get('domain')}`"]
    if item.get("description") and item["description"] != item.get("summary"):
        lines.append(str(item["description"]))
    if item.get("instructions"):
        lines += ["Instructions:", str(item["instructions"])]
    connection = item.get("connection")
    if connection:
        lines.append(f"Connection: {connection.get('status')} {connection.get('at') or ''}".rstrip())
    lines.append(f"Tools ({item.get('toolCount')}):")
    lines += [f"- `{t['entity']}` — {t.get('summary') or ''} · `{t['callShape']}`" for t in item.get("tools") or []]
    return lines


# ---- errors ----------------------------------------------------------------------------------------------


def error_markdown(doc: Mapping[str, Any]) -> str:
    lines = [str(doc["error"]["message"])]
    if doc.get("rateLimit"):
        limit = doc["rateLimit"]
        lines.append(f"Rate limited ({limit['code']}): retry after {limit['retryAfterSeconds']}s.")
    if doc.get("entitlement"):
        ent = doc["entitlement"]
        lines.append(f"Entitlement: {ent['feature']} on the {ent['plan']} plan allows {ent['limit']}; upgrade to {', '.join(ent['upgradePlans'])} for more.")
    tail = notices_markdown(doc)
    return "\n".join([*lines, tail] if tail else lines)


def waiting_summary_markdown(doc: Mapping[str, Any]) -> str:
    """The full waiting list: every item with its status and step, then the one next step."""
    lines = [f"## Waiting ({doc.get('total', 0)})"]
    for item in doc.get("items") or []:
        line = f"- **{item['title']}** ({item['status']}, {item['category']})"
        if item.get("nextStep"):
            line += f" — {item['nextStep']}"
        lines.append(line)
    return "\n".join(lines) + "\n\n" + notices_markdown(doc)


MARKDOWN = {
    "ranked": ranked_markdown,
    "exact-package": ranked_markdown,
    "domain-index": domain_index_markdown,
    "domain-listing": domain_listing_markdown,
    "entity": entity_markdown,
    "error": error_markdown,
    "waiting": waiting_summary_markdown,
}


def content_of(doc: Mapping[str, Any]) -> str:
    return MARKDOWN[str(doc["kind"])](doc)
