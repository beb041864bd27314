"""Writing a workspace's records: walk it, re-chunk changed files, and bring the store, the lexical
index and the chunk cache in line, writing only what changed (one revalidation).

One pass (``sync``):
1. walk the tree (``walker.py``) and compare each file's size and mtime with the cache;
2. deleted files: their points, trigram documents and cache rows go;
3. new and changed files, in batches: chunk them (``chunking.py``: on the event loop for a small
   change, ahead of the writes in worker processes for a large build), then per batch
   - store, through the code surface's ``RecordIndex``: delete the keys the files no longer have;
     in a warm workspace write records for new keys, ``pending`` and queued for embedding (a cold
     workspace's chunks have no point until embedded: the store holds what dense search needs);
     a chunk moved by an edit above it keeps its key, its point and its vector
     (its lines are the cache's);
   - lexical index (``trigram.py``: BM25 terms and trigrams): replace the files' documents, commit
     (in a thread: tantivy releases the GIL);
   - cache: replace the files' rows, last (see ``cache.py`` on crash safety).
A ``deadline`` stops between batches; the rest stays "changed" for the next pass.

``write_points`` gives a cold workspace's chunks their points: pending and queued when it warms
(``queue_cold``), cold for a search that embeds a small scope now.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from service.code.cache import CachedChunk, FileState
from service.code.chunking import ChunkSource, chunked, default_processes
from service.code.context import chunk_terms
from service.code.model import (
    COLD,
    RECORD_KIND,
    SURFACE_NAME,
    dirs_of,
)
from service.code.roots import protected_dirs
from service.code.trigram import TrigramIndex
from service.code.walker import WalkedFile, WalkResult, walk, walk_paths
from service.engine.records import PENDING, IndexRecord
from service.engine.store import StoreError

if TYPE_CHECKING:
    from service.code.cache import ChunkCache
    from service.code.workspace import Workspace
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# A batch commits the store, the lexical index and the cache together: big enough to amortize a
# trigram commit, small enough that a deadline or a crash loses little work.
BATCH_FILES = 200
BATCH_CHUNKS = 4_000

# Chunks given points (and queued) per page by ``write_points``.
QUEUE_PAGE = 1_024

# Called with (files done, files in all) as a revalidation goes.
SyncProgress = Callable[[int, int], None]


class IndexTarget(Protocol):
    """The open workspace a revalidation works on (``runtime.WorkspaceRuntime`` is one): its chunk
    cache, and the trigram reader it reloads or replaces after a write."""

    workspace: Workspace
    cache: ChunkCache
    trigram_dir: Path
    trigram: TrigramIndex


@dataclass
class SyncReport:
    """What one revalidation did. ``to_embed``: new chunks queued for embedding (warm workspaces)."""

    files_seen: int = 0
    files_added: int = 0
    files_changed: int = 0
    files_deleted: int = 0
    files_unchanged: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    chunks_kept: int = 0
    chunks_moved: int = 0
    to_embed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    complete: bool = True
    files_left: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def changed_anything(self) -> bool:
        return bool(self.files_added or self.files_changed or self.files_deleted)


def skip_counts(result: WalkResult) -> dict[str, int]:
    return {
        "binary": result.skipped_binary,
        "too_large": result.skipped_too_large,
        "ignored": result.skipped_ignored,
        "symlinks": result.skipped_symlinks,
        "unreadable": result.skipped_unreadable,
        "pruned_dirs": result.pruned_dirs,
    }


async def sync(engine: Engine, runtime: IndexTarget, *, deadline: float | None = None, progress: SyncProgress | None = None) -> SyncReport:
    """Bring the workspace's index in line with its tree (see the module docstring)."""
    started = time.monotonic()
    workspace = runtime.workspace
    # The service's skip_dirs apply to every workspace, beside the workspace's own.
    skip_dirs = (*engine.settings.skip_dirs, *workspace.search.skip_dirs)
    known = runtime.cache.file_states()  # also spares the walk the binary probe of unchanged files
    walked = await asyncio.to_thread(walk, workspace.root, skip_dirs, engine.settings.max_file_bytes, protected_dirs(engine.settings), known)
    current = {f.path: f for f in walked.files}
    deleted = sorted(path for path in known if path not in current)
    changed = [f for f in walked.files if known.get(f.path) != (f.size, f.mtime_ns)]
    report = SyncReport(files_seen=len(walked.files), skipped=skip_counts(walked))
    report.files_unchanged = len(walked.files) - len(changed)
    runtime.cache.set_meta("skipped", report.skipped)
    if not deleted and not changed:
        runtime.cache.set_meta("complete", True)
        report.seconds = time.monotonic() - started
        return report
    total = len(changed)
    done = await _write_changes(engine, runtime, report, known, deleted, changed, deadline=deadline, progress=progress)
    report.files_left = total - done
    report.complete = report.files_left == 0
    runtime.cache.set_meta("complete", report.complete)
    report.seconds = time.monotonic() - started
    log.info("workspace revalidated", extra={"workspace": workspace.id, **{k: v for k, v in report.as_dict().items() if k != "skipped"}})
    return report


