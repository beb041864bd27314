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
  4.6 ms at 20k points, 10.9 ms at 50k; after HNSW 1.5-1.9 ms, but building it blocks the whole
  process (17 s at 20k, 65 s at 50k). See ``EdgeStore.optimize``.
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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from .base import CollectionSpec, Filter, Hit, PointRecord, StoreError, StoreFullError, VectorSpec
from .edge_codec import (
    EDGE_MATCHES_BOOLS,
    edge_filter,
    floats,
    optional_filter,
    payload_in,
    payload_out,
    record_out,
    shadow,
    vectors_in,
)
from .edge_collection import EdgeCollection, create_collection, open_collection, payload_indexes
from .edge_lock import lock_directory, unlock_directory

logger = logging.getLogger(__name__)

T = TypeVar("T")

# One update() of 256 points holds the GIL ~12 ms: the longest a query waits behind a write.
WRITE_CHUNK_POINTS = 256

# Free space every write leaves on the data volume: a few growth steps of the engine's mapped files.
DISK_RESERVE_BYTES = 128 * 1024 * 1024

_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class EdgeStore:
    """``Store`` on qdrant-edge: the embedded default. Use from one event loop in one process.

    The constructor takes an exclusive lock on ``root`` and raises ``StoreLockedError`` (naming the
    owner's pid) if another process holds it. Collections open lazily on first use.
    """

    backend = "qdrant-edge"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock_fd: int | None = lock_directory(self.root)
        self._collections: dict[str, EdgeCollection] = {}
        logger.info("edge store opened", extra={"root": str(self.root), "pid": os.getpid()})

    @classmethod
    def open(cls, root: Path) -> EdgeStore:
        """Same as the constructor; reads better at call sites that also ``close()``."""
        return cls(root)

    # ---- collections -----------------------------------------------------------------------

    async def ensure_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec] = ()) -> None:
        coll = self._open_collection(spec.name, missing_ok=True)
        if coll is None:
            coll = self._collections[spec.name] = create_collection(self.root, spec, vectors)
        async with coll.write_lock:
            with coll.errors("read the payload indexes"):
                existing = set(coll.shard.info().payload_schema)
            for field_name, params in payload_indexes(spec):
                if field_name not in existing:
                    op = qe.UpdateOperation.create_field_index(field_name, params)
                    coll.update(f"create the payload index of {field_name!r}", op, 1)
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
        coll = self._collection(collection)
        with coll.errors("count points"):
            return coll.shard.count(qe.CountRequest(exact=True, filter=optional_filter(filter)))

    async def search_dense(
        self, collection: str, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10
    ) -> list[Hit]:
        query = qe.Query.Nearest(floats(vector), using=vector_name)
        request = qe.QueryRequest(limit=limit, query=query, filter=optional_filter(filter), with_payload=True)
        return self._query(collection, "search dense vectors", request)

    async def search_text(self, collection: str, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        if not query_terms.split():
            return []
        coll = self._collection(collection)
        query = qe.TextQuery(coll.spec.text_field, query_terms)
        request = qe.QueryRequest(limit=limit, query=query, filter=optional_filter(filter), with_payload=True)
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
            text_query = qe.TextQuery(coll.spec.text_field, query_terms)
            prefetches.append(qe.Prefetch(limit=prefetch_limit, query=text_query, filter=where))
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(k=rrf_k),  # type: ignore[arg-type]  # the stub leaves Fusion.Rrf out of the union
            filter=where,
            with_payload=True,
        )
        return self._query(collection, "search hybrid", request)

    # ---- maintenance -----------------------------------------------------------------------

    async def optimize(self, collection: str) -> bool:
        """Merge segments and build HNSW graphs for segments over ``edge_collection.EXACT_SEARCH_POINTS``.

        Blocks the whole process while it runs (it holds the GIL: 17 s at 20k points, 65 s at 50k
        on 2 cores), so call it from maintenance (a CLI command, before serving), never on the
        request path. Returns whether anything changed.
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

    async def close(self) -> None:
        if self._lock_fd is None:
            return
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
        coll = open_collection(self.root, name)
        if coll is None:
            if missing_ok:
                return None
            raise StoreError(f"collection {name!r} does not exist under {self.root}; call ensure_collection first")
        self._collections[name] = coll
        return coll

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
        coll = self._collection(collection)
        with coll.errors(what):
            points = coll.shard.query(request)
        return [Hit(id=str(p.id), score=float(p.score), payload=payload_out(p.payload)) for p in points]

def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["DISK_RESERVE_BYTES", "EdgeStore"]
