"""Running the tools against a remote agentsearch service's ``/v1`` API (``agentsearch mcp --url``).

Each tool call is the matching ``/v1`` request with the configured bearer token, so the remote
service applies its own identity, tenancy, rate limits and deadline. Its answers come back as
they are; its errors (and a service that cannot be reached) become tool errors that say what
to fix.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from service.code.workspace import is_workspace_id
from service.mcp.backends import UNKNOWN_ID, UNREGISTERED_ROOT, ToolError
from service.redact import mask_text, mask_url

REMOTE_TIMEOUT_S = 60.0


class RemoteBackend:
    """The tools through ``base_url``'s HTTP API."""

    def __init__(self, http: aiohttp.ClientSession, base_url: str) -> None:
        self._http = http
        self._base_url = base_url.rstrip("/")

    @classmethod
    @asynccontextmanager
    async def connect(cls, base_url: str, token: str, *, timeout_s: float = REMOTE_TIMEOUT_S) -> AsyncIterator[RemoteBackend]:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
            yield cls(http, base_url)

    async def catalog_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        status, body = await self._call("POST", "/v1/catalog/search", arguments)
        if isinstance(body, dict) and "structuredContent" in body and "content" in body:
            return body  # answers, including the ones that are errors (rate limit, every ref failed)
        raise self._error(status, body)

    async def code_search(self, workspace: str, arguments: dict[str, Any]) -> dict[str, Any]:
        workspace_id = await self._workspace_id(workspace)
        status, body = await self._call("POST", f"/v1/workspaces/{workspace_id}/search", arguments)
        if status == 200 and isinstance(body, dict):
            return body
        error = self._error(status, body)
        if status == 404 and error.message.startswith("no workspace"):  # its text names the HTTP route, which an MCP agent cannot call
            raise ToolError("not_found", UNKNOWN_ID.format(ref=workspace_id))
        raise error

    async def action_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        status, body = await self._call("POST", "/v1/actions/search", arguments)
        if status == 200 and isinstance(body, dict):
            return body
        raise self._error(status, body)

    async def waiting_summary(self) -> dict[str, Any]:
        status, body = await self._call("GET", "/v1/catalog/waiting", None)
        if status == 200 and isinstance(body, dict):
            return body
        raise self._error(status, body)

    async def register_workspace(self, arguments: dict[str, Any]) -> dict[str, Any]:
        status, body = await self._call("POST", "/v1/workspaces", arguments)
        if status in (200, 201) and isinstance(body, dict):
            return body
        raise self._error(status, body)

    async def _workspace_id(self, ref: str) -> str:
        """An id as given; a root path looked up among the caller's workspaces."""
        if is_workspace_id(ref):
            return ref
        expanded = os.path.expanduser(ref)
        if not os.path.isabs(expanded):
            raise ToolError(
                "validation_error",
                f"workspace {ref[:200]!r} is neither a workspace id (ws_ followed by 20 hex digits) nor an absolute path",
            )
        status, body = await self._call("GET", "/v1/workspaces", None)
        if status != 200 or not isinstance(body, dict):
            raise self._error(status, body)
        wanted = {expanded.rstrip("/") or "/", str(Path(expanded).resolve())}
        for entry in body.get("workspaces") or []:
            if isinstance(entry, dict) and entry.get("root") in wanted:
                return str(entry["id"])
        raise ToolError("not_found", UNREGISTERED_ROOT.format(ref=ref[:200]))

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._http.request(method, self._base_url + path, data=data, headers=headers) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            detail = str(exc) or type(exc).__name__
            raise ToolError("unavailable", f"cannot reach the agentsearch service at {mask_url(self._base_url)} ({mask_text(detail)}); check --url and that it runs") from None
        try:
            return status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return status, None

    def _error(self, status: int, body: Any) -> ToolError:
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or not isinstance(error.get("message"), str):
            return ToolError("unavailable", f"the agentsearch service at {mask_url(self._base_url)} answered HTTP {status} without an error body")
        message = str(error["message"])
        if status == 401:
            message += "; the token given with --token or AGENTSEARCH_TOKEN was refused: mint a new one with `agentsearch token`"
        details = error.get("details") if isinstance(error.get("details"), dict) else None
        return ToolError(str(error.get("code") or "error"), message, details)
