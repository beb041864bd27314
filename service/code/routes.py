"""HTTP routes of workspace code search: register, inspect, list, delete and search workspaces.

A workspace is visible only to its owner (the registering user's tenant); any other caller gets
the same 404 as for an id that does not exist, so nobody learns another user's workspace exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from service.code.parsing import parse_search_body
from service.code.registration import register_workspace
from service.code.runtime import workspaces_of
from service.code.search import SearchAnswer, check_regex, check_scope, search_workspace
from service.middleware import caller_of, record_timing
from service.ratelimit import Surface
from service.state import ENGINE
from service.validation import read_json

if TYPE_CHECKING:
    from service.auth import Caller
    from service.code.workspace import Workspace
    from service.engine.runtime import Engine

routes = web.RouteTableDef()


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


@routes.post("/v1/workspaces")
async def register(request: web.Request) -> web.Response:
    """Register a root under one of the caller's bases (201), or update the settings of one already registered (200)."""
    body, created = await register_workspace(request.app[ENGINE], caller_of(request), await read_json(request))
    return _json(body, status=201 if created else 200)


@routes.get("/v1/workspaces")
async def list_workspaces(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    caller = caller_of(request)
    owned = workspaces_of(engine).registry.owned_by((caller.user_tenant,))
    return _json({"workspaces": [{"id": w.id, "root": str(w.root), "search": w.search.as_dict(), "warm": w.warm} for w in owned]})


@routes.get("/v1/workspaces/{id}")
async def workspace_status(request: web.Request) -> web.Response:
    """Index state: files, chunks, embedded, pending, cold, warming, skip counts, last revalidation."""
    engine = request.app[ENGINE]
    workspaces = workspaces_of(engine)
    workspace = workspaces.owned((caller_of(request).user_tenant,), request.match_info["id"])
    return _json(await workspaces.status(workspace))


@routes.delete("/v1/workspaces/{id}")
async def delete_workspace(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    workspaces = workspaces_of(engine)
    workspace = workspaces.owned((caller_of(request).user_tenant,), request.match_info["id"])
    await workspaces.delete(workspace)
    return _json({"deleted": workspace.id})


@routes.post("/v1/workspaces/{id}/search")
async def search(request: web.Request) -> web.Response:
    """Workspace code search: text-first output, results, notices and metadata."""
    engine = request.app[ENGINE]
    caller = caller_of(request)
    workspace = workspaces_of(engine).owned((caller.user_tenant,), request.match_info["id"])
    answer = await search_for_caller(engine, caller, workspace, await read_json(request))
    for phase, duration_ms in answer.timings_ms.items():
        record_timing(request, phase, duration_ms)
    return _json(answer.as_dict())


async def search_for_caller(
    engine: Engine, caller: Caller, workspace: Workspace, body: Any, *, deadline_s: float | None = None
) -> SearchAnswer:
    """Validate a search body against ``workspace``, count it against the caller's rate limit, search
    within ``deadline_s`` (default: the request deadline) (this route and the MCP ``code_search`` tool)."""
    search_request = parse_search_body(body)
    workspaces_of(engine).require_root(workspace)  # a root that is gone is a 409, not a scope that does not exist
    check_scope(workspace, search_request)  # bad input is refused before the rate limit counts it
    check_regex(search_request)
    exceeded = await engine.rate_limiter.check(caller, Surface.CODE)
    if exceeded is not None:
        raise exceeded.error()
    deadline_s = engine.settings.request_deadline_s if deadline_s is None else deadline_s
    return await search_workspace(engine, workspace, search_request, deadline_s=deadline_s)