async def sync_paths(engine: Engine, runtime: IndexTarget, paths: Collection[str]) -> SyncReport:
    """Bring only ``paths`` (relative to the root: the files a watcher saw change) in line with the
    tree, as ``sync`` would: one the walker lists is re-chunked when its size or mtime moved, an
    indexed one it no longer lists goes, and so does every indexed file under one that is gone (a
    deleted directory). The rest of the tree is neither walked nor read; nothing is written when
    nothing changed."""
    started = time.monotonic()
    workspace = runtime.workspace
    skip_dirs = (*engine.settings.skip_dirs, *workspace.search.skip_dirs)
    walked = await asyncio.to_thread(walk_paths, workspace.root, paths, skip_dirs, engine.settings.max_file_bytes, protected_dirs(engine.settings))
    known = runtime.cache.file_states()
    current = {f.path: f for f in walked.files}
    gone = [path for path in paths if path not in current]
    under = tuple(path + "/" for path in gone if path not in known and not (workspace.root / path).exists())
    deleted = sorted({path for path in gone if path in known} | ({path for path in known if path.startswith(under)} if under else set()))
    changed = [f for f in walked.files if known.get(f.path) != (f.size, f.mtime_ns)]
    report = SyncReport(files_seen=len(walked.files), files_unchanged=len(walked.files) - len(changed), complete=bool(runtime.cache.get_meta("complete")))
    if not deleted and not changed:
        return report
    await _write_changes(engine, runtime, report, known, deleted, changed)
    report.seconds = time.monotonic() - started
    log.info("workspace files updated", extra={"workspace": workspace.id, **{k: v for k, v in report.as_dict().items() if k != "skipped"}})
    return report


async def _write_changes(
    engine: Engine,
    runtime: IndexTarget,
    report: SyncReport,
    known: dict[str, tuple[int, int]],
    deleted: list[str],
    changed: Sequence[WalkedFile],
    *,
    deadline: float | None = None,
    progress: SyncProgress | None = None,
) -> int:
    """Drop ``deleted`` from the index, then re-chunk and write ``changed`` in batches (until
    ``deadline``), counting into ``report``; the number of changed files handled."""
    writer = _ChangeWriter(engine, runtime, report)
    workspace = runtime.workspace
    source = ChunkSource(str(workspace.root), workspace.id, workspace.embed_model)
    processes = engine.settings.index_processes
    batches = _batches(changed)
    done = 0
    try:
        if deleted:
            await writer.apply([], deleted)
            report.files_deleted = len(deleted)
        if progress is not None:
            progress(0, len(changed))
        if batches and (deadline is None or time.monotonic() <= deadline):
            workers = default_processes() if processes is None else processes
            async with aclosing(chunked(source, batches, workers)) as results:
                async for batch in results:
                    await writer.apply(batch.files, batch.gone, batch.chunks, batch.terms)
                    report.files_added += sum(1 for f in batch.files if f.path not in known)
                    report.files_changed += sum(1 for f in batch.files if f.path in known)
                    done += len(batch.files) + len(batch.gone)
                    if progress is not None:
                        progress(done, len(changed))
                    if deadline is not None and time.monotonic() > deadline:
                        break
    finally:
        await writer.close()
    return done


