"""``GET /v1/index/status``: per surface, the caller's records, embedded and pending counts."""

from __future__ import annotations

from aiohttp import web

from service.middleware import caller_of
from service.state import ENGINE

routes = web.RouteTableDef()


@routes.get("/v1/index/status")
async def index_status(request: web.Request) -> web.Response:
    """Counts over the caller's visible records (every tenant for an admin), so scripts can wait for embedding."""
    engine = request.app[ENGINE]
    caller = caller_of(request)
    tenants = None if caller.admin else list(caller.tenants)
    surfaces = {}
    for surface, index in engine.surfaces.items():
        surfaces[surface] = await index.counts(tenants)
    default = engine.embedders.default
    return web.json_response(
        {
            "surfaces": surfaces,
            "store": engine.store.backend,
            "model": default.model if default is not None else None,
            "scope": "all-tenants" if caller.admin else "caller",
        }
    )
