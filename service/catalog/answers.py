"""The catalog's answers: the answer body every kind shares, and the kinds besides ranked hits.

    entity refs          -> entity detail (each ref on its own)
    domain, no query     -> the domain's capabilities in curated order
    empty / broad query  -> the domain index
    exact package name   -> the package, alone (never competing with semantic hits)

Every answer is one ``SearchAnswer`` whose body is the markdown ``content``, the
``structuredContent`` it is rendered from, ``isError``, the search's ``timing`` (and ``error``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import Caller
from service.catalog.callshapes import mcp_tool_accessor
from service.catalog.cursor import ListingCursor, listing_key
from service.catalog.domains import DomainRow, list_domain, mentioned_domains
from service.catalog.identity import parse_identity, username_matches
from service.catalog.keys import Kind
from service.catalog.lookup import (
    ABSORB_CAPABILITIES,
    LookupFailure,
    absorb_step,
    failure,
    find_package,
    known_capabilities,
    resolve,
    user_record,
)
from service.catalog.markdown import DEFAULT_BUDGET_CHARS
from service.catalog.model import SearchRequest
from service.catalog.ranking import Scored
from service.catalog.refs import EntityRef
from service.catalog.render import cards, content_of
from service.engine.deadline import Deadline
from service.engine.surface import SearchAnswer
from service.errors import AgentSearchError, FragmentNotFound, InvalidEntityRef, NotFound

if TYPE_CHECKING:
    from service.engine.runtime import Engine

DEFAULT_LIMIT = 10
DEFAULT_LISTING = 50
# Entity detail budget when maxResponseSize is not given: a guide over it comes back as contents.
DEFAULT_ENTITY_BUDGET = DEFAULT_BUDGET_CHARS


@dataclass
class SearchContext:
    engine: Engine
    caller: Caller
    request: SearchRequest
    deadline: Deadline

    @property
    def limit(self) -> int:
        return self.request.limit or DEFAULT_LIMIT


def answer_body(deadline: Deadline, doc: dict[str, Any], error: AgentSearchError | None = None) -> dict[str, Any]:
    """The answer as sent: markdown ``content``, ``structuredContent``, ``isError``, ``timing`` (and ``error``)."""
    body: dict[str, Any] = {
        "content": content_of(doc),
        "structuredContent": doc,
        "isError": bool(doc.get("kind") == "error" or error is not None),
        "timing": deadline.timing(),
    }
    if error is not None:
        body["error"] = error.body()["error"]
    return body


def answer(deadline: Deadline, doc: dict[str, Any], *, status: int = 200, error: AgentSearchError | None = None, headers: Mapping[str, str] | None = None) -> SearchAnswer:
    """``doc`` answered now: its body, and every ``timing`` tile (``unaccounted`` too) in ``Server-Timing``."""
    body = answer_body(deadline, doc, error)
    tiles = {tile["name"]: tile["durationMs"] for tile in body["timing"]["serverTiming"]}
    return SearchAnswer(body=body, status=status, headers=dict(headers or {}), timings_ms=tiles)


def answer_of(ctx: SearchContext, doc: dict[str, Any], *, status: int = 200, error: AgentSearchError | None = None) -> SearchAnswer:
    return answer(ctx.deadline, doc, status=status, error=error)


# ---- entity -------------------------------------------------------------------------------------------


async def entity_answer(ctx: SearchContext, refs: Sequence[tuple[str, EntityRef | str]]) -> SearchAnswer:
    budget = (ctx.request.max_response_size or DEFAULT_ENTITY_BUDGET) // len(refs)

    async def one(text: str, ref: EntityRef | str) -> dict[str, Any]:
        if isinstance(ref, str):
            return LookupFailure(text, InvalidEntityRef.code, ref).as_dict()
        try:
            detail = await resolve(ctx.engine, ctx.caller, ref, budget)
        except AgentSearchError as exc:
            return failure(text, exc).as_dict()
        return {"ok": True, **detail}

    with ctx.deadline.phase("entityLookup"):
        results = list(await asyncio.gather(*(one(text, ref) for text, ref in refs)))
    failed = [r for r in results if not r["ok"]]
    doc: dict[str, Any] = {"kind": "entity", "results": results}
    if failed and len(failed) < len(results):
        doc["notices"] = [f"{len(failed)} of {len(results)} refs failed; the others resolved."]
    if len(failed) == len(results):
        first = failed[0]["error"]
        error = _error_of(first["code"], "every entity ref failed: " + "; ".join(f"{f['entity']}: {f['error']['message']}" for f in failed))
        doc["error"] = {"code": error.code, "message": error.message}
        doc["nextStep"] = "Fix each ref as its error says, or search by task with search({ query }) to find refs that exist."
        return answer_of(ctx, doc, status=error.status, error=error)
    doc["nextStep"] = _entity_next_step(results, ctx.engine.settings.runtime_name)
    with_input_notices(ctx, doc)
    return answer_of(ctx, doc)


def _entity_next_step(results: Sequence[Mapping[str, Any]], runtime: str) -> str:
    """The answer's one next step: the first own step among the resolved items (a reconnect, an absorb, how to
    call a capability), else one for the first item's type."""
    resolved = [r for r in results if r.get("ok")]
    own = next((r["nextStep"] for r in resolved if r.get("nextStep")), None)
    if own:
        return str(own)
    first = resolved[0]
    kind, ref = first.get("type"), first.get("entity")
    if kind in ("capability", "package-export"):
        return "Run the execute snippet with params matching the input type."
    if kind == "mcp-server":
        return f"Call a tool as {mcp_tool_accessor(str(first['title']), runtime=runtime)}.<tool>(params) from execute, or open one with its capability ref."
    if kind == "package" and first.get("exports"):
        return f'Open one export with search({{ entity: "{first["exports"][0]["entity"]}" }}) for its call contract.'
    if first.get("tableOfContents"):
        document = f"{first['package']}#{first['path']}" if kind == "package-file" else str(ref).split("#", 1)[0]
        return f'Open one section with search({{ entity: "{document}#<slug>" }}), a slug from the contents above.'
    if kind in ("integration", "secret"):
        return "Use it by name inside execute: run one cheap call as a smoke test before building on it."
    return "Use these details as they are, or search by task with search({ query }) for more."


