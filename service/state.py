"""The application's state keys (``web.AppKey``), declared once for every module that reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from service.engine.runtime import Engine
    from service.settings import Settings

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
ENGINE: web.AppKey[Engine] = web.AppKey("engine")
WORKER_STATE: web.AppKey[dict[str, Any]] = web.AppKey("worker_state")
