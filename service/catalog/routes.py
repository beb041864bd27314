"""HTTP routes of catalog search: ingest (``PUT``), delete (``DELETE``), search (``POST``) and the waiting list (``GET``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from service.catalog.domains import refresh_domain_stats
from service.catalog.ingest import (
    delete_entity,
    lint_guide,
    refuse_repeated_entities,
    require_rights,
    resolve_owner,
    write_entities,
)
from service.catalog.keys import SURFACE_NAME, Kind, record_key
from service.catalog.model import Capability, Domain, Guide
from service.catalog.parsing import parse_entity
from service.catalog.render import content_of
from service.catalog.state import catalog_state
from service.catalog.waiting import waiting_summary
from service.engine.records import RecordIndex
from service.errors import ValidationError
from service.middleware import caller_of
from service.respond import json_response, search_response
from service.state import ENGINE
from service.validation import Fields, read_json

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

routes = web.RouteTableDef()

MAX_ENTITIES = 1000


@routes.put("/v1/catalog/entities")
async def put_entities(request: web.Request) -> web.Response:
    """Validate every entity first (nothing is written on a bad one), then write them all."""
    return json_response(await ingest_entities(request.app[ENGINE], caller_of(request), await read_json(request)))


async def ingest_entities(engine: Engine, caller: Caller, body: Any) -> dict[str, Any]:
    """The ``PUT /v1/catalog/entities`` body of ``caller`` written, and the answer: the one ingest path
    behind the route and every in-process loader."""
    fields = Fields(body)
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
    return {"written": len(summaries), "records": sum(s.records for s in summaries), "owner": owner_tenant, "entities": [s.as_dict() for s in summaries]}


async def _previous_domains(index: RecordIndex, capability_ids: list[str]) -> dict[str, str]:
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
    return json_response({"deleted": ref, "records": removed})


@routes.get("/v1/catalog/waiting")
async def waiting(request: web.Request) -> web.Response:
    """Everything waiting on the caller (the Waiting block of ranked search shows the first few)."""
    doc = await waiting_summary(request.app[ENGINE], caller_of(request))
    return json_response({"content": content_of(doc), "structuredContent": doc})


@routes.post("/v1/catalog/search")
async def search(request: web.Request) -> web.Response:
    """Catalog search: entity lookups, domain index and listings, exact packages, ranked hits."""
    return await search_response(request, SURFACE_NAME)
