"""The open workspaces of one engine: registry, per-workspace cache and trigram reader, revalidation.

``workspaces_of(engine)`` is the one ``Workspaces`` of an engine (request handlers, jobs and the
CLI share it, so the in-process worker and the front end see the same caches and locks). A
workspace is revalidated against its tree at most every ``settings.revalidate_interval_s``
(10 s by default); one revalidation at a time per workspace (an asyncio lock: a search that finds
one running waits briefly, then searches what is indexed, with a notice).

A workspace whose root was deleted (or replaced by a file) is ``missing``: its status says so and a
search answers 409 before it reads anything indexed. One whose cache cannot be opened (its
directory replaced by a file, an unreadable database) is ``broken``: its status says so, a search
answers 409, and deleting it always works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sqlite3
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.code.cache import ChunkCache
from service.code.indexer import SyncProgress, SyncReport, enqueue_embedding, rebuild_trigram, sync
from service.code.model import COLD, COLLECTION
from service.code.roots import mark_no_index
from service.code.trigram import IndexLocked, TrigramIndex
from service.code.workspace import SearchConfig, Workspace, WorkspaceRegistry, new_workspace, with_search
from service.engine.records import DONE, PENDING
from service.engine.store import Filter, Match, StoreError, point_id
from service.errors import NotFound, WorkspaceBroken, WorkspaceMissing

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

TRIGRAM_DIR = "trigram"
QUEUE_PAGE = 1_024
MISSING, BROKEN = "missing", "broken"


@dataclass
class Freshness:
    """How a revalidation before a search went; ``notices`` say what the caller should know."""

    report: SyncReport | None = None
    busy: bool = False
    notices: list[str] = field(default_factory=list)


class WorkspaceRuntime:
    """An open workspace: its chunk cache, a trigram reader and the revalidation lock."""

    def __init__(self, workspace: Workspace, cache_dir: Path) -> None:
        self.workspace = workspace
        self.cache_dir = cache_dir
        self.cache = ChunkCache(cache_dir)
        mark_no_index(cache_dir)  # no walk reads a cache, wherever it lives
        self.trigram_dir = cache_dir / TRIGRAM_DIR
        try:
            self.trigram = TrigramIndex.open(self.trigram_dir, writable=False)
        except BaseException:
            self.cache.close()
            raise
        self.lock = asyncio.Lock()
        self.last_sync_at: float | None = None
        self.last_report: SyncReport | None = None
        self.progress: tuple[int, int] | None = None

    @property
    def complete(self) -> bool:
        """Whether a revalidation has indexed every file it found (False while the first build runs)."""
        return bool(self.cache.get_meta("complete"))

    def close(self) -> None:
        self.cache.close()


class Workspaces:
    """Registered workspaces of one engine and their open runtimes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = WorkspaceRegistry(engine.settings.data_dir)
        self._runtimes: dict[str, WorkspaceRuntime] = {}
        self._opening = asyncio.Lock()
        # One registration at a time: the ownership checks and the save are one step.
        self.registering = asyncio.Lock()
        # Per owner tenant, when its recent registrations happened (``registration.py``'s quota).
        self.registrations: dict[str, deque[float]] = {}
        # Workspaces whose cache failed to open, and why (the status and the dashboard show it).
        self.broken: dict[str, str] = {}

    # ---- registry ----------------------------------------------------------------------------

    def owned(self, tenants: tuple[str, ...], workspace_id: str) -> Workspace:
        """The workspace if one of ``tenants`` owns it; otherwise 404, the same for missing and foreign."""
        workspace = self.registry.get(workspace_id)
        if workspace is None or workspace.tenant not in tenants:
            raise NotFound(f"no workspace {workspace_id!r}; register one with POST /v1/workspaces")
        return workspace

    async def register(
        self, tenant: str, root: Path, search: SearchConfig, *, base: str | None = None, base_kind: str | None = None
    ) -> tuple[Workspace, bool]:
        """Register ``root`` for ``tenant`` (or update its settings); True when it is new."""
        fresh = new_workspace(tenant, root, search, base, base_kind)
        existing = self.registry.get(fresh.id)
        if existing is None:
            self.registry.save(fresh)
            return fresh, True
        updated = with_search(existing, search)
        if updated.search.index_affecting() != existing.search.index_affecting():
            await self.reset_index(existing)
        self.registry.save(updated)
        self._update_runtime(updated)
        runtime = self._runtimes.get(updated.id)
        if runtime is not None:
            runtime.last_sync_at = None  # skip_dirs may have changed: revalidate on next use
        return updated, False

    async def delete(self, workspace: Workspace) -> None:
        """Remove the workspace, its points and its cache; works on a broken one too."""
        await self.reset_index(workspace)
        self.registry.delete(workspace.id)
        self.broken.pop(workspace.id, None)
        cache_dir = workspace.cache_dir(self.engine.settings)
        shutil.rmtree(cache_dir, ignore_errors=True)
        self._remove_stray_file(cache_dir)
        shutil.rmtree(self.engine.settings.data_dir / "workspaces" / workspace.id, ignore_errors=True)

    async def reset_index(self, workspace: Workspace) -> None:
        """Drop every indexed chunk of the workspace (store points, cache, trigram index)."""
        runtime = self._runtimes.pop(workspace.id, None)
        if runtime is not None:
            async with runtime.lock:
                runtime.close()
        await self.engine.store.delete_by_filter(COLLECTION, workspace_filter(workspace))
        cache_dir = workspace.cache_dir(self.engine.settings)
        shutil.rmtree(cache_dir / TRIGRAM_DIR, ignore_errors=True)
        for name in ("chunks.sqlite", "chunks.sqlite-wal", "chunks.sqlite-shm"):
            with contextlib.suppress(OSError):  # a cache directory replaced by a file: nothing of ours is under it
                (cache_dir / name).unlink(missing_ok=True)

    def _remove_stray_file(self, cache_dir: Path) -> None:
        """A file where the cache directory should be is removed when it is ours: named by the
        workspace id, under the data directory or the service's index_dir."""
        settings = self.engine.settings
        places = [settings.data_dir, *([settings.index_dir] if settings.index_dir is not None else [])]
        with contextlib.suppress(OSError):
            real = cache_dir.parent.resolve() / cache_dir.name
            if real.is_file() and not real.is_symlink() and any(place.resolve() in real.parents for place in places):
                real.unlink()

    # ---- health ----------------------------------------------------------------------------------

    @staticmethod
    def root_exists(workspace: Workspace) -> bool:
        """Whether the registered directory is still there as itself: a root swapped for a link
        (into another tree, the data directory) is as gone as a deleted one."""
        try:
            return workspace.root.is_dir() and os.path.realpath(workspace.root) == str(workspace.root)
        except OSError:
            return False

    def problem(self, workspace: Workspace) -> tuple[str, str] | None:
        """``(missing|broken, what to do)`` when the workspace cannot be searched, as last seen here."""
        if not self.root_exists(workspace):
            return MISSING, missing_message(workspace)
        if workspace.id in self.broken:
            return BROKEN, self.broken[workspace.id]
        return None

    def require_root(self, workspace: Workspace) -> None:
        """409 when the workspace's root is gone: nothing indexed from it is served any more."""
        if not self.root_exists(workspace):
            raise WorkspaceMissing(missing_message(workspace))

    def _update_runtime(self, workspace: Workspace) -> None:
        runtime = self._runtimes.get(workspace.id)
        if runtime is not None:
            runtime.workspace = workspace

    async def mark_warm(self, workspace: Workspace) -> Workspace:
        """From now on the workspace's new chunks are embedded in the background as they appear."""
        current = self.registry.get(workspace.id) or workspace
        if current.warm:
            return current
        warmed = replace(current, warm=True)
        self.registry.save(warmed)
        self._update_runtime(warmed)
        return warmed

    # ---- runtimes ------------------------------------------------------------------------------

    async def runtime(self, workspace: Workspace) -> WorkspaceRuntime:
        runtime = self._runtimes.get(workspace.id)
        if runtime is not None:
            return runtime
        async with self._opening:
            runtime = self._runtimes.get(workspace.id)
            if runtime is None:
                runtime = await self._open(workspace)
                self._runtimes[workspace.id] = runtime
        return runtime

    async def _open(self, workspace: Workspace) -> WorkspaceRuntime:
        """Open the workspace's cache; ``WorkspaceBroken`` when it cannot be read."""
        runtime: WorkspaceRuntime | None = None
        try:
            runtime = WorkspaceRuntime(workspace, workspace.cache_dir(self.engine.settings))
            await self._heal(runtime)
        except (OSError, sqlite3.Error, ValueError) as exc:
            if runtime is not None:
                runtime.close()
            log.warning("workspace cache cannot be opened", extra={"workspace": workspace.id, "error": str(exc)})
            self.broken[workspace.id] = broken_message(workspace)
            raise WorkspaceBroken(self.broken[workspace.id]) from None
        self.broken.pop(workspace.id, None)
        return runtime

    async def _heal(self, runtime: WorkspaceRuntime) -> None:
        """Re-derive what a crash or a wiped directory left apart from the cache."""
        cached = runtime.cache.chunk_count()
        if cached and not await self.engine.store.count(COLLECTION, workspace_filter(runtime.workspace)):
            log.warning("store lost the workspace's chunks; reindexing", extra={"workspace": runtime.workspace.id})
            runtime.cache.clear()
            cached = 0
        if runtime.trigram.num_docs != cached:
            log.warning("trigram index and chunk cache disagree; rebuilding it", extra={"workspace": runtime.workspace.id})
            await rebuild_trigram(runtime)

    def close(self) -> None:
        for runtime in self._runtimes.values():
            runtime.close()
        self._runtimes.clear()

    # ---- revalidation ----------------------------------------------------------------------------

    async def revalidate(
        self,
        workspace: Workspace,
        *,
        force: bool = False,
        deadline: float | None = None,
        wait_s: float = 0.0,
        progress: SyncProgress | None = None,
    ) -> Freshness:
        """Revalidate if due (or ``force``): at most one at a time; waits ``wait_s`` for a running one.
        A root that is gone is ``WorkspaceMissing``, checked first (a stat), so nothing stale is served."""
        self.require_root(workspace)
        runtime = await self.runtime(workspace)
        if not force and self._recent(runtime):
            return Freshness()
        give_up = time.monotonic() + wait_s
        while runtime.lock.locked() and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
        if runtime.lock.locked():
            return Freshness(busy=True, notices=[_building_notice(runtime)])
        async with runtime.lock:
            if not force and self._recent(runtime):
                return Freshness()  # another caller revalidated while we waited

            def track(done: int, total: int) -> None:
                runtime.progress = (done, total)
                if progress is not None:
                    progress(done, total)

            try:
                report = await sync(self.engine, runtime, deadline=deadline, progress=track)
            except IndexLocked:
                return Freshness(busy=True, notices=["the workspace index is being updated by another process; results may be stale"])
            except OSError:
                self.require_root(workspace)  # the root went away during the walk: 409, not a server error
                raise
            finally:
                runtime.progress = None
            runtime.last_report = report
            # An unfinished pass is not "fresh": the next search (or the index job) continues it.
            runtime.last_sync_at = time.monotonic() if report.complete else None
        notices = [] if report.complete else [_partial_notice(report)]
        return Freshness(report=report, notices=notices)

    def _recent(self, runtime: WorkspaceRuntime) -> bool:
        interval = self.engine.settings.revalidate_interval_s
        return runtime.last_sync_at is not None and time.monotonic() - runtime.last_sync_at < interval

    # ---- embedding state -------------------------------------------------------------------------

    async def queue_cold(self, workspace: Workspace, flt: Filter | None = None) -> int:
        """Move the workspace's ``cold`` chunks (under ``flt``) to ``pending`` and queue their embedding."""
        store = self.engine.store
        cold = (flt or workspace_filter(workspace)).and_(Match("embed_state", COLD))
        queued = 0
        seen: set[str] = set()
        while True:
            page, _ = await store.scroll(COLLECTION, cold, limit=QUEUE_PAGE)
            if not page or all(p.id in seen for p in page):
                return queued  # the second case: points that refuse the update; the sweeper cannot help
            seen.update(p.id for p in page)
            items = [(str(p.payload["key"]), str(p.payload["content_hash"])) for p in page]
            await _set_pending(self.engine, [p.id for p in page])
            await enqueue_embedding(self.engine, items)
            queued += len(items)

    async def counts(self, workspace: Workspace, flt: Filter | None = None) -> dict[str, int]:
        """``chunks``, ``embedded``, ``pending`` and ``cold`` points of the workspace (under ``flt``)."""
        store = self.engine.store
        base = flt or workspace_filter(workspace)
        total = await store.count(COLLECTION, base)
        embedded = await store.count(COLLECTION, base.and_(Match("embed_state", DONE)))
        pending = await store.count(COLLECTION, base.and_(Match("embed_state", PENDING)))
        return {"chunks": total, "embedded": embedded, "pending": pending, "cold": max(total - embedded - pending, 0)}

    async def status(self, workspace: Workspace) -> dict[str, Any]:
        """``GET /v1/workspaces/{id}``: the index state of the workspace (``missing`` or ``broken``
        with a ``problem`` saying what to do when it cannot be searched)."""
        if not self.root_exists(workspace):
            return await self._problem_status(workspace, MISSING, missing_message(workspace))
        try:
            runtime = await self.runtime(workspace)
        except WorkspaceBroken as exc:
            return await self._problem_status(workspace, BROKEN, exc.message)
        counts = await self.counts(workspace)
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

    async def _problem_status(self, workspace: Workspace, state: str, problem: str) -> dict[str, Any]:
        """The status of a workspace that cannot be searched: what the store holds, and the problem."""
        counts = await self.counts(workspace)
        runtime = self._runtimes.get(workspace.id)
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


