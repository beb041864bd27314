"""The ranked answer: retrieval, arrangement, the rerank stage, memories and the Waiting block, as phases.

``ranked_hits`` is the search (no rendering); ``render_ranked`` turns its result into the answer.
``loadAndRank`` retrieves and arranges (``ranking``), ``memoryEnrichment`` finds the caller's
memories, ``jevRerank`` reorders the pool (``rerank``), ``waitingItems`` adds the Waiting block; the
deadline is checked before each, and cancelling the search aborts an in-flight rerank.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.answers import SearchContext, answer_of, attach_absorb_steps, fit
from service.catalog.callshapes import export_contract
from service.catalog.domains import DomainRow
from service.catalog.keys import SCOPE_RANKED, SCOPE_RANKED_HIDDEN, Kind, server_of_domain
from service.catalog.lookup import name_terms, reconnect_step
from service.catalog.memories import find_memories
from service.catalog.ranking import (
    RANK_FIELDS,
    Retrieval,
    Scored,
    apply_identity_bonus,
    arrange_exports,
    evidence,
    relevant_hits,
    retrieve,
    score_from,
    why_matched,
)
from service.catalog.render import cards
from service.catalog.rerank import Candidate, RerankResult, rerank
from service.catalog.state import catalog_index, catalog_state
from service.catalog.waiting import WaitingOutcome, check_waiting, user_tenants, waiting_block
from service.engine.records import tenant_filter
from service.engine.store import Filter, Match, MatchAny
from service.engine.surface import SearchAnswer

if TYPE_CHECKING:
    from service.engine.runtime import Engine

# Most candidates the rerank stage sees: the whole relevant pool up to this bound (pools over the
# clear-winner gate's 20 always go to the scorer); 50 is the most a search shows, so every shown hit was scored.
RERANK_POOL_MAX = 50
CONTRACT_TOP = 3
PAIRED_PACKAGES = 3


def ranked_filter(caller: Caller, domain: DomainRow | None, include_hidden: bool) -> Filter:
    if domain is not None:
        server = server_of_domain(domain.id)
        if server is not None:
            return Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.MCP_TOOL.value), Match("server", server)))
        return Filter(must=(Match("tenant", GLOBAL_TENANT), Match("kind", Kind.CAPABILITY.value), Match("domain", domain.id)))
    scope = MatchAny("scope", (SCOPE_RANKED, SCOPE_RANKED_HIDDEN)) if include_hidden else Match("scope", SCOPE_RANKED)
    return tenant_filter(caller.tenants).and_(scope)


@dataclass
class RankedHits:
    """The served ranking of one search, before rendering: the hits as shown (``why``, ``scoreFrom`` and
    extras attached), the caller's memories, the rerank stage's result and the Waiting check's outcome."""

    retrieval: Retrieval
    hits: list[Scored]
    memories: list[dict[str, Any]]
    rerank: RerankResult
    waiting: WaitingOutcome | None


async def ranked_answer(ctx: SearchContext, query: str, domain: DomainRow | None) -> SearchAnswer:
    """The ranked answer: ``ranked_hits``, then rendered (one evidence channel alone when ``ranking`` asks)."""
    flag_on = _rerank_flag(ctx)
    if ctx.request.ranking != "served":
        return await channel_answer(ctx, query, domain)
    return render_ranked(ctx, query, domain, await ranked_hits(ctx, query, domain, flag_on=flag_on))


def _rerank_flag(ctx: SearchContext) -> bool:
    with ctx.deadline.phase("featureFlags"):
        return ctx.engine.settings.rerank_enabled


async def ranked_hits(ctx: SearchContext, query: str, domain: DomainRow | None, *, flag_on: bool | None = None) -> RankedHits:
    """Retrieval and the served ranking (arrangement, rerank, memories, the Waiting check), as phases; no
    rendering. ``flag_on``: whether the rerank stage is enabled (default: read from the settings)."""
    engine, caller = ctx.engine, ctx.caller
    state = catalog_state(engine)
    if flag_on is None:
        flag_on = _rerank_flag(ctx)
    with ctx.deadline.phase("loadAndRank"):
        retrieval = await retrieve(engine, query, ranked_filter(caller, domain, ctx.request.include_hidden), fields=RANK_FIELDS)
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
        with ctx.deadline.phase("memoryEnrichment"):
            memories = await find_memories(engine, caller, retrieval.query_terms, retrieval.vector)
    if flag_on:  # the scorer reads the candidates' descriptions
        pool = await read_whole(engine, pool)
    result = await _rerank_stage(ctx, query, pool, flag_on)
    hits = _reorder(pool, result)[: ctx.limit]
    if not flag_on:
        hits = await read_whole(engine, hits)
    for hit in hits:
        hit.why = (hit.why or why_matched(q_terms, hit.payload)) + evidence(hit)
        hit.extras["scoreFrom"] = score_from(hit)
    _attach_extras(hits)
    await attach_absorb_steps(engine, hits)
    outcome: WaitingOutcome | None = None
    if domain is None:
        with ctx.deadline.phase("waitingItems"):
            outcome = await check_waiting(state.waiting_source, engine, caller)
    return RankedHits(retrieval, hits, memories, result, outcome)


