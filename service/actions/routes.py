"""HTTP routes of action search: the template catalog (admin), callers' instances, and the search itself."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from service.actions.ingest import delete_instance, delete_template, write_instances, write_templates
from service.actions.model import Tier, tenant_of
from service.actions.parsing import parse_instances_body, parse_search_body, parse_templates_body, resolve_owner
from service.actions.search import SearchAnswer, search_actions
from service.errors import NotFound, ValidationError
from service.middleware import caller_of, record_timing
from service.ratelimit import Surface
from service.state import ENGINE
from service.validation import read_json

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)
routes = web.RouteTableDef()


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


@routes.put("/v1/actions/templates")
async def put_templates(request: web.Request) -> web.Response:
    """Admin: upsert whole templates (each one's action list replaces the stored one)."""
    caller_of(request).require_admin()
    templates = parse_templates_body(await read_json(request))
    # A template of 20k actions can outlast the request deadline on a busy machine. The write is
    # shielded so a deadline never leaves it half done: it finishes in the background, and the
    # client's retry (idempotent) waits for it and then finds nothing left to write.
    write = asyncio.ensure_future(write_templates(request.app[ENGINE], templates))
    write.add_done_callback(_log_failure)
    result = await asyncio.shield(write)
    return _json(result.as_dict())


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("action template write failed", exc_info=task.exception())


@routes.delete("/v1/actions/templates/{template}")
async def remove_template(request: web.Request) -> web.Response:
    caller_of(request).require_admin()
    key = request.match_info["template"]
    if not await delete_template(request.app[ENGINE], key):
        raise NotFound(f"no template {key!r} in the action catalog")
    return _json({"deleted": key})


@routes.put("/v1/actions/instances")
async def put_instances(request: web.Request) -> web.Response:
    """Upsert the caller's instances (its own, its org's or teams'; global ones need an admin)."""
    instances = parse_instances_body(await read_json(request), caller_of(request))
    written = await write_instances(request.app[ENGINE], instances)
    return _json({"instances": written})


@routes.delete("/v1/actions/instances/{name}")
async def remove_instance(request: web.Request) -> web.Response:
    """Delete one instance; ``?tier=`` (default user) and ``?owner=`` (default the caller's own) say whose."""
    caller = caller_of(request)
    name = request.match_info["name"]
    unknown = sorted(set(request.query) - {"tier", "owner"})
    if unknown:
        raise ValidationError(f"unknown query parameter {', '.join(map(repr, unknown))}; allowed: owner, tier")
    try:
        tier = Tier(request.query.get("tier", Tier.USER.value))
    except ValueError:
        raise ValidationError(f"tier must be one of {', '.join(t.value for t in Tier)}") from None
    owner, org = resolve_owner(tier, request.query.get("owner"), caller, "instance")
    if not await delete_instance(request.app[ENGINE], tenant_of(tier, owner, org), name):
        raise NotFound(f"no {tier.value} instance named {name!r}")
    return _json({"deleted": name, "tier": tier.value})


@routes.post("/v1/actions/search")
async def search(request: web.Request) -> web.Response:
    """Action search: ranked (service, action) pairs for a query, or every callable instance for an empty one."""
    answer = await search_for_caller(request.app[ENGINE], caller_of(request), await read_json(request))
    for phase, duration_ms in answer.timings_ms.items():
        record_timing(request, phase, duration_ms)
    return _json(answer.body)


async def search_for_caller(engine: Engine, caller: Caller, body: Any) -> SearchAnswer:
    """Validate a search body, count it against the caller's rate limit, search (this route and the
    MCP ``action_search`` tool)."""
    search_request = parse_search_body(body)
    exceeded = await engine.rate_limiter.check(caller, Surface.ACTIONS)
    if exceeded is not None:
        raise exceeded.error()
    return await search_actions(engine, caller, search_request)