async def _set_pending(engine: Engine, point_ids: list[str]) -> None:
    """Mark points pending (the sweeper's clock starts); one deleted meanwhile (a concurrent
    revalidation) is skipped."""
    update = {"embed_state": PENDING, "pending_since": int(time.time())}
    try:
        await engine.store.set_payload(COLLECTION, point_ids, update)
    except StoreError:
        for pid in point_ids:
            try:
                await engine.store.set_payload(COLLECTION, [pid], update)
            except StoreError:
                continue


def workspace_filter(workspace: Workspace) -> Filter:
    """Every point of the workspace (the tenant first: it is the collection's tenant index)."""
    return Filter(must=(Match("tenant", workspace.tenant), Match("workspace", workspace.id)))


def missing_message(workspace: Workspace) -> str:
    return (
        f"workspace root {str(workspace.root)!r} is gone (deleted, or replaced by a file or a link); restore it, "
        f"or delete the workspace (DELETE /v1/workspaces/{workspace.id}) and register the new location"
    )


def broken_message(workspace: Workspace) -> str:
    return (
        f"the index of workspace {workspace.id} cannot be opened (its cache directory is not a directory, or its "
        f"files are unreadable); delete the workspace (DELETE /v1/workspaces/{workspace.id}) and register it again"
    )


