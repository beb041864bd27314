"""HTTP routes of catalog search: ingest (``PUT``), delete (``DELETE``), search (``POST``) and the waiting list (``GET``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from service.auth import Caller
from service.catalog.domains import refresh_domain_stats
from service.catalog.ingest import (
    delete_entity,
    lint_guide,
    refuse_repeated_entities,
    require_rights,
    resolve_owner,
    write_entities,
)
from service.catalog.keys import Kind, record_key
from service.catalog.models import Capability, Domain, Guide, parse_entity
from service.catalog.render import content_of
from service.catalog.search import (
    Answer,
    SearchContext,
    SearchRequest,
    deadline_answer,
    parse_request,
    run_search,
    waiting_summary,
)
from service.catalog.state import catalog_state
from service.catalog.timing import SearchAbandoned, SearchClock
from service.errors import ValidationError
from service.middleware import caller_of, record_timing
from service.state import ENGINE
from service.validation import Fields, read_json

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

routes = web.RouteTableDef()

MAX_ENTITIES = 1000
# Our own deadline fires a little before the deadline middleware's, so the caller gets the
# isError answer ("Search did not finish within 20s") rather than a bare 504.
_DEADLINE_MARGIN_S = 0.5


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers)


@routes.put("/v1/catalog/entities")
async def put_entities(request: web.Request) -> web.Response:
    """Validate every entity first (nothing is written on a bad one), then write them all."""
    engine = request.app[ENGINE]
    caller = caller_of(request)
    fields = Fields(await read_json(request))
    raw = fields.list("entities", required=True, max_items=MAX_ENTITIES)
    owner = fields.str("owner", max_length=200)
    fields.reject_unknown()
    if not raw:
        raise ValidationError("entities is empty; send 1-1000 entities")
    entities = [parse_entity(item, f"entities[{i}]") for i, item in enumerate(raw)]
    for i, entity in enumerate(entities):
        if isinstance(entity, Guide):
            lint_guide(entity, f"entities[{i}].markdown")
    require_rights(caller, entities)
    owner_tenant = resolve_owner(caller, owner)
    refuse_repeated_entities(entities, owner_tenant)
    index = catalog_state(engine).index
    capabilities = [e for e in entities if isinstance(e, Capability)]
    before = await _previous_domains(index, [c.id for c in capabilities])
    added: dict[str, list[tuple[int, str]]] = {}
    for capability in capabilities:
        added.setdefault(capability.domain, []).append((capability.order, capability.id))
    # Domains a capability left, and re-described domains, are recounted in full.
    full = {before[c.id] for c in capabilities if c.id in before and before[c.id] != c.domain}
    full |= {e.id for e in entities if isinstance(e, Domain)}
    summaries = await write_entities(index, entities, owner_tenant)
    if added or full:
        await refresh_domain_stats(index, set(added) | full, {d: v for d, v in added.items() if d not in full})
    return _json({"written": len(summaries), "records": sum(s.records for s in summaries), "owner": owner_tenant, "entities": [s.as_dict() for s in summaries]})


async def _previous_domains(index: Any, capability_ids: list[str]) -> dict[str, str]:
    """Capability id -> the domain it had before this write (a capability may move between domains)."""
    previous: dict[str, str] = {}
    for start in range(0, len(capability_ids), 1024):
        keys = [record_key("global", Kind.CAPABILITY, cap_id) for cap_id in capability_ids[start : start + 1024]]
        found = await index.get_many(keys)
        previous.update({str(p.get("entity_id")): str(p.get("domain")) for p in found.values() if p.get("domain")})
    return previous


@routes.delete("/v1/catalog/entities/{ref}")
async def delete_entity_route(request: web.Request) -> web.Response:
    """Delete ``{type}:{id}`` of the caller (or ``?owner=org`` / ``team:<t>``); 404 if that owner has none."""
    engine = request.app[ENGINE]
    caller = caller_of(request)
    ref = request.match_info["ref"]
    entity_type, colon, entity_id = ref.partition(":")
    if not colon:
        raise ValidationError(f"{ref!r} is not a ref: use {{type}}:{{id}}, e.g. package:home-controls")
    owner_tenant = resolve_owner(caller, request.query.get("owner"))
    index = catalog_state(engine).index
    domain = None
    if entity_type == "capability":
        existing = await index.get(record_key("global", Kind.CAPABILITY, entity_id))
        domain = str(existing.get("domain")) if existing else None
    removed = await delete_entity(index, caller, entity_type, entity_id, owner_tenant)
    if entity_type == "capability" and domain:
        await refresh_domain_stats(index, [domain])
    elif entity_type == "domain":
        await refresh_domain_stats(index, [entity_id])  # capabilities still naming it keep an undeclared row
    return _json({"deleted": ref, "records": removed})


@routes.get("/v1/catalog/waiting")
async def waiting(request: web.Request) -> web.Response:
    """Everything waiting on the caller (the Waiting block of ranked search shows the first few)."""
    doc = await waiting_summary(request.app[ENGINE], caller_of(request))
    return _json({"content": content_of(doc), "structuredContent": doc})


@routes.post("/v1/catalog/search")
async def search(request: web.Request) -> web.Response:
    """Catalog search: entity lookups, domain index and listings, exact packages, ranked hits."""
    search_request = parse_request(await read_json(request))
    answer, clock = await search_within_deadline(request.app[ENGINE], caller_of(request), search_request)
    return _respond(request, answer, clock)


async def search_within_deadline(engine: Engine, caller: Caller, search_request: SearchRequest) -> tuple[Answer, SearchClock]:
    """One search under the request deadline (this route and the MCP ``search`` tool): past it,
    the ``Search did not finish within 20s`` answer, and the abandoned search stops."""
    deadline_s = engine.settings.request_deadline_s
    clock = SearchClock(max(0.05, deadline_s - min(_DEADLINE_MARGIN_S, deadline_s * 0.1)))
    task = asyncio.create_task(run_search(SearchContext(engine, caller, search_request, clock)))
    done, _ = await asyncio.wait({task}, timeout=clock.remaining_s())
    if task in done:
        try:
            return task.result(), clock
        except SearchAbandoned:
            return deadline_answer(deadline_s), clock
    clock.abandoned = True
    task.cancel()  # aborts an in-flight rerank; phases not yet started never run
    with contextlib.suppress(asyncio.CancelledError, SearchAbandoned):
        await task
    log.warning("catalog search abandoned at the deadline", extra={"deadline_s": deadline_s, "phases": [p for p, _ in clock.phases]})
    return deadline_answer(deadline_s), clock


def answer_body(answer: Answer, clock: SearchClock) -> dict[str, Any]:
    """The answer as sent: markdown ``content``, ``structuredContent``, ``isError``, ``timing`` (and ``error``)."""
    body: dict[str, Any] = {
        "content": content_of(answer.doc),
        "structuredContent": answer.doc,
        "isError": answer.is_error,
        "timing": clock.timing(),
    }
    if answer.error is not None:
        body["error"] = answer.error.body()["error"]
    return body


def _respond(request: web.Request, answer: Answer, clock: SearchClock) -> web.Response:
    body = answer_body(answer, clock)
    for tile in body["timing"]["serverTiming"]:
        record_timing(request, tile["name"], tile["durationMs"])
    return _json(body, status=answer.status, headers=answer.headers or None)