def _error_of(code: str, message: str) -> AgentSearchError:
    cls: type[AgentSearchError] = {InvalidEntityRef.code: InvalidEntityRef, FragmentNotFound.code: FragmentNotFound}.get(code, NotFound)
    return cls(message)


# ---- domains --------------------------------------------------------------------------------------------


def domain_index_answer(ctx: SearchContext, query: str, rows: Sequence[DomainRow]) -> SearchAnswer:
    first = mentioned_domains(query, rows) if query else []
    ordered = sorted(rows, key=lambda r: r.id not in first)
    doc: dict[str, Any] = {
        "kind": "domain-index",
        "query": query,
        "results": [row.as_dict() for row in ordered],
        "nextStep": 'Drill in with search({ query, domain }) to rank one domain, or search({ domain }) to list it, e.g. search({ domain: "'
        + (ordered[0].id if ordered else "email")
        + '" }).',
    }
    return answer_of(ctx, fit(ctx, doc))


async def domain_listing_answer(ctx: SearchContext, row: DomainRow) -> SearchAnswer:
    """One page of the domain in curated order, from ``cursor`` on; ``nextCursor`` continues it.

    A page that ``maxResponseSize`` trims is answered again with fewer entries, so the next cursor
    starts right after the last entry shown and nothing is skipped."""
    with ctx.deadline.phase("loadAndRank"):
        items = await list_domain(ctx.engine, ctx.caller, row.id)
    cursor = ctx.request.cursor
    rest = [p for p in items if listing_key(p) > cursor.after] if cursor is not None else items
    shown = rest[: ctx.request.limit or DEFAULT_LISTING]
    while True:
        doc = fit(ctx, _listing_doc(row, len(items), shown, len(rest) - len(shown), cursor, runtime=ctx.engine.settings.runtime_name))
        kept = len(doc["results"])
        if kept == len(shown):
            return answer_of(ctx, doc)
        shown = shown[:kept]


