"""The admin dashboard's HTTP routes: the HTML pages under ``/admin`` (``pages``), then the JSON API
under ``/admin/api`` (``api``).

Every handler authenticates itself (the auth middleware lets ``/admin`` through for the login
page): ``require_admin`` for reads, ``require_admin_action`` (CSRF for cookie sessions) for
actions.
"""

from __future__ import annotations

from aiohttp import web

from service.admin.api import routes as api_routes
from service.admin.pages import routes as page_routes

routes: list[web.AbstractRouteDef] = [*page_routes, *api_routes]
