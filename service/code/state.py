"""What the code surface keeps open per engine: its registered workspaces, their open caches and revalidation.

``workspaces_of(engine)`` is the one ``Workspaces`` of an engine, opened by the surface's
``on_open`` (``open_workspaces``) and kept on the engine under the surface's name: request
handlers, jobs and the CLI share it, so the in-process worker and the front end see the same
caches and locks. Its chunks are read and written through the code surface's ``RecordIndex``.

A workspace is revalidated against its tree at most every ``settings.revalidate_interval_s``
(10 s by default); one revalidation at a time per workspace (an asyncio lock: a search that finds
one running waits briefly, then searches what is indexed, with a notice).

A workspace whose root was deleted (or replaced by a file) is ``missing``: its status says so and a
search answers 409 before it reads anything indexed. One whose cache cannot be opened (its
directory replaced by a file, an unreadable database) is ``broken``: its status says so, a search
answers 409, and deleting it always works.

A workspace indexed by a release whose chunk records held other texts (``context.RECORD_FORMAT``)
is indexed again when it is opened: its points and cache are dropped, the next revalidation writes
every chunk anew and embedding fills the vectors, so old and new vectors are never mixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from service.code.cache import ChunkCache
from service.code.context import RECORD_FORMAT
from service.code.ingest import SyncProgress, SyncReport, rebuild_trigram, sync
from service.code.matchers import MatcherPool
from service.code.model import SURFACE_NAME, workspace_filter
from service.code.roots import mark_no_index
from service.code.trigram import IndexLocked, TrigramIndex
from service.code.workspace import SearchConfig, Workspace, WorkspaceRegistry, new_workspace, with_search
from service.engine.records import DONE, PENDING
from service.engine.store import Filter, Match
from service.errors import NotFound, WorkspaceBroken, WorkspaceMissing

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

TRIGRAM_DIR = "trigram"
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
        self.records = engine.records(SURFACE_NAME)
        self.registry = WorkspaceRegistry(engine.settings.data_dir)
        self._runtimes: dict[str, WorkspaceRuntime] = {}
        self._opening = asyncio.Lock()
        # One registration at a time: the ownership checks and the save are one step.
        self.registering = asyncio.Lock()
        # Workspaces whose cache failed to open, and why (the status and the dashboard show it).
        self.broken: dict[str, str] = {}
        # The warm regex matching processes of this engine's searches (closed with the workspaces).
        self.matchers = MatcherPool()

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
        await self.records.delete_where(workspace_filter(workspace))
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

    def opened(self, workspace_id: str) -> WorkspaceRuntime | None:
        """The workspace's runtime if it is open (nothing is opened)."""
        return self._runtimes.get(workspace_id)

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
        """Re-derive what a crash, a wiped directory or an older record format left apart from the cache."""
        await self._upgrade_records(runtime)
        cached = runtime.cache.chunk_count()
        if cached and not await self.records.count(workspace_filter(runtime.workspace)):
            log.warning("store lost the workspace's chunks; reindexing", extra={"workspace": runtime.workspace.id})
            runtime.cache.clear()
            cached = 0
        if runtime.trigram.num_docs != cached:
            log.warning("trigram index and chunk cache disagree; rebuilding it", extra={"workspace": runtime.workspace.id})
            await rebuild_trigram(runtime)

    async def _upgrade_records(self, runtime: WorkspaceRuntime) -> None:
        """A workspace indexed with another record format (what a chunk's embedded text and terms
        hold) loses its chunks and is indexed again by the next revalidation: a file that did not
        change is never read again, so its records would otherwise keep the old text and vectors
        beside new ones, and every vector must be computed anew anyway."""
        stored = runtime.cache.get_meta("record_format")
        if stored == RECORD_FORMAT:
            return
        if runtime.cache.chunk_count() or runtime.cache.file_count():
            log.warning("workspace indexed with another record format; indexing it again", extra={"workspace": runtime.workspace.id, "format": stored})
            await self.records.delete_where(workspace_filter(runtime.workspace))
            runtime.cache.clear()
        runtime.cache.set_meta("record_format", RECORD_FORMAT)

    def close(self) -> None:
        for runtime in self._runtimes.values():
            runtime.close()
        self._runtimes.clear()
        self.matchers.close()

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

    async def counts(self, workspace: Workspace, flt: Filter | None = None) -> dict[str, int]:
        """``chunks``, ``embedded``, ``pending`` and ``cold`` chunks of the workspace (under ``flt``)."""
        base = flt or workspace_filter(workspace)
        total = await self.records.count(base)
        embedded = await self.records.count(base.and_(Match("embed_state", DONE)))
        pending = await self.records.count(base.and_(Match("embed_state", PENDING)))
        return {"chunks": total, "embedded": embedded, "pending": pending, "cold": max(total - embedded - pending, 0)}


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


async def open_workspaces(engine: Engine) -> None:
    """Open the code surface's state on ``engine`` (its ``on_open``): nothing is read until used."""
    engine.state[SURFACE_NAME] = Workspaces(engine)


def workspaces_of(engine: Engine) -> Workspaces:
    """The engine's workspaces (the code surface must have been opened on it)."""
    workspaces: Workspaces = engine.state_of(SURFACE_NAME)
    return workspaces


def close_workspaces(engine: Engine) -> None:
    """Close the engine's open caches and matching processes (the CLI calls it before closing the
    engine); a later use opens them again."""
    workspaces = engine.state.get(SURFACE_NAME)
    if isinstance(workspaces, Workspaces):
        workspaces.close()
        engine.state[SURFACE_NAME] = Workspaces(engine)
