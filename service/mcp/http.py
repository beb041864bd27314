"""``/mcp``: the MCP Streamable HTTP transport, on the service's own app, identity and limits.

- ``POST /mcp``: one JSON-RPC message (or a batch, as 2025-03-26 allows). Requests are answered
  with ``application/json``; notifications and responses alone with ``202 Accepted``. The auth
  middleware has verified the bearer token before this runs, as for ``/v1``; tool calls go
  through the same functions as the ``/v1`` routes (tenancy, rate limits, deadline).
- ``GET /mcp``: 405. The server never sends messages of its own (its tool list is fixed), which
  the transport says a server answers with 405 rather than an idle event stream.
- ``DELETE /mcp`` with ``Mcp-Session-Id``: ends that session (204); see ``sessions.py``.

Message-level failures are JSON-RPC errors: HTTP 400 for a body that is not JSON-RPC, 200 for an
error answer to a well-formed request (unknown method or tool, bad params). The error middleware
renders the service's own refusals here (401 without a token, 504 past the deadline) as JSON-RPC
errors too, never as ``{error: {code, message}}``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from service.auth import Caller
from service.engine.runtime import Engine
from service.errors import Unavailable
from service.mcp import sessions
from service.mcp.backends import EngineBackend
from service.mcp.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    Message,
    RpcError,
    error_message,
    http_response,
    parse_message,
    request_id_of,
)
from service.mcp.server import SUPPORTED_VERSIONS, answer, initialize_result
from service.middleware import caller_of
from service.state import ENGINE

MCP_PATH = "/mcp"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
# The transport's rule for a request that names no version and no session: assume 2025-03-26.
UNSTATED_VERSION = "2025-03-26"
_MAX_SESSION_ID = 200

routes = web.RouteTableDef()


@routes.post(MCP_PATH)
async def post_mcp(request: web.Request) -> web.Response:
    try:
        return await _post(request)
    except RpcError as exc:
        return http_response(error_message(exc.request_id, exc), status=exc.http_status)


@routes.delete(MCP_PATH)
async def delete_mcp(request: web.Request) -> web.Response:
    """End the session named by ``Mcp-Session-Id``; its later requests get 404."""
    engine = request.app[ENGINE]
    try:
        if not request.headers.get(SESSION_HEADER):
            raise RpcError(INVALID_REQUEST, f"DELETE {MCP_PATH} ends a session: send its {SESSION_HEADER} header", http_status=400)
        session = await _session(request, engine, caller_of(request))
    except RpcError as exc:
        return http_response(error_message(None, exc), status=exc.http_status)
    assert session is not None
    try:
        await sessions.end(engine, session)
    except (RedisError, OSError):
        raise Unavailable("the session cannot be ended now (Redis is unreachable); retry shortly") from None
    return web.Response(status=204)


async def _post(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    caller = caller_of(request)
    _check_accept(request)
    stated_version = _stated_version(request)
    payload = await _read_payload(request)
    if isinstance(payload, dict) and payload.get("method") == "initialize":
        return await _initialize(engine, caller, payload)
    session = await _session(request, engine, caller)
    if session is not None and stated_version is not None and stated_version != session.protocol_version:
        raise RpcError(
            INVALID_REQUEST,
            f"{VERSION_HEADER} is {stated_version} but this session negotiated {session.protocol_version}",
            http_status=400,
        )
    version = session.protocol_version if session is not None else stated_version or UNSTATED_VERSION
    backend = EngineBackend(engine, caller)
    if not isinstance(payload, list):
        message = _parse_single(payload)
        reply = await answer(message, backend, version)
        return web.Response(status=202) if reply is None else http_response(reply)
    if not payload:
        raise RpcError(INVALID_REQUEST, "the batch is empty; send at least one message", http_status=400)
    replies = await asyncio.gather(*(_answer_in_batch(raw, backend, version) for raw in payload))
    answered = [reply for reply in replies if reply is not None]
    return http_response(answered) if answered else web.Response(status=202)


async def _initialize(engine: Engine, caller: Caller, payload: dict[str, Any]) -> web.Response:
    """A new session at the negotiated version; its id travels in the ``Mcp-Session-Id`` header."""
    message = _parse_single(payload)
    if message.id is None:
        raise RpcError(INVALID_REQUEST, "initialize is a request: give it an id", http_status=400)
    try:
        result = initialize_result(message.params)
    except RpcError as exc:
        return http_response(error_message(message.id, exc))
    session = sessions.issue(engine.jwt_secret, caller, result["protocolVersion"])
    return http_response({"jsonrpc": "2.0", "id": message.id, "result": result}, headers={SESSION_HEADER: session.id})


def _parse_single(payload: Any) -> Message:
    """A body that is not one JSON-RPC message is refused with 400 (the transport's rule)."""
    try:
        return parse_message(payload)
    except RpcError as exc:
        raise RpcError(exc.code, exc.message, data=exc.data, http_status=400, request_id=request_id_of(payload)) from None


async def _answer_in_batch(raw: Any, backend: EngineBackend, version: str) -> dict[str, Any] | None:
    try:
        message = parse_message(raw)
    except RpcError as exc:
        return error_message(request_id_of(raw), exc)
    if message.method == "initialize":
        return error_message(message.id, RpcError(INVALID_REQUEST, "initialize must be sent on its own, not in a batch"))
    return await answer(message, backend, version)


def _check_accept(request: web.Request) -> None:
    accept = request.headers.get("Accept")
    if accept and not any(kind in accept for kind in ("application/json", "application/*", "*/*")):
        raise RpcError(INVALID_REQUEST, "this endpoint answers application/json; accept it (Accept: application/json, text/event-stream)", http_status=406)


def _stated_version(request: web.Request) -> str | None:
    stated = request.headers.get(VERSION_HEADER)
    if stated is None:
        return None
    if stated not in SUPPORTED_VERSIONS:
        raise RpcError(
            INVALID_REQUEST,
            f"unsupported {VERSION_HEADER} {stated[:40]!r}; supported: {', '.join(SUPPORTED_VERSIONS)}",
            http_status=400,
        )
    return stated


async def _read_payload(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise RpcError(INVALID_REQUEST, f"request body is too large ({exc.text}); send less per request", http_status=413) from None
    if not raw:
        raise RpcError(PARSE_ERROR, "request body is empty; send a JSON-RPC message", http_status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RpcError(PARSE_ERROR, f"request body is not valid JSON: {exc}", http_status=400) from None


async def _session(request: web.Request, engine: Engine, caller: Caller) -> sessions.Session | None:
    """The request's session (``None`` without the header); 404 for an unknown, expired or ended one."""
    session_id = request.headers.get(SESSION_HEADER)
    if session_id is None:
        return None
    session = sessions.verify(engine.jwt_secret, caller, session_id.strip()) if len(session_id) <= _MAX_SESSION_ID else None
    if session is None or await sessions.has_ended(engine, session):
        raise RpcError(INVALID_REQUEST, f"unknown, expired or ended {SESSION_HEADER}; send initialize for a new session", http_status=404)
    return session
