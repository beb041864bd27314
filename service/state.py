"""The application's state keys (``web.AppKey``), declared once for every module that reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from service.engine.runtime import Engine
    from service.settings import Settings

SETTINGS = web.AppKey["Settings"]("settings")
ENGINE = web.AppKey["Engine"]("engine")
WORKER_STATE = web.AppKey[dict]("worker_state")
