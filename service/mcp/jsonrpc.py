"""JSON-RPC 2.0 as MCP uses it: parsing one message, the error codes, and error bodies.

Codes: the five of JSON-RPC itself, plus codes in the server range (-32000 to -32099) for the
service's own refusals at the transport (a missing token, the request deadline). Each such
error keeps the service's string code in ``error.data.code``, so a client sees
``unauthorized`` or ``deadline_exceeded`` beside a message that says what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from service.errors import AgentSearchError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001  # the MCP SDKs' own code for a request that ran out of time
UNAUTHORIZED = -32010
FORBIDDEN = -32011
UNAVAILABLE = -32012

_CODE_OF_STATUS = {401: UNAUTHORIZED, 403: FORBIDDEN, 503: UNAVAILABLE, 504: REQUEST_TIMEOUT}

RequestId = str | int


class RpcError(Exception):
    """A JSON-RPC error answer; ``http_status`` is the status it travels with over HTTP, ``request_id``
    the id it answers when it is raised outside the handling of one request."""

    def __init__(
        self, code: int, message: str, *, data: dict[str, Any] | None = None, http_status: int = 200, request_id: RequestId | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status
        self.request_id = request_id

    def error_object(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            error["data"] = self.data
        return error


@dataclass(frozen=True)
class Message:
    """One incoming message: a request (has an id), a notification (no id) or a response to us."""

    method: str | None
    id: RequestId | None
    params: dict[str, Any]

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.id is not None

    @property
    def is_notification(self) -> bool:
        return self.method is not None and self.id is None


def parse_message(raw: Any) -> Message:
    """Validate one JSON-RPC 2.0 message; ``RpcError`` otherwise (answer it with ``request_id_of(raw)``)."""
    if not isinstance(raw, dict):
        raise RpcError(INVALID_REQUEST, "a JSON-RPC message must be a JSON object")
    request_id = raw.get("id")
    if "id" in raw and (isinstance(request_id, bool) or not isinstance(request_id, str | int)):
        raise RpcError(INVALID_REQUEST, "id must be a string or an integer (MCP request ids are never null)")
    if raw.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"')
    method = raw.get("method")
    if method is None:
        if "result" in raw or "error" in raw:
            return Message(None, request_id, {})  # a response to a request of ours; we send none, so it is dropped
        raise RpcError(INVALID_REQUEST, "a request needs a method (a string)")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "method must be a non-empty string")
    params = raw.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object (MCP uses named parameters)")
    return Message(method, request_id, params)


def request_id_of(raw: Any) -> RequestId | None:
    """The id of a raw message, if it has a usable one (for answering a message that failed to parse)."""
    if isinstance(raw, dict):
        value = raw.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None


def result_message(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_message(request_id: RequestId | None, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.error_object()}


def rpc_error_of(exc: AgentSearchError) -> RpcError:
    """A service refusal at the transport (token, deadline, body size) as a JSON-RPC error."""
    data: dict[str, Any] = {"code": exc.code, **exc.details}
    return RpcError(_CODE_OF_STATUS.get(exc.status, INVALID_REQUEST), exc.message, data=data, http_status=exc.status)


def http_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers)


def http_error_response(exc: AgentSearchError) -> web.Response:
    """The error middleware's answer on ``/mcp``: the same status and headers (401 keeps
    ``WWW-Authenticate``), with a JSON-RPC error body an MCP client can read."""
    error = rpc_error_of(exc)
    return http_response(error_message(None, error), status=error.http_status, headers=exc.headers or None)
