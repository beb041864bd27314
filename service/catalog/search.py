"""One catalog search, start to finish: its answer kinds and the phases that build them.

    entity refs          -> entity detail (each ref on its own)
    domain, no query     -> the domain's capabilities in curated order
    empty / broad query  -> the domain index
    exact package name   -> the package, alone (never competing with semantic hits)
    anything else        -> ranked hits (+ memories, Jev rerank telemetry, the Waiting block)

Phases run under a ``SearchClock``: the deadline is checked before each, so a search the request
gave up on stops at its next phase; cancelling the task aborts an in-flight rerank.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.callshapes import export_contract, mcp_tool_accessor
from service.catalog.cursor import ListingCursor, listing_key
from service.catalog.domains import (
    DomainRow,
    cached_builtin_domains,
    domain_index,
    is_broad,
    list_domain,
    mcp_domain_row,
    mentioned_domains,
    require_domain,
)
from service.catalog.identity import parse_identity, username_matches
from service.catalog.keys import COLLECTION, SCOPE_RANKED, SCOPE_RANKED_HIDDEN, SURFACE_NAME, Kind, server_of_domain
from service.catalog.lookup import (
    ABSORB_CAPABILITIES,
    LookupFailure,
    absorb_step,
    failure,
    find_package,
    known_capabilities,
    name_terms,
    reconnect_step,
    resolve,
    user_record,
)
from service.catalog.markdown import DEFAULT_BUDGET_CHARS
from service.catalog.memories import find_memories
from service.catalog.ranking import Scored, apply_identity_bonus, arrange_exports, relevant_hits, retrieve, why_matched
from service.catalog.refs import EntityRef, parse_entity_param
from service.catalog.render import cards, content_of
from service.catalog.rerank import Candidate, RerankResult, rerank
from service.catalog.state import catalog_state
from service.catalog.timing import SearchClock
from service.catalog.waiting import SHOWN_ITEMS, WAITING_SUMMARY_STEP, check_waiting, user_tenants
from service.engine.records import tenant_filter
from service.engine.store import Filter, Match, MatchAny
from service.errors import AgentSearchError, FragmentNotFound, InvalidEntityRef, NotFound, ValidationError
from service.ratelimit import RateLimitExceeded, Surface
from service.validation import BODY_BOUNDED, Fields, bounded_text

if TYPE_CHECKING:
    from service.engine.runtime import Engine

DEFAULT_LIMIT = 10
MAX_LIMIT = 50
DEFAULT_LISTING = 50
MIN_RESPONSE_SIZE = 500
MAX_RESPONSE_SIZE = 200_000
# Entity detail budget when maxResponseSize is not given: a guide over it comes back as contents.
DEFAULT_ENTITY_BUDGET = DEFAULT_BUDGET_CHARS
# Most candidates the rerank stage sees: the whole relevant pool up to this bound (pools over the
# clear-winner gate's 20 always go to the scorer); 50 is MAX_LIMIT, so every shown hit was scored.
RERANK_POOL_MAX = 50
# A longer query is searched by its first MAX_QUERY characters, cut at a word boundary, with a notice.
MAX_QUERY = 2_000
CONTRACT_TOP = 3
PAIRED_PACKAGES = 3


@dataclass(frozen=True)
class SearchRequest:
    query: str | None
    domain: str | None
    entity: list[tuple[str, EntityRef | str]] | None
    limit: int | None
    max_response_size: int | None
    include_hidden: bool
    cursor: ListingCursor | None = None
    # What the request's inputs changed (a query cut to its prefix, a limit clamped): every answer shows them.
    notices: tuple[str, ...] = ()


def parse_request(body: Any) -> SearchRequest:
    """Validate the search body; 400 with what to fix (nothing is searched on bad input)."""
    fields = Fields(body)
    query, query_notice = _bounded_query(fields.str("query", max_length=BODY_BOUNDED))
    domain = fields.str("domain", max_length=200)
    raw_entity = fields.raw("entity")
    limit, limit_notice = fields.clamped_int("limit", minimum=1, maximum=MAX_LIMIT)
    max_size = fields.int("maxResponseSize", minimum=MIN_RESPONSE_SIZE, maximum=MAX_RESPONSE_SIZE)
    include_hidden = fields.bool("includeHiddenPackages")
    raw_cursor = fields.str("cursor", max_length=4_000)
    fields.reject_unknown()
    if domain is not None and not domain.strip():
        raise ValidationError("domain must not be empty; omit it to search every domain")
    entity = None
    if raw_entity is not None:
        if query is not None or domain is not None or raw_cursor is not None:
            raise ValidationError("entity cannot be combined with query, domain or cursor: look up refs, or search, in separate calls")
        entity = parse_entity_param(raw_entity)
    cursor = None
    if raw_cursor is not None:
        if domain is None:
            raise ValidationError("cursor pages a domain listing: pass it with the same domain, as the listing's nextCursor gave it")
        cursor = ListingCursor.decode(raw_cursor, domain.strip())
    notices = tuple(n for n in (query_notice, limit_notice) if n)
    return SearchRequest(query, domain.strip() if domain else None, entity, limit, max_size, include_hidden, cursor, notices)


def _bounded_query(query: str | None) -> tuple[str | None, str | None]:
    """The query as searched: over MAX_QUERY characters, its prefix cut at a word boundary, and the notice."""
    return (None, None) if query is None else bounded_text(query, MAX_QUERY)


@dataclass
class Answer:
    """A search answer: the structured document (markdown is rendered from it) and how to send it."""

    doc: dict[str, Any]
    status: int = 200
    error: AgentSearchError | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return bool(self.doc.get("kind") == "error" or self.error is not None)


@dataclass
class SearchContext:
    engine: Engine
    caller: Caller
    request: SearchRequest
    clock: SearchClock

    @property
    def limit(self) -> int:
        return self.request.limit or DEFAULT_LIMIT


async def run_search(ctx: SearchContext) -> Answer:
    with ctx.clock.phase("rateLimit"):
        exceeded = await ctx.engine.rate_limiter.check(ctx.caller, Surface.CATALOG)
    if exceeded is not None:
        return rate_limited_answer(exceeded)
    if ctx.request.entity is not None:
        return await entity_answer(ctx, ctx.request.entity)
    query = (ctx.request.query or "").strip()
    domain = ctx.request.domain
    with ctx.clock.phase("rowAndRegistryLoad"):
        builtins = await cached_builtin_domains(ctx.engine)
        row = await require_domain(ctx.engine, ctx.caller, domain, builtins) if domain is not None else None
        named_mcp = await mcp_domain_row(ctx.engine, ctx.caller, query) if query.startswith("mcp:") else None
    if row is not None:
        if not query or is_broad(query, builtins, row.id):
            return await domain_listing_answer(ctx, row)
        if ctx.request.cursor is not None:
            raise ValidationError("cursor pages a domain listing, and a query ranks the domain instead: drop cursor, or the query")
        return await ranked_answer(ctx, query, row)
    if is_broad(query, builtins, named_mcp.id if named_mcp else None):
        with ctx.clock.phase("rowAndRegistryLoad"):
            rows = await domain_index(ctx.engine, ctx.caller)
        return domain_index_answer(ctx, query, rows)
    with ctx.clock.phase("identityResolution"):
        exact = await exact_package_answer(ctx, query)
    if exact is not None:
        return exact
    return await ranked_answer(ctx, query, None)


# ---- errors ---------------------------------------------------------------------------------------


def rate_limited_answer(exceeded: RateLimitExceeded) -> Answer:
    error = exceeded.error()
    doc = {
        "kind": "error",
        "error": {"code": error.code, "message": error.message},
        "rateLimit": exceeded.as_dict(),
        "nextStep": f"Back off for {exceeded.retry_after_s}s before searching again.",
    }
    return Answer(doc, status=error.status, error=error, headers=dict(error.headers))


def deadline_answer(deadline_s: float) -> Answer:
    message = f"Search did not finish within {deadline_s:g}s. Retry once, then shorten the query or pass `domain`."
    return Answer({"kind": "error", "error": {"code": "deadline_exceeded", "message": message}, "nextStep": "Retry once, then shorten the query or pass `domain`."})


# ---- entity -------------------------------------------------------------------------------------------


async def entity_answer(ctx: SearchContext, refs: Sequence[tuple[str, EntityRef | str]]) -> Answer:
    budget = (ctx.request.max_response_size or DEFAULT_ENTITY_BUDGET) // len(refs)

    async def one(text: str, ref: EntityRef | str) -> dict[str, Any]:
        if isinstance(ref, str):
            return LookupFailure(text, InvalidEntityRef.code, ref).as_dict()
        try:
            detail = await resolve(ctx.engine, ctx.caller, ref, budget)
        except AgentSearchError as exc:
            return failure(text, exc).as_dict()
        return {"ok": True, **detail}

    with ctx.clock.phase("entityLookup"):
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
        return Answer(doc, status=error.status, error=error)
    doc["nextStep"] = _entity_next_step(results, ctx.engine.settings.runtime_name)
    with_input_notices(ctx, doc)
    return Answer(doc)


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


def domain_index_answer(ctx: SearchContext, query: str, rows: Sequence[DomainRow]) -> Answer:
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
    return fit(ctx, doc)


async def domain_listing_answer(ctx: SearchContext, row: DomainRow) -> Answer:
    """One page of the domain in curated order, from ``cursor`` on; ``nextCursor`` continues it.

    A page that ``maxResponseSize`` trims is answered again with fewer entries, so the next cursor
    starts right after the last entry shown and nothing is skipped."""
    with ctx.clock.phase("loadAndRank"):
        items = await list_domain(ctx.engine, ctx.caller, row.id)
    cursor = ctx.request.cursor
    rest = [p for p in items if listing_key(p) > cursor.after] if cursor is not None else items
    shown = rest[: ctx.request.limit or DEFAULT_LISTING]
    while True:
        answer = fit(ctx, _listing_doc(row, len(items), shown, len(rest) - len(shown), cursor, runtime=ctx.engine.settings.runtime_name))
        kept = len(answer.doc["results"])
        if kept == len(shown):
            return answer
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


async def exact_package_answer(ctx: SearchContext, query: str) -> Answer | None:
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
    await _attach_absorb_steps(ctx.engine, [hit])
    doc: dict[str, Any] = {
        "kind": "exact-package",
        "query": query,
        "mode": "exact",
        "results": cards([hit], runtime=ctx.engine.settings.runtime_name),
        "nextStep": f'Open the package index with search({{ entity: "{package.get("entity")}" }}); for capabilities, describe the task instead.',
    }
    return fit(ctx, doc)


# ---- ranked -------------------------------------------------------------------------------------------------


def ranked_filter(caller: Caller, domain: DomainRow | None, include_hidden: bool) -> Filter:
    if domain is not None:
        server = server_of_domain(domain.id)
        if server is not None:
            return Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.MCP_TOOL.value), Match("server", server)))
        return Filter(must=(Match("tenant", GLOBAL_TENANT), Match("kind", Kind.CAPABILITY.value), Match("domain", domain.id)))
    scope = MatchAny("scope", (SCOPE_RANKED, SCOPE_RANKED_HIDDEN)) if include_hidden else Match("scope", SCOPE_RANKED)
    return tenant_filter(caller.tenants).and_(scope)


async def ranked_answer(ctx: SearchContext, query: str, domain: DomainRow | None) -> Answer:
    engine, caller = ctx.engine, ctx.caller
    state = catalog_state(engine)
    with ctx.clock.phase("featureFlags"):
        flag_on = engine.settings.rerank_enabled
    with ctx.clock.phase("loadAndRank"):
        retrieval = await retrieve(engine, query, ranked_filter(caller, domain, ctx.request.include_hidden))
        candidates = relevant_hits(retrieval.hits)
        apply_identity_bonus(candidates, query)
        q_terms = retrieval.query_terms.split()
        parents = await _export_parents(engine, candidates, ctx.request.include_hidden)
        arranged = arrange_exports(candidates, q_terms, parents)
        if domain is None:
            arranged = await _pair_with_servers(engine, caller, arranged, ctx.request.include_hidden)
        pool = arranged[: max(ctx.limit, RERANK_POOL_MAX)]  # the real pool, so one over 20 reaches the gate
    memories: list[dict[str, Any]] = []
    if domain is None:
        with ctx.clock.phase("memoryEnrichment"):
            memories = await find_memories(engine, caller, retrieval.query_terms, retrieval.vector)
    result = await _rerank_stage(ctx, query, pool, flag_on)
    hits = _reorder(pool, result)[: ctx.limit]
    for hit in hits:
        hit.why = hit.why or why_matched(q_terms, hit.payload)
    _attach_extras(hits)
    await _attach_absorb_steps(engine, hits)
    waiting: dict[str, Any] | None = None
    timed_out = False
    if domain is None:
        with ctx.clock.phase("waitingItems"):
            outcome = await check_waiting(state.waiting_source, engine, caller)
        timed_out = outcome.timed_out
        waiting = _waiting_block(outcome.items, caller) if outcome.items else None
    doc: dict[str, Any] = {
        "kind": "ranked",
        "query": query,
        "domain": domain.id if domain else None,
        "mode": retrieval.mode,
        "results": cards(hits, runtime=engine.settings.runtime_name),
        "memories": memories,
        "notices": list(retrieval.notices),
        "telemetry": {"jevRerank": result.telemetry},
        "phaseTimings": {
            "loadAndRankMs": ctx.clock.phase_ms("loadAndRank"),
            "memoryEnrichmentMs": ctx.clock.phase_ms("memoryEnrichment"),
            "jevRerankMs": round(result.duration_ms, 3),
            "waitingItemsMs": ctx.clock.phase_ms("waitingItems"),
            "waitingItemsTimedOut": timed_out,
        },
    }
    if result.scores:
        for card, hit in zip(doc["results"], hits, strict=True):
            if str(hit.payload.get("key")) in result.scores:
                card["rerankScore"] = round(result.scores[str(hit.payload["key"])], 4)
    if waiting:
        doc["waiting"] = waiting
    doc["nextStep"] = _ranked_next_step(doc["results"])
    return fit(ctx, doc)


async def _rerank_stage(ctx: SearchContext, query: str, pool: Sequence[Scored], flag_on: bool) -> RerankResult:
    """The rerank stage; its ``jevRerank`` timing tile appears only when the stage ran or attempted
    (a gate skip is not a run), and an abandoned search still reports the attempt it cut short."""
    ctx.clock.check()
    started = time.perf_counter()
    try:
        result = await rerank(
            query,
            [_candidate(hit) for hit in pool],
            plan=ctx.caller.plan,
            flag_on=flag_on,
            scorer=catalog_state(ctx.engine).scorer,
            budget_s=ctx.engine.settings.rerank_budget_s,
        )
    except BaseException:
        ctx.clock.add("jevRerank", (time.perf_counter() - started) * 1000)
        raise
    if not str(result.telemetry.get("outcome", "")).startswith("skipped-"):
        ctx.clock.add("jevRerank", result.duration_ms)
    return result


async def _export_parents(engine: Engine, candidates: Sequence[Scored], include_hidden: bool) -> dict[str, Mapping[str, Any]]:
    """Package payloads of export candidates whose package did not rank by itself (visible ones only)."""
    package, export = Kind.PACKAGE.value, Kind.EXPORT.value
    ranked_packages = {str(c.payload.get("package_id")) for c in candidates if c.kind == package}
    wanted = {
        f"{c.payload['tenant']}|{package}|{c.payload['package_id']}": str(c.payload["package_id"])
        for c in candidates
        if c.kind == export and str(c.payload.get("package_id")) not in ranked_packages
    }
    if not wanted:
        return {}
    found = await engine.records(SURFACE_NAME).get_many(list(wanted))
    return {wanted[key]: payload for key, payload in found.items() if include_hidden or not payload.get("hidden")}


async def _pair_with_servers(engine: Engine, caller: Caller, hits: list[Scored], include_hidden: bool) -> list[Scored]:
    """Place the caller's packages that match a connected MCP server right after that server's hit."""
    servers = [h for h in hits if h.kind == Kind.MCP_SERVER.value]
    if not servers:
        return hits
    out = list(hits)
    for server in servers:
        terms = name_terms(str(server.payload.get("server")))
        if not terms:
            continue
        must_not = () if include_hidden else (Match("hidden", True),)
        flt = Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.PACKAGE.value), MatchAny("link_terms", tuple(terms))), must_not=must_not)
        page, _ = await engine.store.scroll(COLLECTION, flt, limit=PAIRED_PACKAGES)
        position = out.index(server)
        for point in page:
            key = point.payload.get("key")
            existing = next((i for i, h in enumerate(out) if h.payload.get("key") == key), None)
            if existing is not None and existing < position:
                continue
            paired = out.pop(existing) if existing is not None else Scored(point.payload, None, 0.0, server.score, server.why)
            paired.extras["rankedWith"] = server.entity
            paired.extras.setdefault("bestActions", [])
            position = out.index(server)
            out.insert(position + 1, paired)
    return out


def _candidate(hit: Scored) -> Candidate:
    payload = hit.payload
    text = f"{payload.get('title')}: {payload.get('summary') or ''} {str(payload.get('description') or '')[:300]}".strip()
    identity = tuple(str(payload.get(k)).lower() for k in ("entity_id", "name_leaf", "name", "tool", "server") if payload.get(k))
    return Candidate(ref=str(payload.get("key")), text=text, score=hit.score, identity_terms=identity)


def _reorder(pool: Sequence[Scored], result: RerankResult) -> list[Scored]:
    by_key = {str(h.payload.get("key")): h for h in pool}
    return [by_key[c.ref] for c in result.candidates if c.ref in by_key]


def _attach_extras(hits: Sequence[Scored]) -> None:
    """Inline export contracts on high-confidence top hits; reconnect steps on integration hits."""
    for position, hit in enumerate(hits):
        if hit.kind == Kind.EXPORT.value and position < CONTRACT_TOP and hit.extras.get("highConfidence"):
            hit.extras["contract"] = export_contract(hit.payload)
        if hit.kind == Kind.INTEGRATION.value:
            step = reconnect_step(hit.payload)
            if step:
                hit.extras["nextStep"] = step


async def waiting_summary(engine: Engine, caller: Caller) -> dict[str, Any]:
    """The full list of the caller's waiting items (the Waiting block shows the first few), without the block's time budget."""
    items = await catalog_state(engine).waiting_source(engine, caller)
    step = (
        "Tell the user what is waiting on them; each item says what they must do, and a cleared item leaves this list."
        if items
        else "Nothing is waiting on the user."
    )
    return {"kind": "waiting", "items": items, "total": len(items), "nextStep": step}


def _waiting_block(items: Sequence[Mapping[str, Any]], caller: Caller) -> dict[str, Any]:
    more = max(0, len(items) - SHOWN_ITEMS)
    return {
        "items": list(items[:SHOWN_ITEMS]),
        "more": more,
        "total": len(items),
        "summary": WAITING_SUMMARY_STEP,
    }


async def _attach_absorb_steps(engine: Engine, hits: Sequence[Scored]) -> None:
    """The absorb step of outdated community forks (it names the platform's calls only where the catalog has them)."""
    outdated = [h for h in hits if h.kind == Kind.PACKAGE.value and (h.payload.get("fork") or {}).get("listingAhead")]
    if not outdated:
        return
    known = await known_capabilities(engine, ABSORB_CAPABILITIES)
    for hit in outdated:
        upstream = str((hit.payload.get("fork") or {}).get("upstream"))
        hit.extras.setdefault("nextStep", absorb_step(upstream, runtime=engine.settings.runtime_name, known=known))


def _ranked_next_step(results: Sequence[Mapping[str, Any]]) -> str:
    """The answer's one next step: the top hit's own step when it has one (reconnect, absorb), else how to use it."""
    if results and results[0].get("nextStep"):
        return str(results[0]["nextStep"])
    if not results:
        return "Rephrase the query as a short task, or call search({}) for the domain index and search({ domain }) to list one domain."
    top = results[0]
    if top.get("contract"):
        return f"Run the inlined execute snippet of {top['entity']}, or open it with search({{ entity: \"{top['entity']}\" }})."
    if top.get("callShape"):
        return f"Call {top['callShape'].split('(')[0]}(params) from execute, or open search({{ entity: \"{top['entity']}\" }}) for its types."
    return f'Open the top hit with search({{ entity: "{top["entity"]}" }}).'


# ---- size ------------------------------------------------------------------------------------------------------


def with_input_notices(ctx: SearchContext, doc: dict[str, Any]) -> None:
    """Put the request's input notices (query cut, limit clamped) ahead of the answer's own, once."""
    own = [n for n in doc.get("notices") or [] if n not in ctx.request.notices]
    if ctx.request.notices:
        doc["notices"] = [*ctx.request.notices, *own]


def fit(ctx: SearchContext, doc: dict[str, Any]) -> Answer:
    """Trim low-ranked results until the markdown fits ``maxResponseSize`` (memories and waiting stay);
    the notices about the request's own inputs come first."""
    with_input_notices(ctx, doc)
    max_size = ctx.request.max_response_size
    if max_size is None:
        return Answer(doc)
    results = doc.get("results") or []
    notices = list(doc.get("notices") or [])
    trimmed = 0
    while len(content_of(doc)) > max_size and results:
        results.pop()
        trimmed += 1
        doc["notices"] = [*notices, f"{trimmed} lower-ranked matches trimmed to fit maxResponseSize={max_size}."]
    return Answer(doc)
