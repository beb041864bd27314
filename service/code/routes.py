"""HTTP routes of workspace code search: register, inspect, list, delete and search workspaces.

A workspace is visible only to its owner (the registering user's tenant); any other caller gets
the same 404 as for an id that does not exist, so nobody learns another user's workspace exists.
"""

from __future__ import annotations

from aiohttp import web

from service.code.model import SURFACE_NAME
from service.code.registration import register_workspace
from service.code.state import workspaces_of
from service.code.status import index_status
from service.middleware import caller_of
from service.respond import json_response, search_response
from service.state import ENGINE
from service.validation import read_json

routes = web.RouteTableDef()


@routes.post("/v1/workspaces")
async def register(request: web.Request) -> web.Response:
    """Register a root under one of the caller's bases (201), or update the settings of one already registered (200)."""
    body, created = await register_workspace(request.app[ENGINE], caller_of(request), await read_json(request))
    return json_response(body, status=201 if created else 200)


@routes.get("/v1/workspaces")
async def list_workspaces(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    caller = caller_of(request)
    owned = workspaces_of(engine).registry.owned_by((caller.user_tenant,))
    return json_response({"workspaces": [{"id": w.id, "root": str(w.root), "search": w.search.as_dict(), "warm": w.warm} for w in owned]})


@routes.get("/v1/workspaces/{id}")
async def workspace_status(request: web.Request) -> web.Response:
    """Index state: files, chunks, embedded, pending, cold, warming and its progress, skip counts, last revalidation."""
    engine = request.app[ENGINE]
    workspaces = workspaces_of(engine)
    workspace = workspaces.owned((caller_of(request).user_tenant,), request.match_info["id"])
    return json_response(await index_status(workspaces, workspace))


@routes.delete("/v1/workspaces/{id}")
async def delete_workspace(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    workspaces = workspaces_of(engine)
    workspace = workspaces.owned((caller_of(request).user_tenant,), request.match_info["id"])
    await workspaces.delete(workspace)
    return json_response({"deleted": workspace.id})


@routes.post("/v1/workspaces/{id}/search")
async def search(request: web.Request) -> web.Response:
    """Workspace code search: text-first output, results, notices and metadata."""
    return await search_response(request, SURFACE_NAME, target=request.match_info["id"])