def _listing_doc(row: DomainRow, total: int, shown: Sequence[Mapping[str, Any]], more: int, start: ListingCursor | None, *, runtime: str) -> dict[str, Any]:
    """The listing document; ``more`` entries follow ``shown``, which began after ``start``."""
    results = cards([Scored(p, None, 0.0, 0.0) for p in shown], runtime=runtime)
    for result in results:
        result.pop("score", None)
        result.pop("whyMatched", None)
    resume = ListingCursor(row.id, listing_key(shown[-1])) if shown else start
    next_cursor = resume.encode() if more and resume is not None else None
    doc: dict[str, Any] = {"kind": "domain-listing", "domain": row.id, "description": row.description, "total": total, "results": results, "nextCursor": next_cursor}
    if next_cursor:
        doc["notices"] = [f'{more} more capabilities in `{row.id}`: pass cursor "{next_cursor}" with domain "{row.id}" for the next page.']
    elif more:
        doc["notices"] = [f"{more} more capabilities in `{row.id}` did not fit maxResponseSize; raise it to list them."]
    first = results[0]["entity"] if results else None
    doc["nextStep"] = f'Open one with search({{ entity: "{first}" }}) or call it from execute using its call shape.' if first else "This domain has no capabilities."
    if next_cursor:
        doc["nextStep"] += f' Next page: search({{ domain: "{row.id}", cursor: "{next_cursor}" }}).'
    return doc


# ---- exact package identity --------------------------------------------------------------------------------


async def exact_package_answer(ctx: SearchContext, query: str) -> SearchAnswer | None:
    identity = parse_identity(query)
    if identity is None:
        return None
    package = await find_package(ctx.engine, ctx.caller, identity.ident)
    if package is None or not username_matches(identity, ctx.caller.sub, package.get("name_scope")):
        return None
    if package.get("hidden") and not ctx.request.include_hidden:
        return None
    for name in {str(package.get("name_leaf")), str(package.get("package_id"))}:
        if await user_record(ctx.engine, ctx.caller, Kind.MCP_SERVER, name) is not None:
            return None  # it also names a connected MCP server: rank so both appear together
    hit = Scored(package, None, 0.0, 1.0, (f"exact {identity.form}: {identity.ident}",), {"exact": True})
    await attach_absorb_steps(ctx.engine, [hit])
    doc: dict[str, Any] = {
        "kind": "exact-package",
        "query": query,
        "mode": "exact",
        "results": cards([hit], runtime=ctx.engine.settings.runtime_name),
        "nextStep": f'Open the package index with search({{ entity: "{package.get("entity")}" }}); for capabilities, describe the task instead.',
    }
    return answer_of(ctx, fit(ctx, doc))


async def attach_absorb_steps(engine: Engine, hits: Sequence[Scored]) -> None:
    """The absorb step of outdated community forks (it names the platform's calls only where the catalog has them)."""
    outdated = [h for h in hits if h.kind == Kind.PACKAGE.value and (h.payload.get("fork") or {}).get("listingAhead")]
    if not outdated:
        return
    known = await known_capabilities(engine, ABSORB_CAPABILITIES)
    for hit in outdated:
        upstream = str((hit.payload.get("fork") or {}).get("upstream"))
        hit.extras.setdefault("nextStep", absorb_step(upstream, runtime=engine.settings.runtime_name, known=known))


# ---- size ------------------------------------------------------------------------------------------------------


def with_input_notices(ctx: SearchContext, doc: dict[str, Any]) -> None:
    """Put the request's input notices (query cut, limit clamped) ahead of the answer's own, once."""
    own = [n for n in doc.get("notices") or [] if n not in ctx.request.notices]
    if ctx.request.notices:
        doc["notices"] = [*ctx.request.notices, *own]


def fit(ctx: SearchContext, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with low-ranked results trimmed until the markdown fits ``maxResponseSize`` (memories
    and waiting stay); the notices about the request's own inputs come first."""
    with_input_notices(ctx, doc)
    max_size = ctx.request.max_response_size
    if max_size is None:
        return doc
    results = doc.get("results") or []
    notices = list(doc.get("notices") or [])
    trimmed = 0
    while len(content_of(doc)) > max_size and results:
        results.pop()
        trimmed += 1
        doc["notices"] = [*notices, f"{trimmed} lower-ranked matches trimmed to fit maxResponseSize={max_size}."]
    return doc
