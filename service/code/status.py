"""The index state of one workspace, as ``GET /v1/workspaces/{id}`` answers it (and registration, and ``agentsearch index``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.code.state import BROKEN, MISSING, Workspaces, missing_message
from service.errors import WorkspaceBroken

if TYPE_CHECKING:
    from service.code.workspace import Workspace


async def index_status(workspaces: Workspaces, workspace: Workspace) -> dict[str, Any]:
    """Files, chunks, embedded, pending, cold, warming, skip counts and the last revalidation
    (``missing`` or ``broken``, with a ``problem`` saying what to do, when it cannot be searched)."""
    if not workspaces.root_exists(workspace):
        return await _problem_status(workspaces, workspace, MISSING, missing_message(workspace))
    try:
        runtime = await workspaces.runtime(workspace)
    except WorkspaceBroken as exc:
        return await _problem_status(workspaces, workspace, BROKEN, exc.message)
    counts = await workspaces.counts(workspace)
    building = runtime.lock.locked() or not runtime.complete
    unembedded = counts["pending"] + counts["cold"]
    return {
        "id": workspace.id,
        "root": str(workspace.root),
        "search": workspace.search.as_dict(),
        "state": "indexing" if building else "ready",
        "files": runtime.cache.file_count(),
        "chunks": runtime.cache.chunk_count(),
        "embedded": counts["embedded"],
        "pending": counts["pending"],
        "cold": counts["cold"],
        "warm": workspace.warm,
        "warming": workspace.warm and unembedded > 0,
        "skipped": runtime.cache.get_meta("skipped") or {},
        "progress": {"files_done": runtime.progress[0], "files_total": runtime.progress[1]} if runtime.progress else None,
        "last_sync": runtime.last_report.as_dict() if runtime.last_report else None,
        "created_at": workspace.created_at,
        "problem": None,
    }


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
        "skipped": {},
        "progress": None,
        "last_sync": None,
        "created_at": workspace.created_at,
        "problem": problem,
    }
