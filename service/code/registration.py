"""Registering a workspace, start to finish: the one function behind ``POST /v1/workspaces`` and
every other surface that registers one (an MCP tool).

1. Parse the body (``parsing.py``): the root and the search settings, ``index_dir`` confined.
2. Resolve the root within the caller's bases (``roots.py``); the machine's owner (``trusted``: the
   local CLI and stdio MCP server) may name any directory.
3. Refuse the service's own directories (data, index, caches) and, in a multi-tenant deployment,
   a root overlapping another user's.
4. Unchanged settings of a workspace already registered: nothing to do (no re-index), 200.
5. The quota: at most ``max_workspaces_per_user`` workspaces per user (409) and
   ``workspace_registrations_per_minute`` registrations that change something (429, a moving
   window of 60 s counted on this node; refused calls do not count).
6. Save, and schedule the index job.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from service.code.parsing import parse_register_body, resolve_root
from service.code.roots import (
    LOCAL,
    Base,
    caller_bases,
    check_not_protected,
    check_ownership,
    protected_dirs,
    registered_caches,
    resolve_caller_root,
)
from service.code.runtime import Workspaces, workspaces_of
from service.code.semantic import schedule_indexing
from service.code.workspace import Workspace, workspace_id
from service.errors import Conflict, RateLimited

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

WINDOW_S = 60.0


async def register_workspace(engine: Engine, caller: Caller, body: Any, *, trusted: bool = False) -> tuple[dict[str, Any], bool]:
    """Register the body's root for ``caller`` (or update its settings): its status (with
    ``created``) and whether it is new. ``trusted``: the caller owns the machine (no base applies)."""
    settings = engine.settings
    raw_root, config = parse_register_body(body, settings)
    if trusted:
        root, base = resolve_root(raw_root, settings, trusted=True), None
    else:
        root, base = resolve_caller_root(raw_root, settings, caller_bases(settings, caller))
    workspaces = workspaces_of(engine)
    tenant = caller.user_tenant
    async with workspaces.registering:
        registered = workspaces.registry.all()
        check_not_protected(raw_root, root, (*protected_dirs(settings), *registered_caches(settings, registered)), may_hold=trusted)
        if base is not None and not settings.is_single_tenant:
            check_ownership(raw_root, root, base, tenant, registered)
        existing = next((w for w in registered if w.id == workspace_id(tenant, root)), None)
        if existing is not None and existing.search == config:
            return await _answer(workspaces, existing, created=False), False
        check_quota(workspaces, settings.max_workspaces_per_user, settings.workspace_registrations_per_minute, tenant, registered, creating=existing is None)
        workspace, created = await workspaces.register(tenant, root, config, **_base_fields(base, trusted))
        _count(workspaces, tenant)
    # The build (and the prewarm) run in the index job; the first search also revalidates inline.
    await schedule_indexing(engine, workspace, always=True)
    return await _answer(workspaces, workspace, created=created), created


def _base_fields(base: Base | None, trusted: bool) -> dict[str, str | None]:
    if base is None:
        return {"base": None, "base_kind": LOCAL if trusted else None}
    return {"base": str(base.path), "base_kind": base.kind}


async def _answer(workspaces: Workspaces, workspace: Workspace, *, created: bool) -> dict[str, Any]:
    body = await workspaces.status(workspace)
    body["created"] = created
    return body


# ---- the quota -------------------------------------------------------------------------------------


def check_quota(
    workspaces: Workspaces, max_workspaces: int, per_minute: int, tenant: str, registered: list[Workspace], *, creating: bool
) -> None:
    """409 past the number of workspaces a user may hold, 429 past the registrations of a minute."""
    if creating:
        owned = sum(1 for w in registered if w.tenant == tenant)
        if owned >= max_workspaces:
            raise Conflict(
                f"you have {owned} workspaces registered, the most one user may hold here (max_workspaces_per_user); "
                "delete one you no longer search (DELETE /v1/workspaces/{id}) first"
            )
    recent = _recent(workspaces, tenant)
    if len(recent) >= per_minute:
        retry_after = max(1, math.ceil(recent[0] + WINDOW_S - time.monotonic()))
        raise RateLimited(
            f"{len(recent)} workspace registrations in the last minute, the most one user may make "
            f"(workspace_registrations_per_minute); retry in {retry_after}s. Registering unchanged settings again is free.",
            details={"rateLimit": {"limit": per_minute, "window_s": int(WINDOW_S), "retryAfterSeconds": retry_after}},
            headers={"Retry-After": str(retry_after)},
        )


def _recent(workspaces: Workspaces, tenant: str) -> deque[float]:
    """The tenant's registrations of the last minute (older ones dropped)."""
    recent = workspaces.registrations.setdefault(tenant, deque())
    cutoff = time.monotonic() - WINDOW_S
    while recent and recent[0] <= cutoff:
        recent.popleft()
    if not recent:
        workspaces.registrations.pop(tenant, None)  # idle callers hold no memory
        recent = deque()
    return recent


def _count(workspaces: Workspaces, tenant: str) -> None:
    workspaces.registrations.setdefault(tenant, deque()).append(time.monotonic())


__all__ = ["register_workspace"]
