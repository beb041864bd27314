"""The admin dashboard's HTTP routes: the HTML pages under ``/admin`` (``pages``), then the JSON API
under ``/admin/api`` (``api``).

Every handler authenticates itself (the auth middleware lets ``/admin`` through for the login
page): ``require_admin`` for reads, ``require_admin_action`` (CSRF for cookie sessions) for
actions. Every route leaves an access-log line (``handlers.access_logged``).
"""

from __future__ import annotations

from aiohttp import web

from service.admin.analytics import routes as analytics_routes
from service.admin.api import routes as api_routes
from service.admin.handlers import access_logged
from service.admin.pages import routes as page_routes
from service.admin.playground import routes as playground_routes


def _logged(route: web.AbstractRouteDef) -> web.AbstractRouteDef:
    assert isinstance(route, web.RouteDef)
    return web.RouteDef(route.method, route.path, access_logged(route.handler), route.kwargs)


routes: list[web.AbstractRouteDef] = [_logged(route) for route in (*page_routes, *api_routes, *analytics_routes, *playground_routes)]