def _batches(files: Sequence[WalkedFile]) -> list[list[WalkedFile]]:
    batches: list[list[WalkedFile]] = []
    current: list[WalkedFile] = []
    size = 0
    for walked in files:
        current.append(walked)
        size += walked.size
        # ~1.3 KB a chunk: bound a batch by bytes as well as files.
        if len(current) >= BATCH_FILES or size >= BATCH_CHUNKS * 1_300:
            batches.append(current)
            current, size = [], 0
    if current:
        batches.append(current)
    return batches


class _ChangeWriter:
    """Applies batches of file changes to the store, the lexical index and the cache, in that order."""

    def __init__(self, engine: Engine, runtime: IndexTarget, report: SyncReport) -> None:
        self.engine = engine
        self.records = engine.records(SURFACE_NAME)
        self.runtime = runtime
        self.report = report
        self._trigram: TrigramIndex | None = None
        self._commit: asyncio.Future[None] | None = None

    async def apply(self, files: Sequence[WalkedFile], deleted: Sequence[str], chunks: Sequence[CachedChunk] = (), terms: Sequence[str] | None = None) -> None:
        """Write the chunks of ``files`` (``terms``: their BM25 terms, when already derived) and drop ``deleted``."""
        cache = self.runtime.cache
        paths = [*deleted, *(f.path for f in files)]
        old = {c.key: c for cs in cache.chunks_of(paths).values() for c in cs}
        new = {c.key: c for c in chunks}
        removed = [key for key in old if key not in new]
        added = [c for key, c in new.items() if key not in old]
        moved = [c for key, c in new.items() if key in old and (old[key].start_line, old[key].end_line) != (c.start_line, c.end_line)]
        if removed:
            await self.records.delete(removed)
        queued = await self._write_points(added)
        cache.note_trigram_pending(paths)
        await self._write_trigram(paths, chunks, terms)
        states = [FileState(f.path, f.size, f.mtime_ns) for f in files]
        cache.replace_files(states, list(chunks), deleted)
        self.report.chunks_removed += len(removed)
        self.report.chunks_added += len(added)
        self.report.chunks_kept += len(new) - len(added)
        self.report.chunks_moved += len(moved)
        self.report.to_embed += queued

    async def _write_points(self, added: Sequence[CachedChunk]) -> int:
        """Write points for new keys of a warm workspace, pending and queued for embedding (a redone
        batch rewrites any that exist, keeping their vectors); returns how many were queued. A cold
        workspace's chunks get no point until a search or warming embeds them (``write_points``),
        and a moved chunk's point is not touched: its lines are the cache's."""
        workspace = self.runtime.workspace
        if not workspace.warm:
            return 0
        written = await self.records.write((chunk_record(workspace, c.key, c.path, c.content_hash) for c in added), embed=True)
        return written.to_embed

    async def _write_trigram(self, paths: Sequence[str], chunks: Sequence[CachedChunk], terms: Sequence[str] | None) -> None:
        if self._trigram is None:
            self._trigram = TrigramIndex.open(self.runtime.trigram_dir)
        self._trigram.delete_paths(paths)
        self._trigram.add(lexical_documents(chunks, terms))
        # commit() waits for tantivy's indexing thread without holding the GIL: run it off the loop.
        self._commit = asyncio.ensure_future(asyncio.to_thread(self._trigram.commit))
        await asyncio.shield(self._commit)
        self.runtime.trigram.reload()

    async def close(self) -> None:
        if self._commit is not None and not self._commit.done():
            await asyncio.wait([self._commit])  # never roll back under a commit running in its thread
        if self._trigram is not None:
            self._trigram.close()
            self._trigram = None


def chunk_record(workspace: Workspace, key: str, path: str, content_hash: str) -> IndexRecord:
    """The record of a chunk: the record fields and the code surface's own. It holds no text (the
    workspace's cache does: ``texts.py``), so its hash comes with it. ``embed_dimensions``: the
    workspace's ``embeddings_dimensions``, which background embedding asks of the model (the same
    size its searches query)."""
    payload: dict[str, Any] = {"workspace": workspace.id, "path": path, "dirs": dirs_of(path)}
    dimensions = workspace.search.embeddings_dimensions
    if dimensions:
        payload["embed_dimensions"] = dimensions
    return IndexRecord(
        key=key,
        tenant=workspace.tenant,
        kind=RECORD_KIND,
        embed_text="",  # read from the cache when embedded
        terms="",  # a chunk's BM25 terms are in the workspace's lexical index (trigram.py), not the store
        payload=payload,
        embed_model=workspace.embed_model,
        known_hash=content_hash,
    )


