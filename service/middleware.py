"""HTTP middleware: request ids, the request deadline, JSON errors, authentication and Server-Timing."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from service.auth import Caller, bearer_token, verify_token_for
from service.engine.deadline import request_deadline
from service.engine.store import StoreFullError
from service.errors import (
    AgentSearchError,
    DeadlineExceeded,
    InsufficientStorage,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)
from service.state import ENGINE, ERROR_RENDERERS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REQUEST_ID = contextvars.ContextVar[str]("request_id", default="-")
CALLER_KEY = web.RequestKey("caller", Caller)
TIMINGS_KEY = web.RequestKey("timings", list)
STARTED_KEY = web.RequestKey("started", float)
# Paths that answer without a token: probes, metrics, the contract and the dashboard's own login.
PUBLIC_PREFIXES = ("/healthz", "/readyz", "/metrics", "/openapi.json", "/openapi.yaml", "/admin")


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every log record emitted while a request is handled."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


def error_response(error: AgentSearchError) -> web.Response:
    return web.Response(
        body=orjson.dumps(error.body()),
        status=error.status,
        content_type="application/json",
        headers=error.headers,
    )


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = request.headers.get("X-Request-Id") or os.urandom(8).hex()
    token = REQUEST_ID.set(request_id[:64])
    request[STARTED_KEY] = time.perf_counter()
    request[TIMINGS_KEY] = []
    try:
        response = await handler(request)
    finally:
        REQUEST_ID.reset(token)
    response.headers["X-Request-Id"] = request_id[:64]
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as ``{error: {code, message}}``; aiohttp's own HTTP errors keep their headers."""
    try:
        return await handler(request)
    except AgentSearchError as exc:
        render = request.app.get(ERROR_RENDERERS, {}).get(request.path)
        return render(exc) if render is not None else error_response(exc)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(PayloadTooLarge(f"request body is too large ({exc.text}); send less per request"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        message = {404: f"no route for {request.method} {request.path}", 405: f"{request.method} is not allowed on {request.path}"}.get(
            exc.status, exc.reason
        )
        headers = {k: v for k, v in exc.headers.items() if k.lower() not in {"content-type", "content-length"}}
        return web.Response(body=orjson.dumps({"error": {"code": code, "message": message}}), status=exc.status, content_type="application/json", headers=headers)
    except StoreFullError as exc:
        return error_response(InsufficientStorage(str(exc)))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error", extra={"path": request.path})
        body = {"error": {"code": "internal", "message": "internal error; the request id in X-Request-Id identifies it in the logs"}}
        return web.Response(body=orjson.dumps(body), status=500, content_type="application/json")


def deadline_middleware(deadline_s: float) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Answer 504 with a clear body when a request runs past the deadline; the handler is cancelled.

    An answer that comes back after the deadline all the same (the cancellation consumed on the
    way) is late: it is replaced by the 504 too, so the deadline holds whatever the handler does."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/admin") or (request.path == "/mcp" and request.method == "GET"):
            return await handler(request)  # long-lived streams and the dashboard have no deadline
        timer = asyncio.timeout(deadline_s)  # in the request's own task: no task per request
        try:
            async with timer:
                with request_deadline(deadline_s):
                    response = await handler(request)
        except TimeoutError:
            if not timer.expired():  # a timeout of the handler's own (a dependency's), not the deadline
                raise Unavailable("a dependency of the service did not answer in time; retry once") from None
            raise _past(deadline_s) from None
        if timer.expired() and not response.prepared:  # a response already sent cannot be taken back
            raise _past(deadline_s)
        return response

    return middleware


def _past(deadline_s: float) -> DeadlineExceeded:
    return DeadlineExceeded(f"request did not finish within {deadline_s:g}s; retry once, then narrow the request")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Verify the bearer token of every ``/v1`` (and ``/mcp``) call and attach the caller."""
    if request.path.startswith("/v1/") or request.path == "/mcp":
        engine = request.app[ENGINE]
        token = bearer_token(request.headers.get("Authorization"))
        request[CALLER_KEY] = verify_token_for(engine.settings, engine.jwt_secret, token)
    elif not request.path.startswith(PUBLIC_PREFIXES) and request.path != "/":
        raise NotFound(f"no route for {request.method} {request.path}")
    return await handler(request)


def caller_of(request: web.Request) -> Caller:
    caller: Caller = request[CALLER_KEY]
    return caller


def record_timing(request: web.Request, name: str, duration_ms: float) -> None:
    """Add a phase to the response's ``Server-Timing`` header."""
    request[TIMINGS_KEY].append((name, duration_ms))


async def server_timing_on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """``Server-Timing``: each recorded phase plus ``total``."""
    timings = request.get(TIMINGS_KEY)
    started = request.get(STARTED_KEY)
    if timings is None or started is None:
        return
    parts = [f"{name};dur={duration:.1f}" for name, duration in timings]
    parts.append(f"total;dur={(time.perf_counter() - started) * 1000:.1f}")
    response.headers["Server-Timing"] = ", ".join(parts)
