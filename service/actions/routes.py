"""HTTP routes of action search: the template catalog (admin), callers' instances, and the search itself."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from service.actions.ingest import delete_instance, delete_template, write_instances, write_templates
from service.actions.model import SURFACE_NAME, Tier, tenant_of
from service.actions.parsing import parse_instances_body, parse_templates_body, resolve_owner
from service.errors import NotFound, ValidationError
from service.middleware import caller_of
from service.respond import json_response, search_response
from service.state import ENGINE
from service.validation import read_json

log = logging.getLogger(__name__)
routes = web.RouteTableDef()


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
    return json_response(result.as_dict())


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("action template write failed", exc_info=task.exception())


@routes.delete("/v1/actions/templates/{template}")
async def remove_template(request: web.Request) -> web.Response:
    caller_of(request).require_admin()
    key = request.match_info["template"]
    if not await delete_template(request.app[ENGINE], key):
        raise NotFound(f"no template {key!r} in the action catalog")
    return json_response({"deleted": key})


@routes.put("/v1/actions/instances")
async def put_instances(request: web.Request) -> web.Response:
    """Upsert the caller's instances (its own, its org's or teams'; global ones need an admin)."""
    instances = parse_instances_body(await read_json(request), caller_of(request))
    written = await write_instances(request.app[ENGINE], instances)
    return json_response({"instances": written})


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
    return json_response({"deleted": name, "tier": tier.value})


@routes.post("/v1/actions/search")
async def search(request: web.Request) -> web.Response:
    """Action search: ranked (service, action) pairs for a query, or every callable instance for an empty one."""
    return await search_response(request, SURFACE_NAME)
