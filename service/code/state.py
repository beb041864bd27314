"""What the code surface keeps open per engine: its registered workspaces, their open caches and revalidation.

``workspaces_of(engine)`` is the one ``Workspaces`` of an engine, opened by the surface's
``on_open`` (``open_workspaces``) and kept on the engine under the surface's name: request
handlers, jobs and the CLI share it, so the in-process worker and the front end see the same
caches and locks. Its chunks' points are read and written through the code surface's
``RecordIndex``; their BM25 terms and trigrams through the workspace's lexical index.

A workspace is revalidated against its tree at most every ``settings.revalidate_interval_s``
(10 s by default); one revalidation at a time per workspace (an asyncio lock: a search that finds
one running waits briefly, then searches what is indexed, with a notice).

An open workspace's root is watched (``watcher.py``, ``settings.workspace_watch``): a batch of
changed files is applied at once (``ingest.sync_paths``; a changed directory or ``.gitignore``:
a full revalidation), and once a full revalidation has run under the watch a search walks nothing
(``freshness`` ``watch``). A root that cannot be watched, or whose watch is lost, is revalidated by
mtime as above (``revalidate``). With ``workspace_nodes`` only the workspace's own node watches it.
A workspace is opened by its first use and closed after ``settings.workspace_idle_close_s``
without one (``residency.py``), watch included.

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
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.code.cache import CACHE_FILE, ChunkCache
from service.code.context import RECORD_FORMAT
from service.code.ingest import SyncProgress, SyncReport, queue_cold, rebuild_trigram, repair_trigram, sync, sync_paths
from service.code.matchers import MatcherPool
from service.code.model import COLD, SURFACE_NAME, workspace_filter
from service.code.residency import Residency
from service.code.roots import mark_no_index, protected_dirs
from service.code.trigram import IndexLocked, TrigramIndex
from service.code.walker import DEFAULT_SKIP_DIRS
from service.code.watcher import RootWatcher
from service.code.workspace import SearchConfig, Workspace, WorkspaceRegistry, new_workspace, with_search
from service.engine.analyzer import ANALYZER_VERSION
from service.engine.records import DONE, PENDING
from service.engine.store import Match
from service.errors import NotFound, WorkspaceBroken, WorkspaceMissing
from service.routing import node_for_workspace

# The cache's note that the store's points of the workspace hold no texts (older releases wrote
# each chunk's embedded text and BM25 terms there).
STORE_TEXTS, STORE_TEXTS_NONE = "store_texts", "none"
# Noted once the points an earlier release wrote for unembedded chunks (``cold``) are gone.
COLD_POINTS, COLD_POINTS_NONE = "cold_points", "none"
_STORE_TEXT_FIELDS = ("terms", "embed_text", "embed_name")
_TEXTS_PAGE = 512

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

TRIGRAM_DIR = "trigram"
MISSING, BROKEN = "missing", "broken"
# How a workspace learns of edits: its root is watched, or its files' mtimes are compared on search.
WATCH, REVALIDATE = "watch", "revalidate"


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
        self.watcher: RootWatcher | None = None
        # Monotonic start of the last full revalidation that completed.
        self.synced_from: float | None = None

    @property
    def complete(self) -> bool:
        """Whether a revalidation has indexed every file it found (False while the first build runs)."""
        return bool(self.cache.get_meta("complete"))

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self.cache.close()


class Workspaces:
    """Registered workspaces of one engine and their open runtimes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.records = engine.records(SURFACE_NAME)
        self.registry = WorkspaceRegistry(engine.settings.data_dir)
        self._runtimes: dict[str, WorkspaceRuntime] = {}
        # Opens in flight, one per workspace: callers share it, and one that gives up (its request's
        # deadline) leaves it running for the next, since healing a large workspace's trigram index
        # can take longer than one request may wait.
        self._opening: dict[str, asyncio.Task[WorkspaceRuntime]] = {}
        # One registration at a time: the ownership checks and the save are one step.
        self.registering = asyncio.Lock()
        # Workspaces whose cache failed to open, and why (the status and the dashboard show it).
        self.broken: dict[str, str] = {}
        # The warm regex matching processes of this engine's searches (closed with the workspaces).
        self.matchers = MatcherPool()
        # Which open workspaces are in use; closes those left idle.
        self.residency = Residency(engine.settings.workspace_idle_close_s, self._close_idle)
        # Why a workspace's root is not watched (the watch limit, the root gone), as last seen here.
        self.unwatched: dict[str, str] = {}

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
            runtime.last_sync_at = runtime.synced_from = None  # skip_dirs may have changed: revalidate on next use
        return updated, False

    async def delete(self, workspace: Workspace) -> None:
        """Remove the workspace, its points and its cache; works on a broken one too."""
        await self.reset_index(workspace)
        self.registry.delete(workspace.id)
        self.broken.pop(workspace.id, None)
        self.unwatched.pop(workspace.id, None)
        self.residency.forget(workspace.id, history=True)
        cache_dir = workspace.cache_dir(self.engine.settings)
        shutil.rmtree(cache_dir, ignore_errors=True)
        self._remove_stray_file(cache_dir)
        shutil.rmtree(self.engine.settings.data_dir / "workspaces" / workspace.id, ignore_errors=True)

    async def reset_index(self, workspace: Workspace) -> None:
        """Drop every indexed chunk of the workspace (store points, cache, trigram index)."""
        await self._settle_open(workspace.id)
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

    @contextlib.contextmanager
    def cache_view(self, workspace: Workspace) -> Iterator[ChunkCache]:
        """The workspace's chunk cache to read: the open one, else one opened for the call and closed
        after (a status never opens the workspace); ``WorkspaceBroken`` when it cannot be read."""
        runtime = self._runtimes.get(workspace.id)
        if runtime is not None:
            yield runtime.cache
            return
        cache_dir = workspace.cache_dir(self.engine.settings)
        try:
            cache = ChunkCache(cache_dir)
            mark_no_index(cache_dir)
        except (OSError, sqlite3.Error, ValueError) as exc:
            log.warning("workspace cache cannot be opened", extra={"workspace": workspace.id, "error": str(exc)})
            self.broken[workspace.id] = broken_message(workspace)
            raise WorkspaceBroken(self.broken[workspace.id]) from None
        try:
            yield cache
        finally:
            cache.close()

    async def runtime(self, workspace: Workspace) -> WorkspaceRuntime:
        """The open workspace, opened (and its root watched) if it is not: the calling task uses it
        (``residency.py``), so it stays open until that task ends and the idle period after."""
        runtime = self._runtimes.get(workspace.id)
        if runtime is None:
            task = self._opening.get(workspace.id)
            if task is None:
                task = asyncio.create_task(self._open_and_keep(workspace), name=f"open workspace {workspace.id}")
                self._opening[workspace.id] = task
                task.add_done_callback(partial(self._opened, workspace.id))
            runtime = await asyncio.shield(task)
        self.residency.use(workspace.id)
        return runtime

    async def _open_and_keep(self, workspace: Workspace) -> WorkspaceRuntime:
        runtime = await self._open(workspace)
        self._runtimes[workspace.id] = runtime
        self._watch(runtime)
        return runtime

    def _opened(self, workspace_id: str, task: asyncio.Task[WorkspaceRuntime]) -> None:
        if self._opening.get(workspace_id) is task:
            del self._opening[workspace_id]
        if not task.cancelled():
            task.exception()  # retrieved here: every caller may have given up before it ended

    async def _settle_open(self, workspace_id: str) -> None:
        """Stop an open in flight (a reset or delete goes first) and wait until it has let go."""
        task = self._opening.pop(workspace_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _close_idle(self, workspace_id: str) -> bool:
        """Close an idle workspace's cache, trigram reader and watch; False while it applies a change."""
        runtime = self._runtimes.get(workspace_id)
        if runtime is None:
            return True
        if runtime.lock.locked() or (runtime.watcher is not None and runtime.watcher.busy):
            return False
        del self._runtimes[workspace_id]
        runtime.close()
        return True

    def resident(self, workspace: Workspace) -> dict[str, Any]:
        """Whether the workspace is open in this process, when it was last used here (epoch seconds,
        None since the process started) and after how long without use it closes."""
        return {
            "open": workspace.id in self._runtimes,
            "last_used": self.residency.last_used(workspace.id),
            "closes_after_s": self.residency.idle_close_s,
        }

    # ---- watching --------------------------------------------------------------------------------

    def freshness(self, workspace: Workspace) -> tuple[str, str | None]:
        """``(watch|revalidate, why not watched)``: how edits reach the index (see the module docstring)."""
        off = self._not_watched_here(workspace)
        if off is not None:
            return REVALIDATE, off
        runtime = self._runtimes.get(workspace.id)
        watcher = runtime.watcher if runtime is not None else None
        if watcher is not None and watcher.lost is not None:
            return REVALIDATE, watcher.lost
        if watcher is None and workspace.id in self.unwatched:
            return REVALIDATE, self.unwatched[workspace.id]  # as last seen; the next open tries again
        return WATCH, None

    def _not_watched_here(self, workspace: Workspace) -> str | None:
        settings = self.engine.settings
        if not settings.workspace_watch:
            return "workspace_watch is off"
        if settings.workspace_nodes:
            node = node_for_workspace(workspace.id, settings.workspace_nodes)
            if node != settings.node_name:
                return f"watched by its node {node}"
        return None

    def _watch(self, runtime: WorkspaceRuntime) -> None:
        """Watch the runtime's root, unless this process may not (the setting, another node)."""
        workspace = runtime.workspace
        if self._not_watched_here(workspace) is not None:
            return
        settings = self.engine.settings
        runtime.watcher = RootWatcher(
            workspace.root,
            lambda paths: self._apply_watched(runtime, paths),
            lambda why: self._watch_lost(runtime, why),
            pruned_names=(*DEFAULT_SKIP_DIRS, *settings.skip_dirs),
            ignored_dirs=(*protected_dirs(settings), runtime.cache_dir),
        )
        runtime.watcher.start()

    def _watch_lost(self, runtime: WorkspaceRuntime, why: str) -> None:
        """The watch ended: the next search revalidates by mtime (and every search after, as due)."""
        self.unwatched[runtime.workspace.id] = why
        runtime.last_sync_at = runtime.synced_from = None

    async def _apply_watched(self, runtime: WorkspaceRuntime, paths: set[str]) -> None:
        """Index the changed files (a changed directory or ignore file: revalidate the whole tree)."""
        workspace = runtime.workspace
        pruned = {*DEFAULT_SKIP_DIRS, *self.engine.settings.skip_dirs, *workspace.search.skip_dirs}
        whole = any(_changes_rules(workspace.root, path, pruned) for path in paths)
        async with runtime.lock:
            if self._runtimes.get(workspace.id) is not runtime:
                return  # closed or reset meanwhile: the next open revalidates
            started = time.monotonic()
            try:
                if whole:
                    report = await sync(self.engine, runtime)
                    runtime.last_report = report
                    runtime.last_sync_at = time.monotonic() if report.complete else None
                    runtime.synced_from = started if report.complete else None
                else:
                    await sync_paths(self.engine, runtime, paths)
            except (IndexLocked, OSError) as exc:
                # Another process writing the index, or the root going away: the next search revalidates.
                log.warning("watched changes not applied", extra={"workspace": workspace.id, "error": str(exc)})
                runtime.last_sync_at = runtime.synced_from = None

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
        except asyncio.CancelledError:
            if runtime is not None:
                runtime.close()
            raise
        self.broken.pop(workspace.id, None)
        return runtime

    async def _heal(self, runtime: WorkspaceRuntime) -> None:
        """Re-derive what a crash, a wiped directory or an older record format left apart from the cache."""
        await self._upgrade_records(runtime)
        await self._drop_cold_points(runtime)
        await self._drop_store_texts(runtime)
        cached = runtime.cache.chunk_count()
        if runtime.workspace.warm and cached > await self.records.count(workspace_filter(runtime.workspace)):
            # A warm workspace's chunks all have points; some have none when the store lost them
            # (or a build wrote them while the workspace turned warm): queued again.
            queued = await queue_cold(self.engine, runtime.workspace, runtime.cache)
            log.warning("warm workspace had chunks without points; queued their embedding", extra={"workspace": runtime.workspace.id, "queued": queued})
        repaired = await repair_trigram(runtime)
        if repaired:
            log.warning("trigram index was ahead of the chunk cache; put back its files", extra={"workspace": runtime.workspace.id, "files": repaired})
        if runtime.trigram.num_docs != cached:
            log.warning("lexical index and chunk cache disagree; rebuilding it", extra={"workspace": runtime.workspace.id})
            await rebuild_trigram(runtime)
        elif cached and runtime.cache.get_meta("lexical_analyzer") != ANALYZER_VERSION:
            log.warning("lexical index holds another analyzer's terms; rebuilding it", extra={"workspace": runtime.workspace.id})
            await rebuild_trigram(runtime)
        runtime.cache.set_meta("lexical_analyzer", ANALYZER_VERSION)

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

    async def _drop_cold_points(self, runtime: WorkspaceRuntime) -> None:
        """A workspace indexed before unembedded chunks left the store has a ``cold`` point for each:
        deleted once (a search or warming gives a chunk its point again when it embeds it)."""
        if runtime.cache.get_meta(COLD_POINTS) == COLD_POINTS_NONE:
            return
        cold = workspace_filter(runtime.workspace).and_(Match("embed_state", COLD))
        if dropped := await self.records.count(cold):
            await self.records.delete_where(cold)
            log.warning("dropped the store points of the workspace's unembedded chunks", extra={"workspace": runtime.workspace.id, "chunks": dropped})
        runtime.cache.set_meta(COLD_POINTS, COLD_POINTS_NONE)

    async def _drop_store_texts(self, runtime: WorkspaceRuntime) -> None:
        """A workspace indexed before its chunks' texts and BM25 terms left the store (for the
        cache and the lexical index) still has them in its points: emptied once, vectors kept."""
        if runtime.cache.get_meta(STORE_TEXTS) == STORE_TEXTS_NONE:
            return
        keys: list[str] = []
        emptied = 0
        async for point in self.records.scroll_all(workspace_filter(runtime.workspace)):
            if any(point.payload.get(name) for name in _STORE_TEXT_FIELDS):
                keys.append(str(point.payload["key"]))
            if len(keys) >= _TEXTS_PAGE:
                await self.records.set_payload(keys, dict.fromkeys(_STORE_TEXT_FIELDS, ""))
                emptied, keys = emptied + len(keys), []
        if keys:
            await self.records.set_payload(keys, dict.fromkeys(_STORE_TEXT_FIELDS, ""))
            emptied += len(keys)
        if emptied:
            log.warning("moved the workspace's chunk texts and BM25 terms out of the store", extra={"workspace": runtime.workspace.id, "chunks": emptied})
        runtime.cache.set_meta(STORE_TEXTS, STORE_TEXTS_NONE)

    def close(self) -> None:
        self.residency.close()
        for task in self._opening.values():
            task.cancel()
        self._opening.clear()
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
        if not force and self._watched(runtime):
            return await self._settle(runtime, wait_s)
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

            started = time.monotonic()
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
            runtime.synced_from = started if report.complete else None
        notices = [] if report.complete else [_partial_notice(report)]
        return Freshness(report=report, notices=notices)

    @staticmethod
    def _watched(runtime: WorkspaceRuntime) -> bool:
        """Whether the watch has been in place since before the last complete revalidation began:
        every edit since is applied by the watch, and a search need not walk the tree."""
        watcher = runtime.watcher
        return (
            watcher is not None
            and watcher.watching
            and watcher.ready_at is not None
            and runtime.synced_from is not None
            and runtime.synced_from >= watcher.ready_at
        )

    async def _settle(self, runtime: WorkspaceRuntime, wait_s: float) -> Freshness:
        """A watched workspace: wait (up to ``wait_s``) for the changes seen to be applied."""
        give_up = time.monotonic() + wait_s
        while (runtime.lock.locked() or (runtime.watcher is not None and runtime.watcher.busy)) and time.monotonic() < give_up:
            await asyncio.sleep(0.02)
        if runtime.lock.locked():
            return Freshness(busy=True, notices=[_building_notice(runtime)])
        return Freshness()

    def _recent(self, runtime: WorkspaceRuntime) -> bool:
        interval = self.engine.settings.revalidate_interval_s
        return runtime.last_sync_at is not None and time.monotonic() - runtime.last_sync_at < interval

    # ---- embedding state -------------------------------------------------------------------------

    async def counts(self, workspace: Workspace) -> dict[str, int]:
        """``chunks`` (the cache's), ``embedded``, ``pending`` and ``cold`` chunks of the workspace (a
        cold chunk has no point, or a ``cold`` one an earlier release wrote). Where this process has
        no cache of it, or one that cannot be read, the store's points are counted instead."""
        base = workspace_filter(workspace)
        embedded = await self.records.count(base.and_(Match("embed_state", DONE)))
        pending = await self.records.count(base.and_(Match("embed_state", PENDING)))
        total: int | None = None
        # Not indexed here (another node holds it, or it never was): a count must not create a cache.
        if self.opened(workspace.id) is not None or (workspace.cache_dir(self.engine.settings) / CACHE_FILE).is_file():
            try:
                with self.cache_view(workspace) as cache:
                    total = cache.chunk_count()
            except (WorkspaceBroken, sqlite3.Error):
                total = None
        if total is None:
            total = await self.records.count(base)
        return {"chunks": total, "embedded": embedded, "pending": pending, "cold": max(total - embedded - pending, 0)}


def _changes_rules(root: Path, path: str, pruned: set[str]) -> bool:
    """Whether a change at ``path`` may change which files are listed: an ignore file, or a
    directory (created, moved in, renamed) that the walk enters."""
    name = path.rpartition("/")[2]
    if name == ".gitignore" or path == ".git/info/exclude":
        return True
    try:
        return name not in pruned and (root / path).is_dir() and not (root / path).is_symlink()
    except OSError:
        return False


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
