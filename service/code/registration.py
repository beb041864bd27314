"""Registering a workspace, start to finish: the one function behind ``POST /v1/workspaces`` and
every other surface that registers one (an MCP tool).

1. Parse the body (``parsing.py``): the root and the search settings, ``index_dir`` confined.
2. Resolve the root within the caller's bases (``roots.py``); the machine's owner (``trusted``: the
   local CLI and stdio MCP server) may name any directory.
3. Refuse the service's own directories (data, index, caches) and, in a multi-tenant deployment,
   a root overlapping another user's.
4. Unchanged settings of a workspace already registered: nothing to do (no re-index), 200.
5. The quota: at most ``max_workspaces_per_user`` workspaces per user (409) and
   ``workspace_registrations_per_minute`` registrations that change something (429, the rate
   limiter's registration bucket: a sliding minute in Redis shared by the deployment's front ends;
   refused calls do not count).
6. Save, and schedule the index job.
"""

from __future__ import annotations

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
from service.code.semantic import schedule_indexing
from service.code.state import Workspaces, workspaces_of
from service.code.status import index_status
from service.code.workspace import Workspace, workspace_id
from service.errors import Conflict

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine
    from service.ratelimit import RateLimiter


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
        await check_quota(engine.rate_limiter, caller, settings.max_workspaces_per_user, registered, creating=existing is None)
        workspace, created = await workspaces.register(tenant, root, config, **_base_fields(base, trusted))
    # The build (and the prewarm) run in the index job; the first search also revalidates inline.
    await schedule_indexing(engine, workspace, always=True)
    return await _answer(workspaces, workspace, created=created), created


def _base_fields(base: Base | None, trusted: bool) -> dict[str, str | None]:
    if base is None:
        return {"base": None, "base_kind": LOCAL if trusted else None}
    return {"base": str(base.path), "base_kind": base.kind}


async def _answer(workspaces: Workspaces, workspace: Workspace, *, created: bool) -> dict[str, Any]:
    body = await index_status(workspaces, workspace)
    body["created"] = created
    return body


# ---- the quota -------------------------------------------------------------------------------------


async def check_quota(limiter: RateLimiter, caller: Caller, max_workspaces: int, registered: list[Workspace], *, creating: bool) -> None:
    """409 past the number of workspaces a user may hold, 429 past the registrations of a minute
    (this registration is counted when it is allowed)."""
    if creating:
        owned = sum(1 for w in registered if w.tenant == caller.user_tenant)
        if owned >= max_workspaces:
            raise Conflict(
                f"you have {owned} workspaces registered, the most one user may hold here (max_workspaces_per_user); "
                "delete one you no longer search (DELETE /v1/workspaces/{id}) first"
            )
    exceeded = await limiter.check_registration(caller)
    if exceeded is not None:
        raise exceeded.error()


__all__ = ["register_workspace"]
