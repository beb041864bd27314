"""Turning a batch of workspace files into cached chunks and their BM25 terms: in this process for a
small change, in worker processes for a large build.

Parsing and the declaration walk (tree-sitter) and the terms hold the GIL: on one thread they take
about as long as writing the store, the lexical index and the cache. A build of at least
``POOL_MIN_FILES`` files therefore chunks in a pool of ``processes`` worker processes (spawned, so
a worker shares no thread or lock of the service), up to ``AHEAD`` batches ahead of the writes,
while the service process writes the batches already chunked. A pool that cannot start or breaks
(a worker killed) leaves the rest of the build to this process: the answer is the same either way.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from service.code.cache import CachedChunk
from service.code.chunker import chunk_file
from service.code.context import chunk_terms, embed_text_of
from service.code.model import chunk_key
from service.code.walker import WalkedFile
from service.engine.records import content_hash

log = logging.getLogger(__name__)

# A build of fewer files chunks in the service process: a pool's start (about a second) would
# cost an edit more than it saves.
POOL_MIN_FILES = 400
# The default number of worker processes is the CPUs', up to this many.
MAX_PROCESSES = 4
# Batches chunked ahead of the one being written, per worker process.
AHEAD = 2
# How long in-process chunking runs on the event loop before yielding to queued requests.
YIELD_EVERY_S = 0.02


@dataclass(frozen=True)
class ChunkSource:
    """What chunking a workspace's file needs besides the file: where the files are, the workspace
    (chunk keys hold its id) and its model (a record's hash holds it)."""

    root: str
    workspace_id: str
    embed_model: str | None


@dataclass
class ChunkedBatch:
    """A batch chunked: the files read, the paths of those that vanished or cannot be read since
    the walk (treated as deleted), the chunks in file order, and each chunk's BM25 terms."""

    files: list[WalkedFile] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    chunks: list[CachedChunk] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)


def default_processes() -> int:
    """As many worker processes as CPUs this process may use, at most ``MAX_PROCESSES``: the service
    process only writes, and mostly waits on the workers (25 MB of Python on 2 CPUs: 23.1 s in the
    service process, 15.0 s with one worker, 13.5 s with two)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(min(cpus, MAX_PROCESSES), 1)


def chunk_one(source: ChunkSource, walked: WalkedFile, batch: ChunkedBatch) -> None:
    """Read and chunk one file into ``batch`` (into its ``gone`` when it cannot be read)."""
    try:
        text = (Path(source.root) / walked.path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        batch.gone.append(walked.path)
        return
    batch.files.append(walked)
    occurrences: dict[str, int] = {}
    for chunk in chunk_file(walked.path, text):
        seen = occurrences.get(chunk.content_hash, 0)
        occurrences[chunk.content_hash] = seen + 1
        key = chunk_key(source.workspace_id, walked.path, chunk.content_hash, seen)
        record_hash = content_hash(embed_text_of(walked.path, chunk.symbol, chunk.text), source.embed_model)
        batch.chunks.append(
            CachedChunk(key, walked.path, chunk.start_line, chunk.end_line, chunk.kind.value, chunk.symbol, chunk.content_hash, record_hash, chunk.text)
        )
        batch.terms.append(chunk_terms(walked.path, chunk.symbol, chunk.text))


def chunk_batch(source: ChunkSource, files: Sequence[WalkedFile]) -> ChunkedBatch:
    """Chunk ``files`` (a worker process's task)."""
    batch = ChunkedBatch()
    for walked in files:
        chunk_one(source, walked, batch)
    return batch


async def chunk_here(source: ChunkSource, files: Sequence[WalkedFile]) -> ChunkedBatch:
    """Chunk ``files`` on the event loop, yielding to queued requests every ``YIELD_EVERY_S``
    (tree-sitter holds the GIL: a thread would stall the loop anyway)."""
    batch = ChunkedBatch()
    last_yield = time.monotonic()
    for walked in files:
        chunk_one(source, walked, batch)
        if time.monotonic() - last_yield > YIELD_EVERY_S:
            await asyncio.sleep(0)
            last_yield = time.monotonic()
    return batch


def start_pool(processes: int) -> Executor | None:
    """A pool of ``processes`` spawned workers; None (chunk here) when it cannot start."""
    try:
        return ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))
    except (OSError, ValueError) as exc:
        log.warning("chunking in the service process: no worker pool", extra={"error": str(exc)})
        return None


async def chunked(source: ChunkSource, batches: Sequence[Sequence[WalkedFile]], processes: int) -> AsyncGenerator[ChunkedBatch, None]:
    """Each of ``batches`` chunked, in order; with ``processes`` > 0 and enough files, chunked ahead
    in worker processes while the caller writes the batches it already has. A caller that stops
    early (a deadline) leaves nothing running: the pool's queued work is cancelled."""
    files = sum(len(batch) for batch in batches)
    pool = start_pool(processes) if processes > 0 and files >= POOL_MIN_FILES and len(batches) > 1 else None
    if pool is None:
        for batch in batches:
            yield await chunk_here(source, batch)
        return
    log.info("chunking in worker processes", extra={"processes": processes, "files": files})
    loop = asyncio.get_running_loop()
    ahead: deque[asyncio.Future[ChunkedBatch]] = deque()
    following = iter(batches)
    broken = False
    try:
        for batch in batches:
            try:
                while not broken and len(ahead) < processes * AHEAD and (upcoming := next(following, None)) is not None:
                    ahead.append(asyncio.wrap_future(pool.submit(chunk_batch, source, upcoming), loop=loop))
            except BrokenProcessPool as exc:  # a worker died before a result said so
                broken = _broken(broken, exc)
            result = None
            if ahead:
                try:
                    result = await ahead.popleft()
                except BrokenProcessPool as exc:
                    broken = _broken(broken, exc)
            yield result if result is not None else await chunk_here(source, batch)
    finally:
        for future in ahead:
            future.cancel()
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _broken(already: bool, exc: BrokenProcessPool) -> bool:
    if not already:
        log.warning("a chunking worker died; chunking the rest in the service process", extra={"error": str(exc)})
    return True


__all__ = ["AHEAD", "POOL_MIN_FILES", "ChunkSource", "ChunkedBatch", "chunk_batch", "chunk_here", "chunked", "default_processes"]
