"""The dashboard's search analytics: per surface, the last 24 hours' top queries, queries with no result and slowest queries.

``GET /admin/analytics`` is the page (server-rendered, a tenant and surface filter as a plain
form) and ``GET /admin/api/analytics`` the same report as JSON. Queries are tenant data: both
need an admin, as every dashboard route. The report is read from the buckets that
``service.engine.analytics`` records each search into.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from service.admin.auth import require_admin
from service.admin.handlers import bounded_int, json_response, redis_guard, state_of
from service.admin.pages import _chrome, _page, _page_session, page_tally
from service.engine.analytics import WINDOW_HOURS, read_analytics
from service.errors import ValidationError
from service.state import ENGINE

routes = web.RouteTableDef()

PARAMS = ("tenant", "surface", "limit")
DEFAULT_ROWS, MAX_ROWS = 20, 100
MAX_TENANT_CHARS = 200


@dataclass(frozen=True)
class AnalyticsQuery:
    """The report asked for: one tenant or all, one surface or all, rows per list."""

    tenant: str | None
    surface: str | None
    limit: int


def parse_analytics_query(request: web.Request, *, strict: bool) -> AnalyticsQuery:
    """The filters from the query string; ``strict`` (the API) refuses unknown or empty parameters,
    the page's form sends empty selects meaning "all"."""
    params = request.query
    if strict:
        unknown = sorted(set(params) - set(PARAMS))
        if unknown:
            raise ValidationError(f"unknown query parameter(s) {', '.join(unknown)}; use {', '.join(PARAMS)}")
        empty = [name for name in PARAMS if name in params and not params[name].strip()]
        if empty:
            raise ValidationError(f"query parameter(s) {', '.join(empty)} are empty; give a value or leave the parameter out")
    tenant = params.get("tenant", "").strip()
    if len(tenant) > MAX_TENANT_CHARS:
        raise ValidationError(f"tenant is longer than {MAX_TENANT_CHARS} characters; give a tenant as the page lists it, e.g. org:acme")
    surface = params.get("surface", "").strip()
    surfaces = sorted(request.app[ENGINE].searches)
    if surface and surface not in surfaces:
        raise ValidationError(f"surface must be one of {', '.join(surfaces)}, got {surface!r}")
    return AnalyticsQuery(tenant=tenant or None, surface=surface or None, limit=bounded_int(params, "limit", DEFAULT_ROWS, 1, MAX_ROWS))


async def _report(request: web.Request, query: AnalyticsQuery) -> dict[str, object]:
    engine = request.app[ENGINE]
    surfaces = [query.surface] if query.surface else sorted(engine.searches)
    report = await read_analytics(engine, surfaces, tenant=query.tenant, limit=query.limit)
    return report.as_dict()


@routes.get("/admin/api/analytics")
@redis_guard
async def api_analytics(request: web.Request) -> web.Response:
    """The last 24 hours per surface: ``top``, ``no_results`` and ``slowest`` queries, for ``tenant`` alone when given."""
    require_admin(request)
    return json_response(await _report(request, parse_analytics_query(request, strict=True)))


@routes.get("/admin/analytics")
@redis_guard
async def analytics_page(request: web.Request) -> web.Response:
    """The analytics page, fully rendered on the server (readable with JavaScript off)."""
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    query = parse_analytics_query(request, strict=False)
    report = await _report(request, query)
    return _page(
        "analytics.html",
        **_chrome(request, session, await page_tally(state_of(request)), "analytics"),
        report=report,
        query=query,
        all_surfaces=sorted(request.app[ENGINE].searches),
        window_hours=WINDOW_HOURS,
        notice=None,
    )
