"""The index state of one workspace, as ``GET /v1/workspaces/{id}`` answers it (and registration, and ``agentsearch index``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.code.state import BROKEN, MISSING, Workspaces, missing_message
from service.code.warming import is_warming, warming_progress_of
from service.errors import WorkspaceBroken

if TYPE_CHECKING:
    from service.code.workspace import Workspace


async def index_status(workspaces: Workspaces, workspace: Workspace) -> dict[str, Any]:
    """Files, chunks, embedded, pending, cold, warming (with ``warming_progress``: share, measured
    rate, expected finish), skip counts and the last revalidation (``missing`` or ``broken``, with a
    ``problem`` saying what to do, when it cannot be searched), whether it is open here
    (``resident``) and how edits reach its index (``freshness``). Reading the status does not open
    the workspace."""
    if not workspaces.root_exists(workspace):
        return await _problem_status(workspaces, workspace, MISSING, missing_message(workspace))
    runtime = workspaces.opened(workspace.id)
    try:
        with workspaces.cache_view(workspace) as cache:
            files, chunks, skipped, complete = cache.file_count(), cache.chunk_count(), cache.get_meta("skipped"), cache.get_meta("complete")
    except WorkspaceBroken as exc:
        return await _problem_status(workspaces, workspace, BROKEN, exc.message)
    counts = await workspaces.counts(workspace)
    building = (runtime is not None and runtime.lock.locked()) or not complete
    progress = runtime.progress if runtime is not None else None
    last_report = runtime.last_report if runtime is not None else None
    return {
        "id": workspace.id,
        "root": str(workspace.root),
        "search": workspace.search.as_dict(),
        "state": "indexing" if building else "ready",
        "files": files,
        "chunks": chunks,
        "embedded": counts["embedded"],
        "pending": counts["pending"],
        "cold": counts["cold"],
        "warm": workspace.warm,
        "warming": is_warming(workspace, counts),
        "warming_progress": await warming_progress_of(workspaces, workspace, counts),
        "skipped": skipped or {},
        "progress": {"files_done": progress[0], "files_total": progress[1]} if progress else None,
        "last_sync": last_report.as_dict() if last_report else None,
        "created_at": workspace.created_at,
        "problem": None,
        **_lifecycle(workspaces, workspace),
    }


def _lifecycle(workspaces: Workspaces, workspace: Workspace) -> dict[str, Any]:
    """``resident`` (open here, last used, closes after) and ``freshness`` (``watch`` or
    ``revalidate``, with ``freshness_reason`` saying why it is not watched)."""
    mode, reason = workspaces.freshness(workspace)
    return {"resident": workspaces.resident(workspace), "freshness": mode, "freshness_reason": reason}


async def _problem_status(workspaces: Workspaces, workspace: Workspace, state: str, problem: str) -> dict[str, Any]:
    """The status of a workspace that cannot be searched: what the store holds, and the problem."""
    counts = await workspaces.counts(workspace)
    runtime = workspaces.opened(workspace.id)
    return {
        "id": workspace.id,
        "root": str(workspace.root),
        "search": workspace.search.as_dict(),
        "state": state,
        "files": runtime.cache.file_count() if runtime is not None else 0,
        "chunks": counts["chunks"],
        "embedded": counts["embedded"],
        "pending": counts["pending"],
        "cold": counts["cold"],
        "warm": workspace.warm,
        "warming": False,
        "warming_progress": None,
        "skipped": {},
        "progress": None,
        "last_sync": None,
        "created_at": workspace.created_at,
        "problem": problem,
        **_lifecycle(workspaces, workspace),
    }