def render_ranked(ctx: SearchContext, query: str, domain: DomainRow | None, ranked: RankedHits) -> SearchAnswer:
    """The served ranking's answer: cards, memories, notices, telemetry, phase timings, the Waiting block."""
    retrieval, hits, result, outcome = ranked.retrieval, ranked.hits, ranked.rerank, ranked.waiting
    waiting = waiting_block(outcome.items) if outcome is not None and outcome.items else None
    doc: dict[str, Any] = {
        "kind": "ranked",
        "query": query,
        "domain": domain.id if domain else None,
        "mode": retrieval.mode,
        "results": cards(hits, runtime=ctx.engine.settings.runtime_name),
        "memories": ranked.memories,
        "notices": list(retrieval.notices),
        **({"intents": retrieval.intents} if len(retrieval.intents) > 1 else {}),
        "telemetry": {"jevRerank": result.telemetry},
        "phaseTimings": {
            "loadAndRankMs": ctx.deadline.phase_ms("loadAndRank"),
            "memoryEnrichmentMs": ctx.deadline.phase_ms("memoryEnrichment"),
            "jevRerankMs": round(result.duration_ms, 3),
            "waitingItemsMs": ctx.deadline.phase_ms("waitingItems"),
            "waitingItemsTimedOut": outcome.timed_out if outcome is not None else False,
        },
    }
    if result.scores:
        for card, hit in zip(doc["results"], hits, strict=True):
            if str(hit.payload.get("key")) in result.scores:
                card["rerankScore"] = round(result.scores[str(hit.payload["key"])], 4)
    if waiting:
        doc["waiting"] = waiting
    doc["nextStep"] = _ranked_next_step(doc["results"])
    return answer_of(ctx, fit(ctx, doc))


async def channel_answer(ctx: SearchContext, query: str, domain: DomainRow | None) -> SearchAnswer:
    """One evidence channel alone (``ranking``: ``lexical`` is BM25, ``dense`` the model's cosine), in its own
    order, with nothing of the served ranking on top: what an evaluation measures the served ranking against."""
    with ctx.deadline.phase("loadAndRank"):
        retrieval = await retrieve(ctx.engine, query, ranked_filter(ctx.caller, domain, ctx.request.include_hidden), mode=ctx.request.ranking)
    hits = retrieval.hits[: ctx.limit]
    q_terms = retrieval.query_terms.split()
    for hit in hits:
        hit.why = why_matched(q_terms, hit.payload)
    doc: dict[str, Any] = {
        "kind": "ranked",
        "query": query,
        "domain": domain.id if domain else None,
        "mode": retrieval.mode,
        "ranking": ctx.request.ranking,
        "results": cards(hits, runtime=ctx.engine.settings.runtime_name),
        "notices": list(retrieval.notices),
        "phaseTimings": {"loadAndRankMs": ctx.deadline.phase_ms("loadAndRank")},
    }
    doc["nextStep"] = _ranked_next_step(doc["results"])
    return answer_of(ctx, fit(ctx, doc))


async def _rerank_stage(ctx: SearchContext, query: str, pool: Sequence[Scored], flag_on: bool) -> RerankResult:
    """The rerank stage; its ``jevRerank`` timing tile appears only when the stage ran or attempted
    (a gate skip is not a run), and an abandoned search still reports the attempt it cut short."""
    ctx.deadline.check()
    started = time.perf_counter()
    try:
        result = await rerank(
            query,
            [_candidate(hit) if flag_on else _bare(hit) for hit in pool],
            plan=ctx.caller.plan,
            flag_on=flag_on,
            scorer=catalog_state(ctx.engine).scorer,
            budget_s=ctx.engine.settings.rerank_budget_s,
        )
    except BaseException:
        ctx.deadline.add("jevRerank", (time.perf_counter() - started) * 1000)
        raise
    if not str(result.telemetry.get("outcome", "")).startswith("skipped-"):
        ctx.deadline.add("jevRerank", result.duration_ms)
    return result


async def read_whole(engine: Engine, hits: list[Scored]) -> list[Scored]:
    """``hits`` with their whole payloads (they were ranked on ``RANK_FIELDS``), in one store call; a
    record deleted since it was ranked drops out."""
    found = await catalog_index(engine).get_many([str(hit.payload.get("key")) for hit in hits])
    kept = []
    for hit in hits:
        payload = found.get(str(hit.payload.get("key")))
        if payload is not None:
            hit.payload = payload
            kept.append(hit)
    return kept


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
    found = await catalog_index(engine).get_many(list(wanted))
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
        page, _ = await catalog_index(engine).scroll(flt, limit=PAIRED_PACKAGES)
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


def _bare(hit: Scored) -> Candidate:
    """A candidate for a stage that is off: its gate skips it before any text is read."""
    return Candidate(ref=str(hit.payload.get("key")), text="", score=hit.score)


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