def chunk_point_id(key: str) -> str:
    return point_id(COLLECTION, key)


def _building_notice(runtime: WorkspaceRuntime) -> str:
    if runtime.progress:
        done, total = runtime.progress
        return f"the workspace index is being updated ({done} of {total} changed files done); results may be incomplete"
    return "the workspace index is being updated; results may be incomplete"


def _partial_notice(report: SyncReport) -> str:
    return (
        f"the workspace index is still being built ({report.files_left} files left); results may be incomplete, "
        "the rest is indexed in the background"
    )


# One Workspaces per engine; entries go when their engine is collected.
_BY_ENGINE: dict[int, tuple[weakref.ref[Any], Workspaces]] = {}


def workspaces_of(engine: Engine) -> Workspaces:
    entry = _BY_ENGINE.get(id(engine))
    if entry is not None and entry[0]() is engine:
        return entry[1]
    workspaces = Workspaces(engine)
    key = id(engine)
    _BY_ENGINE[key] = (weakref.ref(engine, lambda _ref: _forget(key)), workspaces)
    return workspaces


def _forget(key: int) -> None:
    entry = _BY_ENGINE.pop(key, None)
    if entry is not None:
        entry[1].close()


def close_workspaces(engine: Engine) -> None:
    """Close the engine's open caches (the CLI calls it before closing the engine)."""
    entry = _BY_ENGINE.pop(id(engine), None)
    if entry is not None:
        entry[1].close()
