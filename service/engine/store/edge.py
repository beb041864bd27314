"""The embedded index store: the ``Store`` interface on qdrant-edge, one shard per collection, in a data directory this process owns.

Layout under ``root``::

    .lock                    flock(2) held by the owner process; holds its pid (``edge_lock``)
    <collection>/            the collection's sidecar and shard (``edge_collection``)

Facts about qdrant-edge 0.9 that shape this module (measured on the 2-core dev machine, 384-d):

- Every shard call holds the GIL, writes and ``flush()`` and ``optimize()`` included (a 20k-point
  ``update()`` run in a thread stalled the event loop 790 ms). A thread therefore buys no
  concurrency: queries run inline, and writes run inline in chunks with a yield to the loop between
  them, so a big batch cannot starve queries for longer than one chunk.
- Writes are durable once ``update()`` returns: the WAL survives a SIGKILL and is replayed on load.
  ``flush()`` moves them into segments; it runs every few thousand changes and on ``close()``.
- A second process's ``load()`` of a shard breaks the owner's next ``flush()``, hence our own lock
  on the directory, taken before any shard is touched.
- Edge optimizes only when asked (``optimize()``). Unoptimized segments are searched exactly:
  2.3 ms at 20k points, 4.7 ms at 50k, 10 ms at 100k, 17 ms at 200k (p50, idle machine); after HNSW
  0.8-2 ms, but building it blocks the whole process (17 s at 20k, 65 s at 50k, ~4 min at 100k). So
  the store builds HNSW away from the serving process (``EdgeStore.build_index``, ``edge_build``):
  once a collection holds ``index_threshold_points`` unindexed vectors, a child process optimizes a
  copy of the shard, and the result replaces the shard after the writes made meanwhile are replayed
  on it. The serving process only pays for loading the result (one GIL hold, see BENCHMARKS.md).
- A hit's payload is decoded whole and turned into Python objects under the GIL, however few fields
  are asked for: 50 catalog hits cost 0.7 ms with payloads and 0.05 ms without. Searches ask for
  none and take payloads from a cache kept by point version (``edge_payloads``).
- ``MatchValue(True)`` reaches the engine as the integer 1 and never matches a boolean payload, so
  top-level boolean payload values are mirrored into keyword shadow fields (``edge_codec``).
- The engine refuses a shard without any vector, so a collection created with no dense vector gets
  an unused sparse placeholder vector.
- The shard's files are memory-mapped and grow in steps of up to 32 MB (WAL segments, storage
  pages): on a full volume a write faults inside the engine and the process dies of SIGBUS, with
  no error to catch (seen on ext4 and tmpfs). So every write first checks the volume keeps
  ``DISK_RESERVE_BYTES`` free and is refused with ``StoreFullError`` otherwise; what was written
  before stays readable and survives a restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from .base import CollectionSpec, DenseQuery, Filter, Hit, PointRecord, Query, StoreError, StoreFullError, VectorSpec
from .edge_build import BuildFailed, copy_shard, optimize_copy, read_through
from .edge_codec import (
    EDGE_MATCHES_BOOLS,
    edge_filter,
    floats,
    optional_filter,
    payload_in,
    record_out,
    shadow,
    vectors_in,
)
from .edge_collection import (
    EXACT_SEARCH_POINTS,
    EdgeCollection,
    build_dir,
    create_collection,
    open_collection,
    payload_indexes,
    threshold_kb,
)
from .edge_lock import lock_directory, unlock_directory

logger = logging.getLogger(__name__)

T = TypeVar("T")

# One update() of 256 points holds the GIL ~12 ms: the longest a query waits behind a write.
WRITE_CHUNK_POINTS = 256

# Free space every write leaves on the data volume: a few growth steps of the engine's mapped files.
DISK_RESERVE_BYTES = 128 * 1024 * 1024
REMEMBERED_COUNTS = 256  # exact counts a collection keeps, by filter, until its next update

# After a failed index build, or one that indexed nothing new, wait this long before the next try.
BUILD_RETRY_S = 600.0
# How often a running build checks whether the writes made meanwhile overflowed its change log.
_OUTRUN_CHECK_S = 1.0
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class EdgeStore:
    """``Store`` on qdrant-edge: the embedded default. Use from one event loop in one process.

    The constructor takes an exclusive lock on ``root`` and raises ``StoreLockedError`` (naming the
    owner's pid) if another process holds it. Collections open lazily on first use.

    ``index_threshold_points``: segments of at least this many 384-d vectors get an HNSW graph, and a
    collection with this many unindexed vectors gets a background index build (``build_index``)
    when ``background_index`` is on; smaller ones are searched exactly.
    """

    backend = "qdrant-edge"
    counts_remembered = True

    def __init__(
        self, root: Path, *, index_threshold_points: int = EXACT_SEARCH_POINTS, background_index: bool = True
    ) -> None:
        if index_threshold_points < 1:
            raise StoreError(f"index_threshold_points must be at least 1, not {index_threshold_points}")
        self.root = Path(root)
        self.index_threshold_points = index_threshold_points
        self.background_index = background_index
        self._lock_fd: int | None = lock_directory(self.root)
        self._collections: dict[str, EdgeCollection] = {}
        self._builds: dict[str, asyncio.Task[bool]] = {}
        self._next_build_at: dict[str, float] = {}
        logger.info("edge store opened", extra={"root": str(self.root), "pid": os.getpid()})

    @classmethod
    def open(cls, root: Path) -> EdgeStore:
        """Same as the constructor; reads better at call sites that also ``close()``."""
        return cls(root)

    # ---- collections -----------------------------------------------------------------------

    async def ensure_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec] = ()) -> None:
        coll = self._open_collection(spec.name, missing_ok=True)
        if coll is None:
            coll = create_collection(self.root, spec, vectors, index_threshold_points=self.index_threshold_points)
            self._collections[spec.name] = coll
        async with coll.write_lock:
            with coll.errors("read the payload indexes"):
                existing = set(coll.shard.info().payload_schema)
            wanted = payload_indexes(spec)
            for field_name, params in wanted:
                if field_name not in existing:
                    op = qe.UpdateOperation.create_field_index(field_name, params)
                    coll.update(f"create the payload index of {field_name!r}", op, 1)
            # An index the spec no longer names (a field the surface stopped filtering on) only costs memory.
            for field_name in sorted(existing - {name for name, _ in wanted}):
                coll.update(f"drop the payload index of {field_name!r}", qe.UpdateOperation.delete_field_index(field_name), 1)
                logger.info("edge payload index dropped", extra={"collection": spec.name, "field": field_name})
            for vector in vectors:
                coll.add_vector(vector)
            if coll.spec != spec:
                coll.spec = spec
                coll.write_sidecar()
            coll.flush()

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            coll.add_vector(vector)

    async def drop_vector(self, collection: str, name: str) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            if name in coll.vectors and len(coll.vectors) == 1:
                raise StoreError(f"vector {name!r} is the only vector of collection {collection!r}; it cannot be dropped")
            # Sidecar first: after a crash before the shard drops it, the shard's own config loads
            # and the next drop (idempotent on the shard) finishes the job.
            if coll.vectors.pop(name, None) is not None:
                coll.write_sidecar()
            coll.update(f"drop vector {name!r}", qe.UpdateOperation.delete_vector_name(name), 0)
            coll.flush()
        logger.info("edge vector dropped", extra={"collection": collection, "vector": name})

    # ---- writes ----------------------------------------------------------------------------

    async def upsert(self, collection: str, points: Sequence[PointRecord]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            for chunk in _chunks(points, WRITE_CHUNK_POINTS):
                edge_points = [qe.Point(p.id, vectors_in(p.vectors), payload_in(p.payload)) for p in chunk]
                coll.update("upsert points", qe.UpdateOperation.upsert_points(edge_points), len(chunk))
                await asyncio.sleep(0)  # let queued queries run between chunks
            coll.maybe_flush()
        self._maybe_build(coll)

    async def overwrite_payload(self, collection: str, point_id: str, payload: Mapping[str, Any]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            op = qe.UpdateOperation.overwrite_payload([point_id], payload_in(payload))
            coll.update("overwrite a payload", op, 1)
            coll.maybe_flush()

    async def set_payload(self, collection: str, point_ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            ids: list[qe.PointId] = list(point_ids)
            coll.update("set payload", qe.UpdateOperation.set_payload(ids, payload_in(payload)), len(ids))
            # A key that held a boolean and now holds something else must lose its shadow.
            stale = [shadow(key) for key, value in payload.items() if not isinstance(value, bool)]
            if stale and not EDGE_MATCHES_BOOLS:
                coll.update("set payload", qe.UpdateOperation.delete_payload(ids, stale), 0)
            coll.maybe_flush()

    async def update_vectors(
        self, collection: str, vectors: Sequence[tuple[str, Mapping[str, Sequence[float]]]]
    ) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            for chunk in _chunks(vectors, WRITE_CHUNK_POINTS):
                point_vectors = [qe.PointVectors(point_id, vectors_in(named)) for point_id, named in chunk]
                coll.update("update vectors", qe.UpdateOperation.update_vectors(point_vectors), len(chunk))
                await asyncio.sleep(0)
            coll.maybe_flush()
        self._maybe_build(coll)

    async def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            for chunk in _chunks(point_ids, WRITE_CHUNK_POINTS * 4):
                coll.update("delete points", qe.UpdateOperation.delete_points(list(chunk)), len(chunk))
                await asyncio.sleep(0)
            coll.maybe_flush()

    async def delete_by_filter(self, collection: str, filter: Filter) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            # The number of points deleted is unknown; count it as one chunk for the flush policy.
            op = qe.UpdateOperation.delete_points_by_filter(edge_filter(filter))
            coll.update("delete points by filter", op, WRITE_CHUNK_POINTS)
            coll.maybe_flush()

    # ---- reads: inline, they are fast and hold the GIL anyway ------------------------------

    async def retrieve(self, collection: str, point_ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        coll = self._collection(collection)
        with coll.errors("retrieve points"):
            records = coll.shard.retrieve(list(point_ids), with_payload=True, with_vector=with_vectors)
        return [record_out(r, coll.vectors, with_vectors) for r in records]

    async def scroll(
        self,
        collection: str,
        filter: Filter | None = None,
        *,
        limit: int = 256,
        offset: str | None = None,
        with_vectors: bool = False,
    ) -> tuple[list[PointRecord], str | None]:
        coll = self._collection(collection)
        request = qe.ScrollRequest(
            offset=offset, limit=limit, filter=optional_filter(filter), with_payload=True, with_vector=with_vectors
        )
        with coll.errors("scroll points"):
            records, next_offset = coll.shard.scroll(request)
        page = [record_out(r, coll.vectors, with_vectors) for r in records]
        return page, (None if next_offset is None else str(next_offset))

    async def count(self, collection: str, filter: Filter | None = None) -> int:
        """The exact count, remembered until the collection's next update: an exact count iterates
        every matching point (60 ms for a workspace of 270k chunks), and a search asks it each time."""
        coll = self._collection(collection)
        try:
            cached, remembered = coll.counts.get(filter), True
        except TypeError:  # a condition holding a list: not remembered
            cached, remembered = None, False
        if cached is not None and cached[0] == coll.writes:
            return cached[1]
        with coll.errors("count points"):
            found = coll.shard.count(qe.CountRequest(exact=True, filter=optional_filter(filter)))
        if remembered:
            if len(coll.counts) >= REMEMBERED_COUNTS:
                coll.counts.clear()
            coll.counts[filter] = (coll.writes, found)
        return found

    async def search_dense(
        self, collection: str, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10
    ) -> list[Hit]:
        query = qe.Query.Nearest(floats(vector), using=vector_name)
        request = qe.QueryRequest(limit=limit, query=query, filter=optional_filter(filter), with_payload=False)
        return self._query(collection, "search dense vectors", request)

    async def search_text(self, collection: str, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        if not query_terms.split():
            return []
        coll = self._collection(collection)
        query = qe.TextQuery(_text_field(coll), query_terms)
        request = qe.QueryRequest(limit=limit, query=query, filter=optional_filter(filter), with_payload=False)
        return self._query(collection, "search text", request)

    async def search_hybrid(
        self,
        collection: str,
        vector_name: str,
        vector: Sequence[float],
        query_terms: str,
        filter: Filter | None = None,
        *,
        limit: int = 10,
        prefetch_limit: int = 50,
        rrf_k: int = 60,
    ) -> list[Hit]:
        coll = self._collection(collection)
        where = optional_filter(filter)
        # The filter goes on each prefetch: each side must pick its top-K among allowed points.
        prefetches = [
            qe.Prefetch(
                limit=prefetch_limit, query=qe.Query.Nearest(floats(vector), using=vector_name), filter=where
            )
        ]
        if query_terms.split():
            text_query = qe.TextQuery(_text_field(coll), query_terms)
            prefetches.append(qe.Prefetch(limit=prefetch_limit, query=text_query, filter=where))
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(k=rrf_k),  # type: ignore[arg-type]  # the stub leaves Fusion.Rrf out of the union
            filter=where,
            with_payload=False,
        )
        return self._query(collection, "search hybrid", request)

    # ---- maintenance -----------------------------------------------------------------------

    async def optimize(self, collection: str) -> bool:
        """Merge segments and build HNSW graphs for segments over ``index_threshold_points``, in this process.

        Blocks the whole process while it runs (it holds the GIL: 17 s at 20k points, 65 s at 50k
        on 2 cores), so call it only where nothing else is served (a CLI command, a bench); a
        serving process uses ``build_index``. Returns whether anything changed.
        """
        coll = self._collection(collection)
        async with coll.write_lock:
            started = time.monotonic()
            with coll.errors("optimize"):
                changed = coll.shard.optimize()
            coll.flush()
        logger.info(
            "edge collection optimized",
            extra={"collection": collection, "changed": changed, "seconds": round(time.monotonic() - started, 2)},
        )
        return changed

    async def flush(self) -> None:
        """Checkpoint every collection with unflushed writes into its segments.

        Writes already survive a killed process through the WAL (see the module docstring); this
        bounds WAL replay and covers what the WAL alone may not (power loss). It is not free: one
        flush of a 50k-point shard took 120-240 ms here however few points changed, holding the
        GIL, so prefer calling it per batch or on a timer rather than per point.
        """
        for coll in self._collections.values():
            async with coll.write_lock:
                coll.flush()

    async def build_index(self, collection: str) -> bool:
        """Build HNSW graphs for the collection in a child process and swap the result in; returns whether it did.

        Steps: under the write lock, copy the shard directory (writes wait for the copy, queries
        do not); a child process optimizes the copy (``edge_build``) while this process serves
        from its shard and logs every write; under the write lock again, load the result, replay
        the logged writes on it, and point the sidecar at it. Queries keep running on the old shard
        until that moment; the load is the one long GIL hold (0.04-0.12 s at 100k points, see
        BENCHMARKS.md). A build abandons itself when the writes logged meanwhile pass
        ``edge_collection.CHANGE_LOG_MAX_POINTS``.
        A crash at any step leaves the sidecar naming a complete shard; the next open removes the
        other. Joins the build already running for the collection, if any. Raises ``StoreError``
        when the build fails.
        """
        coll = self._collection(collection)
        task = self._builds.get(collection) or self._start_build(coll)
        return await asyncio.shield(task)

    def forget_payloads(self) -> None:
        """Drop every payload kept for searches (``edge_payloads``): benchmarks time cold reads with it."""
        for coll in self._collections.values():
            coll.payloads.clear()

    def building(self, collection: str) -> bool:
        """Whether an index build of ``collection`` is running."""
        return collection in self._builds

    async def unindexed_vectors(self, collection: str) -> int:
        """Dense vectors of ``collection`` outside any HNSW graph, which every dense query scans exactly."""
        return self._collection(collection).unindexed_vectors()

    async def close(self) -> None:
        if self._lock_fd is None:
            return
        builds = list(self._builds.values())
        for task in builds:
            task.cancel()
        await asyncio.gather(*builds, return_exceptions=True)
        try:
            await self.flush()
        finally:
            for name, coll in self._collections.items():
                try:
                    coll.shard.close()
                except Exception:  # close the others and release the lock regardless
                    logger.exception("edge shard failed to close", extra={"collection": name})
            self._collections.clear()
            unlock_directory(self._lock_fd)
            self._lock_fd = None
            logger.info("edge store closed", extra={"root": str(self.root)})

    # ---- internals -------------------------------------------------------------------------

    def _collection(self, name: str) -> EdgeCollection:
        coll = self._open_collection(name, missing_ok=False)
        assert coll is not None
        return coll

    def _open_collection(self, name: str, *, missing_ok: bool) -> EdgeCollection | None:
        if self._lock_fd is None:
            raise StoreError(f"the edge store at {self.root} is closed")
        if not _COLLECTION_NAME.match(name):
            raise StoreError(f"invalid collection name {name!r}: letters, digits, '_' and '-' only")
        coll = self._collections.get(name)
        if coll is not None:
            return coll
        coll = open_collection(self.root, name, index_threshold_points=self.index_threshold_points)
        if coll is None:
            if missing_ok:
                return None
            raise StoreError(f"collection {name!r} does not exist under {self.root}; call ensure_collection first")
        self._collections[name] = coll
        self._maybe_build(coll)
        return coll

    # ---- index builds: away from this process, swapped in under the write lock ---------------

    def _maybe_build(self, coll: EdgeCollection) -> None:
        """Start a background index build when the collection has enough unindexed vectors and none runs."""
        name = coll.spec.name
        if not self.background_index or name in self._builds or time.monotonic() < self._next_build_at.get(name, 0.0):
            return
        if not coll.vectors or coll.unindexed_vectors() < self.index_threshold_points * len(coll.vectors):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # opened outside an event loop: the next write or open starts it
            return
        self._start_build(coll)

    def _start_build(self, coll: EdgeCollection) -> asyncio.Task[bool]:
        name = coll.spec.name
        task = asyncio.get_running_loop().create_task(self._build(coll), name=f"edge-index-build-{name}")
        self._builds[name] = task

        def done(finished: asyncio.Task[bool]) -> None:
            self._builds.pop(name, None)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                logger.warning("edge index build failed", extra={"collection": name, "error": str(error)})
                self._next_build_at[name] = time.monotonic() + BUILD_RETRY_S
            elif self._lock_fd is not None:
                self._maybe_build(coll)  # writes replayed on the result may be past the threshold again

        task.add_done_callback(done)
        return task

    async def _build(self, coll: EdgeCollection) -> bool:
        name = coll.spec.name
        target = coll.path / coll.next_shard_dir()
        work = build_dir(target)
        started = time.monotonic()
        _, indexed_before = coll.vector_counts()
        try:
            await self._copy_for_build(coll, work)
            report = await self._optimize_unless_outrun(coll, work)
            if report is not None:
                await _in_thread(read_through, work)  # no page fault from disk while the engine holds the GIL
            pause = None if report is None else await self._swap_in(coll, work, target)
            if report is None or pause is None:
                # Writes outran the build (a bulk load): the next write past the threshold starts over.
                logger.warning("edge index build abandoned: too many writes during it", extra={"collection": name})
                return False
        except BuildFailed as exc:
            raise StoreError(f"qdrant-edge could not build the index of collection {name!r} under {self.root}: {exc}") from exc
        finally:
            coll.change_log = None
            await _in_thread(_remove_unless_live, coll, work, target)
        stored, indexed = coll.vector_counts()
        logger.info(
            "edge index built",
            extra={
                "collection": name,
                "seconds": round(time.monotonic() - started, 2),
                "build_seconds": report.get("seconds"),
                "swap_pause_ms": round(pause * 1e3, 1),
                "indexed_before": indexed_before,
                "indexed_after": indexed,
                "unindexed_after": max(0, stored - indexed),
            },
        )
        if int(report.get("indexed_vectors", 0)) <= indexed_before:  # segments under the threshold: do not loop
            self._next_build_at[name] = time.monotonic() + BUILD_RETRY_S
        return True

    async def _optimize_unless_outrun(self, coll: EdgeCollection, work: Path) -> dict[str, Any] | None:
        """The child's report on optimizing ``work``; None, with the child killed, once the change log overflows."""
        optimize = asyncio.ensure_future(
            optimize_copy(work, coll.vectors, coll.placeholder_name, threshold_kb(coll.index_threshold_points))
        )
        try:
            while True:
                done, _ = await asyncio.wait([optimize], timeout=_OUTRUN_CHECK_S)
                if done:
                    return optimize.result()
                if coll.change_log is None:
                    return None
        finally:
            if not optimize.done():
                optimize.cancel()
                await asyncio.gather(optimize, return_exceptions=True)

    async def _copy_for_build(self, coll: EdgeCollection, work: Path) -> None:
        """Copy the live shard to ``work`` and start logging writes; writes wait for the copy, queries do not.

        No flush first (it holds the GIL 100-250 ms on a large appendable segment): with no write
        running, the files and WAL are in the state a killed process leaves, which the child's
        load recovers from by replaying the WAL.
        """
        async with coll.write_lock:
            live = coll.path / coll.shard_dir
            need = await _in_thread(_tree_bytes, live)
            try:
                free = shutil.disk_usage(self.root).free
            except OSError as exc:
                raise StoreError(f"cannot read the free space of the index directory {self.root}: {exc}") from exc
            if free - need < DISK_RESERVE_BYTES:
                raise StoreFullError(
                    f"no room to build the index of collection {coll.spec.name!r}: its copy needs {need // 2**20} MB and "
                    f"{self.root} has {free // 2**20} MB free (keeping {DISK_RESERVE_BYTES // 2**20} MB in reserve)"
                )
            await _in_thread(shutil.rmtree, work, True)
            with coll.errors("copy the shard for an index build"):
                await _in_thread(copy_shard, live, work)
            coll.change_log, coll.change_log_points = [], 0

    async def _swap_in(self, coll: EdgeCollection, work: Path, target: Path) -> float | None:
        """Load the built shard, replay the writes logged since the copy, and make it the live shard.

        Returns the longest single pause of the event loop this caused (the load), in seconds, or
        None when the change log overflowed (nothing swapped).
        """
        async with coll.write_lock:
            log = coll.change_log
            if log is None:
                return None
            with coll.errors("move the built shard in place"):
                await _in_thread(os.replace, work, target)
            load_started = time.monotonic()
            with coll.errors("load the built shard"):
                shard = qe.EdgeShard.load(str(target))
            pause = time.monotonic() - load_started
            old, old_dir = coll.shard, coll.shard_dir
            try:
                # One logged op is at most one write chunk; the old shard is complete, so queries
                # keep using it between ops. The replayed ops are durable in the new shard's WAL.
                for op in log:
                    await asyncio.sleep(0)
                    with coll.errors("replay the writes made during the index build"):
                        shard.update(op)
                coll.shard_dir = target.name
                coll.write_sidecar()  # the commit point: from here on the new shard is the live one
            except BaseException:
                if coll.shard_dir != old_dir:  # the sidecar may name the new shard already: name the old again
                    coll.shard_dir = old_dir
                    coll.write_sidecar()
                shard.close()
                raise
            coll.shard, coll.changes_since_flush, coll.change_log = shard, coll.change_log_points, None
            coll.payloads.clear()  # the new shard numbers its operations afresh: versions seen before mean nothing
            coll.writes += 1  # another shard answers from here on
        try:
            await asyncio.sleep(0)
            with coll.errors("close the replaced shard"):
                old.close()
        finally:
            await _in_thread(shutil.rmtree, coll.path / old_dir, True)
        return pause

    def _ensure_space(self, collection: str) -> None:
        """Refuse a write that could leave the volume without room for the engine's next file growth."""
        try:
            free = shutil.disk_usage(self.root).free
        except OSError as exc:
            raise StoreError(f"cannot read the free space of the index directory {self.root}: {exc}") from exc
        if free < DISK_RESERVE_BYTES:
            raise StoreFullError(
                f"the data volume of {self.root} has {free // 2**20} MB free, under the {DISK_RESERVE_BYTES // 2**20} MB "
                f"the index keeps in reserve; nothing was written to collection {collection!r}. Free space on that volume "
                "(or grow it), then retry."
            )

    def _query(self, collection: str, what: str, request: qe.QueryRequest) -> list[Hit]:
        """One query of the shard, asked without payloads (``request.with_payload`` False): whole ones come from ``coll.payloads``."""
        coll = self._collection(collection)
        with coll.errors(what):
            points = coll.shard.query(request)
            (rows,) = coll.payloads.resolve(coll.shard, [points], [None])
        return [Hit(id=point_id, score=score, payload=payload) for point_id, score, payload in rows]

    async def search_batch(self, collection: str, queries: Sequence[Query]) -> list[list[Hit]]:
        """The queries as one ``query_batch`` of the shard (planned together: one pass over the segments)."""
        coll = self._collection(collection)
        requests: list[qe.QueryRequest] = []
        fields: list[tuple[str, ...] | None] = []  # each request's payload fields
        for query in queries:
            if isinstance(query, DenseQuery):
                nearest = qe.Query.Nearest(floats(query.vector), using=query.vector_name)
                requests.append(qe.QueryRequest(limit=query.limit, query=nearest, filter=optional_filter(query.filter), with_payload=False))
            elif query.query_terms.split():
                text = qe.TextQuery(_text_field(coll), query.query_terms)
                requests.append(qe.QueryRequest(limit=query.limit, query=text, filter=optional_filter(query.filter), with_payload=False))
            else:
                continue
            fields.append(query.fields)
        rows: list[list[tuple[str, float, dict[str, Any]]]] = []
        if requests:
            with coll.errors("search a batch"):
                answered = coll.shard.query_batch(qe.QueryBatchRequest(requests))
                rows = coll.payloads.resolve(coll.shard, answered, fields)
        found = iter(rows)
        return [
            [Hit(id=point_id, score=score, payload=payload) for point_id, score, payload in next(found)]
            if isinstance(query, DenseQuery) or query.query_terms.split()
            else []
            for query in queries
        ]

def _text_field(coll: EdgeCollection) -> str:
    """The collection's BM25 field; a collection made without one refuses text queries."""
    if coll.spec.text_field is None:
        raise StoreError(f"collection {coll.spec.name!r} has no text index: its records are searched lexically elsewhere")
    return coll.spec.text_field


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def _in_thread(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread; if cancelled, wait for the thread before raising, so no file work outlives us."""
    future = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _remove_unless_live(coll: EdgeCollection, *paths: Path) -> None:
    for path in paths:
        if path.name != coll.shard_dir:
            shutil.rmtree(path, ignore_errors=True)


__all__ = ["BUILD_RETRY_S", "DISK_RESERVE_BYTES", "EdgeStore"]
