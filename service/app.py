"""The aiohttp application factory: state, middleware, routes and the resources' lifecycles."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from service.admin.routes import routes as admin_routes
from service.admin.sampler import admin_context
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.errors import AgentSearchError, EmbeddingUnavailable
from service.health import metrics_middleware
from service.health import routes as health_routes
from service.mcp.http import routes as mcp_routes
from service.mcp.jsonrpc import http_error_response as mcp_error_response
from service.middleware import (
    auth_middleware,
    deadline_middleware,
    error_middleware,
    request_id_middleware,
    server_timing_on_prepare,
)
from service.settings import Settings
from service.state import ENGINE, ERROR_RENDERERS, JOB_NAMES, SETTINGS, WORKER_STATE
from service.status import routes as status_routes
from service.surfaces import setup_surface_routes, surfaces
from workers.jobs import registered_job_names

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, engine: Engine | None = None) -> web.Application:
    """The service app. Pass ``engine`` to share one already open (tests, CLI); otherwise it opens its own."""
    app = web.Application(
        client_max_size=settings.client_max_size,
        middlewares=[
            request_id_middleware,
            metrics_middleware,
            error_middleware,
            deadline_middleware(settings.request_deadline_s),
            auth_middleware,
        ],
    )
    app[SETTINGS] = settings
    app[JOB_NAMES] = registered_job_names()
    renderers: dict[str, Callable[[AgentSearchError], web.Response]] = {"/mcp": mcp_error_response}  # an MCP client reads JSON-RPC errors
    app[ERROR_RENDERERS] = renderers
    app.cleanup_ctx.append(_engine_context(engine))
    app.cleanup_ctx.append(_model_preload_context)
    if settings.runs_worker_in_process:
        app.cleanup_ctx.append(_in_process_worker_context(node_only=False))
    elif settings.runs_node_worker_in_process:
        app.cleanup_ctx.append(_in_process_worker_context(node_only=True))
    app.cleanup_ctx.append(admin_context)
    app.on_response_prepare.append(server_timing_on_prepare)
    app.router.add_routes(health_routes)
    app.router.add_routes(status_routes)
    app.router.add_routes(admin_routes)
    app.router.add_routes(mcp_routes)
    setup_surface_routes(app)
    return app


def _engine_context(shared: Engine | None) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        engine = shared or await open_engine(app[SETTINGS], surfaces())
        app[ENGINE] = engine
        yield
        if shared is None:
            await engine.close()

    return context


async def _model_preload_context(app: web.Application) -> AsyncIterator[None]:
    """Load the default model in the background: the service answers (lexically) while it loads."""
    embedder = app[ENGINE].embedders.default
    load = getattr(embedder, "load", None)
    task = asyncio.create_task(_preload(load)) if load is not None else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _preload(load: Callable[[], Awaitable[None]]) -> None:
    with contextlib.suppress(EmbeddingUnavailable):
        await load()


def _in_process_worker_context(*, node_only: bool) -> Callable[[web.Application], AsyncIterator[None]]:
    """The embedded default runs the arq workers in the service's own event loop; a workspace node's
    front end in production (``node_only``) runs there only the worker of its node queue, as the one
    process that holds the node's workspace caches. On the embedded store the workers first claim the
    queue prefix: a live instance of another data directory holding it stops the start."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        from service.engine.deployment import claim_for_workers
        from workers.settings import build_workers, run_workers, stop_workers

        claim = await claim_for_workers(app[ENGINE])
        workers = build_workers(app[ENGINE], node_only=node_only)
        task = asyncio.create_task(run_workers(workers))
        app[WORKER_STATE] = {"workers": workers, "task": task}
        yield
        stop_workers(workers)
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=app[SETTINGS].job_timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if claim is not None:
            await claim.release()

    return context
