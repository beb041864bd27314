"""Running a tool: the backend interface, and the backend on this process's engine.

A backend answers each search with the body the matching ``/v1`` route answers, so one set of
result builders (``results.py``) serves every backend. ``EngineBackend`` runs each search with
``run_search``, as the routes do (same validation, tenancy, rate limit and deadline), for one caller:
the token's on ``/mcp``, the machine's owner (or ``--token``'s) under ``agentsearch mcp``.
Failures are raised: ``AgentSearchError`` from the engine, ``ToolError`` from a remote service.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from service.actions.model import SURFACE_NAME as ACTIONS
from service.catalog.keys import SURFACE_NAME as CATALOG
from service.catalog.render import content_of
from service.catalog.waiting import waiting_summary
from service.code.model import SURFACE_NAME as CODE
from service.code.parsing import resolve_root
from service.code.registration import register_workspace
from service.code.semantic import schedule_indexing
from service.code.state import workspaces_of
from service.code.workspace import SearchConfig, Workspace, is_workspace_id, workspace_id
from service.engine.analytics import recorded_search
from service.errors import NotFound, ValidationError

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

# An MCP agent registers with the register_workspace tool (it cannot call POST /v1/workspaces).
UNKNOWN_ID = "no workspace {ref!r} of yours; register its root with the register_workspace tool, or pass the root of one you registered"
UNREGISTERED_ROOT = "no workspace is registered at {ref!r}; register it with the register_workspace tool (root: that path) first"


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

    async def waiting_summary(self) -> dict[str, Any]:
        """The ``GET /v1/catalog/waiting`` answer (``content``, ``structuredContent``)."""
        ...

    async def register_workspace(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The ``POST /v1/workspaces`` answer: the workspace's state and ``created``."""
        ...


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
        answer = await recorded_search(self.engine, CATALOG, self.caller, arguments)
        return answer.body

    async def code_search(self, workspace: str, arguments: dict[str, Any]) -> dict[str, Any]:
        found = await self._workspace(workspace)
        answer = await recorded_search(self.engine, CODE, self.caller, arguments, target=found.id)
        return answer.body

    async def action_search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await recorded_search(self.engine, ACTIONS, self.caller, arguments)
        return answer.body

    async def waiting_summary(self) -> dict[str, Any]:
        doc = await waiting_summary(self.engine, self.caller)
        return {"content": content_of(doc), "structuredContent": doc}

    async def register_workspace(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The same registration as ``POST /v1/workspaces``: the caller's bases, ownership and quotas
        (the local stdio server's caller owns the machine, so no base applies to it)."""
        body, _ = await register_workspace(self.engine, self.caller, arguments, trusted=self.registers_roots)
        return body

    async def _workspace(self, ref: str) -> Workspace:
        workspaces = workspaces_of(self.engine)
        tenants = (self.caller.user_tenant,)
        if is_workspace_id(ref):
            try:
                return workspaces.owned(tenants, ref)
            except NotFound:
                raise NotFound(UNKNOWN_ID.format(ref=ref)) from None
        expanded = os.path.expanduser(ref)
        if not os.path.isabs(expanded) or "\0" in expanded:
            raise ValidationError(
                f"workspace {ref[:200]!r} is neither a workspace id (ws_ followed by 20 hex digits) nor an absolute path; "
                "pass the id returned when the workspace was registered, or its root"
            )
        try:
            resolved = Path(expanded).resolve()
        except (RuntimeError, OSError):  # Python 3.11 reports a symlink loop as RuntimeError, later ones as OSError
            raise ValidationError(f"workspace {ref[:200]!r} is a symlink loop; pass the workspace id or the real path of its root") from None
        registered = workspaces.registry.get(workspace_id(self.caller.user_tenant, resolved))
        if registered is not None:
            return workspaces.owned(tenants, registered.id)
        if not self.registers_roots:
            raise NotFound(UNREGISTERED_ROOT.format(ref=ref[:200]))
        return await self._register(ref)

    async def _register(self, ref: str) -> Workspace:
        root = resolve_root(ref, self.engine.settings, trusted=True)
        async with self._registering:
            workspace, created = await workspaces_of(self.engine).register(self.caller.user_tenant, root, SearchConfig(prewarm_embeddings=self.engine.settings.prewarm_embeddings))
        if created:
            await schedule_indexing(self.engine, workspace, always=True)
        return workspace
