"""The application's state keys (``web.AppKey``), declared once for every module that reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from service.engine.runtime import Engine
    from service.errors import AgentSearchError
    from service.settings import Settings

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
ENGINE: web.AppKey[Engine] = web.AppKey("engine")
WORKER_STATE: web.AppKey[dict[str, Any]] = web.AppKey("worker_state")
JOB_NAMES: web.AppKey[frozenset[str]] = web.AppKey("job_names")
"""Every job a worker of this deployment runs (the admin's retry and warm actions check it). Set by
the app, which composes the workers' job table."""
ERROR_RENDERERS: web.AppKey[dict[str, Callable[[AgentSearchError], web.Response]]] = web.AppKey("error_renderers")
"""Path -> how an error on that path is answered, when not as ``{error: {code, message}}`` (``/mcp``:
a JSON-RPC error body). Set by the app, which knows the protocols mounted on it."""