async def write_points(engine: Engine, workspace: Workspace, cache: ChunkCache, prefix: str = "", paths: Sequence[str] | None = None, *, queue: bool) -> int:
    """Give the workspace's chunks under ``prefix`` (or in ``paths``) that have no point one: with
    ``queue`` pending and queued for embedding (warming; a ``cold`` point an earlier release wrote
    turns pending and is queued too), else ``cold`` for a search to embed now. Returns how many
    points were written or queued."""
    records = engine.records(SURFACE_NAME)
    done = 0
    for rows in cache.iter_hashes(prefix, paths, batch=QUEUE_PAGE):
        existing = await records.get_many([key for key, _, _ in rows])
        missing = [chunk_record(workspace, key, path, digest) for key, path, digest in rows if key not in existing]
        if missing:
            written = await records.write(missing, embed=queue, hold_as=None if queue else COLD)
            done += written.to_embed if queue else written.written
        if queue:
            cold = [(key, str(payload["content_hash"])) for key, payload in existing.items() if payload.get("embed_state") == COLD]
            if cold:
                await _set_pending(engine, [key for key, _ in cold])
                await records.enqueue_embedding(cold)
                done += len(cold)
    return done


async def queue_cold(engine: Engine, workspace: Workspace, cache: ChunkCache) -> int:
    """Queue the embedding of every chunk of the workspace that has no vector nor a queued job (warming)."""
    return await write_points(engine, workspace, cache, queue=True)


async def _set_pending(engine: Engine, keys: list[str]) -> None:
    """Mark chunks pending (the sweeper's clock starts); one deleted meanwhile (a concurrent
    revalidation) is skipped."""
    records = engine.records(SURFACE_NAME)
    update = {"embed_state": PENDING, "pending_since": int(time.time())}
    try:
        await records.set_payload(keys, update)
    except StoreError:
        for key in keys:
            try:
                await records.set_payload([key], update)
            except StoreError:
                continue


def lexical_documents(chunks: Iterable[CachedChunk], terms: Sequence[str] | None = None) -> Iterator[tuple[str, str, str, str, int, str | None]]:
    """The lexical index's documents of ``chunks``: key, path, text, BM25 terms (``terms``, one
    per chunk, when already derived), first line and symbol."""
    if terms is not None:
        for chunk, chunk_terms_ in zip(chunks, terms, strict=True):
            yield chunk.key, chunk.path, chunk.text, chunk_terms_, chunk.start_line, chunk.symbol
        return
    for chunk in chunks:
        yield chunk.key, chunk.path, chunk.text, chunk_terms(chunk.path, chunk.symbol, chunk.text), chunk.start_line, chunk.symbol


async def repair_trigram(runtime: IndexTarget) -> int:
    """Put back in the trigram index, as the cache has them, the files of a write that reached the
    trigram index but not the cache (the process died between the two); the paths repaired."""
    pending = runtime.cache.trigram_pending()
    if not pending:
        return 0
    index = TrigramIndex.open(runtime.trigram_dir)
    try:
        index.delete_paths(pending)
        index.add(lexical_documents(c for chunks in runtime.cache.chunks_of(pending).values() for c in chunks))
        await asyncio.to_thread(index.commit)
    finally:
        index.close()
    runtime.trigram.reload()
    runtime.cache.clear_trigram_pending()
    return len(pending)


async def rebuild_trigram(runtime: IndexTarget) -> int:
    """Re-derive the trigram index from the cache (after a crash left the two apart)."""
    shutil.rmtree(runtime.trigram_dir, ignore_errors=True)
    index = TrigramIndex.open(runtime.trigram_dir)
    try:
        added = 0
        for rows in runtime.cache.iter_chunks():
            added += index.add(lexical_documents(rows))
            await asyncio.sleep(0)
        await asyncio.to_thread(index.commit)
    finally:
        index.close()
    runtime.trigram = TrigramIndex.open(runtime.trigram_dir, writable=False)
    return added
