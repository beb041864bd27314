"""Running a tool: the backend interface, and the backend on this process's engine.

A backend answers each search with the body the matching ``/v1`` route answers, so one set of
result builders (``results.py``) serves every backend. ``EngineBackend`` calls the same
functions as the routes (same validation, tenancy, rate limits and deadline), for one caller:
the token's on ``/mcp``, the machine's owner (or ``--token``'s) under ``agentsearch mcp``.
Failures are raised: ``AgentSearchError`` from the engine, ``ToolError`` from a remote service.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from service.actions.routes import search_for_caller as search_actions_for
from service.catalog.routes import answer_body, search_within_deadline
from service.catalog.search import parse_request
from service.code.parsing import resolve_root
from service.code.routes import search_for_caller as search_code_for
from service.code.runtime import workspaces_of
from service.code.semantic import schedule_indexing
from service.code.workspace import SearchConfig, Workspace, is_workspace_id, workspace_id
from service.errors import DeadlineExceeded, NotFound, ValidationError

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

# Our deadline fires a little before the request's (the deadline middleware's), so the caller
# gets a tool result that says what to do rather than a transport error.
_DEADLINE_MARGIN_S = 0.5


class ToolError(Exception):
    """A failure reported by a remote service: its error code, message and details."""

    def __init__(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = dict(details or {})


class SearchBackend(Protocol):
    async def catalog_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The ``POST /v1/catalog/search`` answer (``content``, ``structuredContent``, ``isError``, ``timing``)."""
        ...

    async def code_search(self, workspace: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The ``POST /v1/workspaces/{id}/search`` answer of the workspace named by id or root path."""
        ...

    async def action_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The ``POST /v1/actions/search`` answer."""
        ...


def tool_budget_s(deadline_s: float) -> float:
    return max(0.05, deadline_s - min(_DEADLINE_MARGIN_S, deadline_s * 0.1))


@dataclass(frozen=True)
class EngineBackend:
    """The searches on ``engine`` for ``caller``. ``registers_roots``: a workspace root path not yet
    registered is registered for the caller (the local stdio server, whose caller owns the machine);
    over HTTP a root must be registered first, under an allowed base."""

    engine: Engine
    caller: Caller
    registers_roots: bool = False
    _registering: asyncio.Lock = field(default_factory=asyncio.Lock, compare=False, repr=False)

    async def catalog_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        answer, clock = await search_within_deadline(self.engine, self.caller, parse_request(arguments))
        return answer_body(answer, clock)

    async def code_search(self, workspace: str, arguments: dict[str, Any]) -> dict[str, Any]:
        found = await self._workspace(workspace)
        budget_s = self._budget_s()
        async with self._deadline(budget_s, "narrow path or glob"):
            answer = await search_code_for(self.engine, self.caller, found, arguments, deadline_s=budget_s)
        return answer.as_dict()

    async def action_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        async with self._deadline(self._budget_s(), "shorten the query or exclude services"):
            answer = await search_actions_for(self.engine, self.caller, arguments)
        return answer.body

    def _budget_s(self) -> float:
        return tool_budget_s(self.engine.settings.request_deadline_s)

    @contextlib.asynccontextmanager
    async def _deadline(self, budget_s: float, advice: str) -> AsyncIterator[None]:
        """Past ``budget_s`` the search is cancelled and the caller told what to do."""
        try:
            async with asyncio.timeout(budget_s):
                yield
        except TimeoutError:
            deadline_s = self.engine.settings.request_deadline_s
            raise DeadlineExceeded(f"search did not finish within {deadline_s:g}s; retry once, then {advice}") from None

    async def _workspace(self, ref: str) -> Workspace:
        workspaces = workspaces_of(self.engine)
        tenants = (self.caller.user_tenant,)
        if is_workspace_id(ref):
            return workspaces.owned(tenants, ref)
        expanded = os.path.expanduser(ref)
        if not os.path.isabs(expanded) or "\0" in expanded:
            raise ValidationError(
                f"workspace {ref[:200]!r} is neither a workspace id (ws_ followed by 20 hex digits) nor an absolute path; "
                "pass the id returned when the workspace was registered, or its root"
            )
        registered = workspaces.registry.get(workspace_id(self.caller.user_tenant, Path(expanded).resolve()))
        if registered is not None:
            return workspaces.owned(tenants, registered.id)
        if not self.registers_roots:
            raise NotFound(f"no workspace is registered at {ref[:200]!r}; register it with POST /v1/workspaces {{\"root\": ...}} first")
        return await self._register(ref)

    async def _register(self, ref: str) -> Workspace:
        root = resolve_root(ref, self.engine.settings, trusted=True)
        async with self._registering:
            workspace, created = await workspaces_of(self.engine).register(self.caller.user_tenant, root, SearchConfig(prewarm_embeddings=self.engine.settings.prewarm_embeddings))
        if created:
            await schedule_indexing(self.engine, workspace, always=True)
        return workspace
