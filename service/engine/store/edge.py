"""The embedded index store: one qdrant-edge shard per collection, in a data directory this process owns.

Layout under ``root``::

    .lock                    flock(2) held by the owner process; holds its pid
    <collection>/collection.json   our sidecar: CollectionSpec, dense vectors, placeholder flag
    <collection>/shard/      the EdgeShard (segments, WAL, edge_config.json)

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
  top-level boolean payload values are mirrored into keyword shadow fields (see ``_BOOL_SHADOW``).
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
import fcntl
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import qdrant_edge as qe

from .base import (
    CollectionSpec,
    Condition,
    Filter,
    HasVector,
    Hit,
    Match,
    MatchAny,
    PointRecord,
    Range,
    StoreError,
    StoreFullError,
    StoreLockedError,
    VectorSpec,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Segments up to ~20k 384-d vectors are searched exactly (<= ~5 ms here) and get no HNSW graph;
# filtered searches whose candidates fit in as much vector data also scan them exactly, which keeps
# small-tenant queries at full recall. Both thresholds are in KB of vector data (float32).
EXACT_SEARCH_POINTS = 20_000
EXACT_SEARCH_KB = EXACT_SEARCH_POINTS * 384 * 4 // 1024
_HNSW_M = 16
_HNSW_EF_CONSTRUCT = 100

# One update() of 256 points holds the GIL ~12 ms: the longest a query waits behind a write.
WRITE_CHUNK_POINTS = 256
# flush() cost grows with the unflushed data (264 ms for 20k points); the WAL already makes
# writes durable, so flush to keep WAL replay short, not for safety.
FLUSH_EVERY_CHANGES = 5_000
FLUSH_EVERY_S = 30.0

# Free space every write leaves on the data volume: a few growth steps of the engine's mapped files.
DISK_RESERVE_BYTES = 128 * 1024 * 1024

_LOCK_FILE = ".lock"
_SIDECAR = "collection.json"
_SHARD_DIR = "shard"
_SIDECAR_FORMAT = 1
_PLACEHOLDER_SPARSE = "_no_dense_vector"
_COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

# qdrant-edge 0.9 turns MatchValue(True) into 1; once a release keeps it a bool, match natively.
_EDGE_MATCHES_BOOLS = isinstance(qe.MatchValue(True).value, bool)
_BOOL_SHADOW = "__bool__"


@dataclass
class _Collection:
    """An open shard and what the sidecar says about it."""

    spec: CollectionSpec
    vectors: dict[str, int]  # dense vector name -> size
    placeholder_sparse: bool
    shard: qe.EdgeShard
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changes_since_flush: int = 0
    last_flush: float = field(default_factory=time.monotonic)


class EdgeStore:
    """``Store`` on qdrant-edge: the embedded default. Use from one event loop in one process.

    The constructor takes an exclusive lock on ``root`` and raises ``StoreLockedError`` (naming the
    owner's pid) if another process holds it. Collections open lazily on first use.
    """

    backend = "qdrant-edge"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock_fd: int | None = _lock_directory(self.root)
        self._collections: dict[str, _Collection] = {}
        logger.info("edge store opened", extra={"root": str(self.root), "pid": os.getpid()})

    @classmethod
    def open(cls, root: Path) -> EdgeStore:
        """Same as the constructor; reads better at call sites that also ``close()``."""
        return cls(root)

    # ---- collections -----------------------------------------------------------------------

    async def ensure_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec] = ()) -> None:
        coll = self._open_collection(spec.name, missing_ok=True)
        if coll is None:
            coll = self._create_collection(spec, vectors)
        async with coll.write_lock:
            with self._errors("read the payload indexes", spec.name):
                existing = set(coll.shard.info().payload_schema)
            for field_name, params in _payload_indexes(spec):
                if field_name not in existing:
                    op = qe.UpdateOperation.create_field_index(field_name, params)
                    self._update(coll, f"create the payload index of {field_name!r}", op, 1)
            for vector in vectors:
                self._add_vector(coll, vector)
            if coll.spec != spec:
                coll.spec = spec
                self._write_sidecar(coll)
            self._flush(coll)

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            self._add_vector(coll, vector)

    async def drop_vector(self, collection: str, name: str) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            if name in coll.vectors and len(coll.vectors) == 1:
                raise StoreError(f"vector {name!r} is the only vector of collection {collection!r}; it cannot be dropped")
            # Sidecar first: after a crash before the shard drops it, the shard's own config loads
            # and the next drop (idempotent on the shard) finishes the job.
            if coll.vectors.pop(name, None) is not None:
                self._write_sidecar(coll)
            self._update(coll, f"drop vector {name!r}", qe.UpdateOperation.delete_vector_name(name), 0)
            self._flush(coll)
        logger.info("edge vector dropped", extra={"collection": collection, "vector": name})

    # ---- writes ----------------------------------------------------------------------------

    async def upsert(self, collection: str, points: Sequence[PointRecord]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            for chunk in _chunks(points, WRITE_CHUNK_POINTS):
                edge_points = [qe.Point(p.id, _vectors_in(p.vectors), _payload_in(p.payload)) for p in chunk]
                self._update(coll, "upsert points", qe.UpdateOperation.upsert_points(edge_points), len(chunk))
                await asyncio.sleep(0)  # let queued queries run between chunks
            self._maybe_flush(coll)

    async def overwrite_payload(self, collection: str, point_id: str, payload: Mapping[str, Any]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            op = qe.UpdateOperation.overwrite_payload([point_id], _payload_in(payload))
            self._update(coll, "overwrite a payload", op, 1)
            self._maybe_flush(coll)

    async def set_payload(self, collection: str, point_ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            ids: list[qe.PointId] = list(point_ids)
            self._update(coll, "set payload", qe.UpdateOperation.set_payload(ids, _payload_in(payload)), len(ids))
            # A key that held a boolean and now holds something else must lose its shadow.
            stale = [_shadow(key) for key, value in payload.items() if not isinstance(value, bool)]
            if stale and not _EDGE_MATCHES_BOOLS:
                self._update(coll, "set payload", qe.UpdateOperation.delete_payload(ids, stale), 0)
            self._maybe_flush(coll)

    async def update_vectors(
        self, collection: str, vectors: Sequence[tuple[str, Mapping[str, Sequence[float]]]]
    ) -> None:
        coll = self._collection(collection)
        self._ensure_space(collection)
        async with coll.write_lock:
            for chunk in _chunks(vectors, WRITE_CHUNK_POINTS):
                point_vectors = [qe.PointVectors(point_id, _vectors_in(named)) for point_id, named in chunk]
                self._update(coll, "update vectors", qe.UpdateOperation.update_vectors(point_vectors), len(chunk))
                await asyncio.sleep(0)
            self._maybe_flush(coll)

    async def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            for chunk in _chunks(point_ids, WRITE_CHUNK_POINTS * 4):
                self._update(coll, "delete points", qe.UpdateOperation.delete_points(list(chunk)), len(chunk))
                await asyncio.sleep(0)
            self._maybe_flush(coll)

    async def delete_by_filter(self, collection: str, filter: Filter) -> None:
        coll = self._collection(collection)
        async with coll.write_lock:
            # The number of points deleted is unknown; count it as one chunk for the flush policy.
            op = qe.UpdateOperation.delete_points_by_filter(_edge_filter(filter))
            self._update(coll, "delete points by filter", op, WRITE_CHUNK_POINTS)
            self._maybe_flush(coll)

    # ---- reads: inline, they are fast and hold the GIL anyway ------------------------------

    async def retrieve(self, collection: str, point_ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        coll = self._collection(collection)
        with self._errors("retrieve points", collection):
            records = coll.shard.retrieve(list(point_ids), with_payload=True, with_vector=with_vectors)
        return [_record_out(r, coll, with_vectors) for r in records]

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
            offset=offset, limit=limit, filter=_optional_filter(filter), with_payload=True, with_vector=with_vectors
        )
        with self._errors("scroll points", collection):
            records, next_offset = coll.shard.scroll(request)
        page = [_record_out(r, coll, with_vectors) for r in records]
        return page, (None if next_offset is None else str(next_offset))

    async def count(self, collection: str, filter: Filter | None = None) -> int:
        coll = self._collection(collection)
        with self._errors("count points", collection):
            return coll.shard.count(qe.CountRequest(exact=True, filter=_optional_filter(filter)))

    async def search_dense(
        self, collection: str, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10
    ) -> list[Hit]:
        query = qe.Query.Nearest(_floats(vector), using=vector_name)
        request = qe.QueryRequest(limit=limit, query=query, filter=_optional_filter(filter), with_payload=True)
        return self._query(collection, "search dense vectors", request)

    async def search_text(self, collection: str, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        if not query_terms.split():
            return []
        coll = self._collection(collection)
        query = qe.TextQuery(coll.spec.text_field, query_terms)
        request = qe.QueryRequest(limit=limit, query=query, filter=_optional_filter(filter), with_payload=True)
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
        edge_filter = _optional_filter(filter)
        # The filter goes on each prefetch: each side must pick its top-K among allowed points.
        prefetches = [
            qe.Prefetch(
                limit=prefetch_limit, query=qe.Query.Nearest(_floats(vector), using=vector_name), filter=edge_filter
            )
        ]
        if query_terms.split():
            text_query = qe.TextQuery(coll.spec.text_field, query_terms)
            prefetches.append(qe.Prefetch(limit=prefetch_limit, query=text_query, filter=edge_filter))
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(k=rrf_k),  # type: ignore[arg-type]  # the stub leaves Fusion.Rrf out of the union
            filter=edge_filter,
            with_payload=True,
        )
        return self._query(collection, "search hybrid", request)

    # ---- maintenance -----------------------------------------------------------------------

    async def optimize(self, collection: str) -> bool:
        """Merge segments and build HNSW graphs for segments over ``EXACT_SEARCH_POINTS``.

        Blocks the whole process while it runs (it holds the GIL: 17 s at 20k points, 65 s at 50k
        on 2 cores), so call it from maintenance (a CLI command, before serving), never on the
        request path. Returns whether anything changed.
        """
        coll = self._collection(collection)
        async with coll.write_lock:
            started = time.monotonic()
            with self._errors("optimize", collection):
                changed = coll.shard.optimize()
            self._flush(coll)
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
                self._flush(coll)

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
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
            logger.info("edge store closed", extra={"root": str(self.root)})

    # ---- internals -------------------------------------------------------------------------

    @contextmanager
    def _errors(self, what: str, collection: str) -> Iterator[None]:
        """Turn any backend failure (qdrant-edge raises bare ``Exception``; disk full is an OSError) into StoreError."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(
                f"qdrant-edge could not {what} in collection {collection!r} under {self.root}: {exc}"
            ) from exc

    def _collection(self, name: str) -> _Collection:
        coll = self._open_collection(name, missing_ok=False)
        assert coll is not None
        return coll

    def _open_collection(self, name: str, *, missing_ok: bool) -> _Collection | None:
        if self._lock_fd is None:
            raise StoreError(f"the edge store at {self.root} is closed")
        if not _COLLECTION_NAME.match(name):
            raise StoreError(f"invalid collection name {name!r}: letters, digits, '_' and '-' only")
        coll = self._collections.get(name)
        if coll is not None:
            return coll
        sidecar = self.root / name / _SIDECAR
        if not sidecar.exists():
            if missing_ok:
                return None
            raise StoreError(f"collection {name!r} does not exist under {self.root}; call ensure_collection first")
        with self._errors("read the collection sidecar", name):
            meta = json.loads(sidecar.read_text())
        spec = _spec_from_json(meta["spec"])
        vectors = {str(k): int(v) for k, v in meta["vectors"].items()}
        placeholder = bool(meta["placeholder_sparse"])
        shard_dir = self.root / name / _SHARD_DIR
        config = _edge_config(vectors, placeholder)
        if not (shard_dir / "edge_config.json").exists():
            # The sidecar is written before the shard is created: resume an interrupted creation.
            with self._errors("create the shard", name):
                shard = qe.EdgeShard.create(str(shard_dir), config)
        else:
            shard = self._load_shard(name, shard_dir, config)
        coll = _Collection(spec=spec, vectors=vectors, placeholder_sparse=placeholder, shard=shard)
        self._collections[name] = coll
        logger.info("edge collection loaded", extra={"collection": name, "vectors": vectors})
        return coll

    def _load_shard(self, name: str, shard_dir: Path, config: qe.EdgeConfig) -> qe.EdgeShard:
        try:
            return qe.EdgeShard.load(str(shard_dir), config)
        except Exception as exc:
            # A crash between adding a vector to the shard and rewriting the sidecar leaves the two
            # apart; the shard's own persisted config is the truth, and ensure_vector repairs ours.
            logger.warning(
                "edge shard refused the sidecar config; loading with its own",
                extra={"collection": name, "error": str(exc)},
            )
            with self._errors("load the shard", name):
                return qe.EdgeShard.load(str(shard_dir))

    def _create_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec]) -> _Collection:
        sizes = {v.name: v.size for v in vectors}
        placeholder = not sizes
        shard_dir = self.root / spec.name / _SHARD_DIR
        coll_dir = self.root / spec.name
        with self._errors("create the collection directory", spec.name):
            coll_dir.mkdir(parents=True, exist_ok=True)
        # Sidecar first: if we crash before the shard exists, the next open creates it.
        self._write_sidecar_parts(spec, sizes, placeholder)
        with self._errors("create the shard", spec.name):
            shard = qe.EdgeShard.create(str(shard_dir), _edge_config(sizes, placeholder))
        coll = _Collection(spec=spec, vectors=sizes, placeholder_sparse=placeholder, shard=shard)
        self._collections[spec.name] = coll
        logger.info("edge collection created", extra={"collection": spec.name, "vectors": sizes})
        return coll

    def _add_vector(self, coll: _Collection, vector: VectorSpec) -> None:
        known = coll.vectors.get(vector.name)
        if known is not None:
            if known != vector.size:
                raise StoreError(
                    f"collection {coll.spec.name!r} already has vector {vector.name!r} of size {known}, not {vector.size}"
                )
            return
        op = qe.UpdateOperation.create_dense_vector(vector.name, vector.size, qe.Distance.Cosine)
        self._update(coll, f"add vector {vector.name!r}", op, 0)
        # Shard config on disk before the sidecar names the vector: a reload must accept both.
        self._flush(coll)
        coll.vectors[vector.name] = vector.size
        self._write_sidecar(coll)
        logger.info("edge vector added", extra={"collection": coll.spec.name, "vector": vector.name, "size": vector.size})

    def _write_sidecar(self, coll: _Collection) -> None:
        self._write_sidecar_parts(coll.spec, coll.vectors, coll.placeholder_sparse)

    def _write_sidecar_parts(self, spec: CollectionSpec, vectors: Mapping[str, int], placeholder: bool) -> None:
        meta = {
            "format": _SIDECAR_FORMAT,
            "spec": asdict(spec),
            "vectors": dict(vectors),
            "placeholder_sparse": placeholder,
        }
        path = self.root / spec.name / _SIDECAR
        tmp = path.with_suffix(".json.tmp")
        with self._errors("write the collection sidecar", spec.name):
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)

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

    def _update(self, coll: _Collection, what: str, op: qe.UpdateOperation, changes: int) -> None:
        with self._errors(what, coll.spec.name):
            coll.shard.update(op)
        coll.changes_since_flush += max(changes, 1)

    def _maybe_flush(self, coll: _Collection) -> None:
        due = time.monotonic() - coll.last_flush >= FLUSH_EVERY_S
        if coll.changes_since_flush >= FLUSH_EVERY_CHANGES or (coll.changes_since_flush and due):
            self._flush(coll)

    def _flush(self, coll: _Collection) -> None:
        if coll.changes_since_flush == 0:
            return
        with self._errors("flush", coll.spec.name):
            coll.shard.flush()
        coll.changes_since_flush = 0
        coll.last_flush = time.monotonic()

    def _query(self, collection: str, what: str, request: qe.QueryRequest) -> list[Hit]:
        coll = self._collection(collection)
        with self._errors(what, collection):
            points = coll.shard.query(request)
        return [Hit(id=str(p.id), score=float(p.score), payload=_payload_out(p.payload)) for p in points]


# ---- the data directory lock ---------------------------------------------------------------


def _lock_directory(root: Path) -> int:
    """Take ``root/.lock`` (flock, exclusive, non-blocking) and write our pid into it."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        # No O_TRUNC: on failure the file must still name the owner.
        fd = os.open(root / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file of the index directory {root}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        if owner == str(os.getpid()):
            raise StoreLockedError(f"the index directory {root} is already open in this process (pid {owner})") from None
        raise StoreLockedError(
            f"the index directory {root} is in use by another agentsearch process (pid {owner}); "
            "stop that process or give this one another data directory"
        ) from None
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot lock the index directory {root}: {exc}") from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot write the lock file of the index directory {root}: {exc}") from exc
    return fd


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- translation to and from qdrant-edge ---------------------------------------------------


def _edge_config(vectors: Mapping[str, int], placeholder_sparse: bool) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={name: qe.EdgeVectorParams(size, qe.Distance.Cosine) for name, size in vectors.items()},
        sparse_vectors={_PLACEHOLDER_SPARSE: qe.EdgeSparseVectorParams()} if placeholder_sparse else None,
        hnsw_config=qe.HnswIndexConfig(
            m=_HNSW_M, ef_construct=_HNSW_EF_CONSTRUCT, full_scan_threshold=EXACT_SEARCH_KB
        ),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=EXACT_SEARCH_KB),
    )


def _payload_indexes(spec: CollectionSpec) -> list[tuple[str, Any]]:
    indexes: list[tuple[str, Any]] = [
        (spec.tenant_field, qe.KeywordIndexParams(is_tenant=True)),
        # Word splits on non-alphanumerics like qdrant-client local mode's default tokenizer and a
        # server's `word`; on analyzer output (words joined by spaces) it equals Whitespace.
        (spec.text_field, qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True, scoring=True)),
    ]
    indexes += [(name, qe.KeywordIndexParams()) for name in spec.keyword_fields]
    indexes += [(name, qe.IntegerIndexParams(lookup=True, range=True)) for name in spec.integer_fields]
    indexes += [(name, qe.BoolIndexParams()) for name in spec.bool_fields]
    if not _EDGE_MATCHES_BOOLS:
        indexes += [(_shadow(name), qe.KeywordIndexParams()) for name in spec.bool_fields]
    return indexes


def _spec_from_json(data: Mapping[str, Any]) -> CollectionSpec:
    return CollectionSpec(
        name=str(data["name"]),
        tenant_field=str(data["tenant_field"]),
        text_field=str(data["text_field"]),
        keyword_fields=tuple(data["keyword_fields"]),
        integer_fields=tuple(data["integer_fields"]),
        bool_fields=tuple(data["bool_fields"]),
    )


def _shadow(key: str) -> str:
    return f"{_BOOL_SHADOW}{key}"


def _payload_in(payload: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    if not _EDGE_MATCHES_BOOLS:
        for key, value in payload.items():
            if isinstance(value, bool):
                out[_shadow(key)] = "true" if value else "false"
    return out


def _payload_out(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    if not payload:
        return {}
    return {key: value for key, value in payload.items() if not key.startswith(_BOOL_SHADOW)}


def _floats(vector: Sequence[float]) -> list[float]:
    tolist = getattr(vector, "tolist", None)  # numpy arrays convert in C, 20x faster
    return [float(x) for x in vector] if tolist is None else list(tolist())


def _vectors_in(vectors: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    return {name: _floats(values) for name, values in vectors.items()}


def _record_out(record: qe.Record, coll: _Collection, with_vectors: bool) -> PointRecord:
    vectors: dict[str, list[float]] = {}
    if with_vectors and isinstance(record.vector, dict):
        vectors = {
            name: list(cast(list[float], values)) for name, values in record.vector.items() if name in coll.vectors
        }
    return PointRecord(id=str(record.id), payload=_payload_out(record.payload), vectors=vectors)


def _optional_filter(flt: Filter | None) -> qe.Filter | None:
    return None if flt is None else _edge_filter(flt)


def _edge_filter(flt: Filter) -> qe.Filter:
    # Empty lists become None: an empty `should` must not mean "match nothing".
    return qe.Filter(
        must=[_edge_condition(c) for c in flt.must] or None,
        should=[_edge_condition(c) for c in flt.should] or None,
        must_not=[_edge_condition(c) for c in flt.must_not] or None,
    )


def _edge_condition(cond: Condition) -> Any:
    if isinstance(cond, Match):
        if isinstance(cond.value, bool) and not _EDGE_MATCHES_BOOLS:
            return qe.FieldCondition(_shadow(cond.field), match=qe.MatchValue("true" if cond.value else "false"))
        return qe.FieldCondition(cond.field, match=qe.MatchValue(cond.value))
    if isinstance(cond, MatchAny):
        return qe.FieldCondition(cond.field, match=qe.MatchAny(cast(list[str] | list[int], list(cond.values))))
    if isinstance(cond, Range):
        return qe.FieldCondition(cond.field, range=qe.RangeFloat(gte=cond.gte, gt=cond.gt, lte=cond.lte, lt=cond.lt))
    if isinstance(cond, HasVector):
        return qe.HasVectorCondition(cond.vector)
    if isinstance(cond, Filter):
        return _edge_filter(cond)
    raise StoreError(f"unsupported filter condition {cond!r}")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["EXACT_SEARCH_POINTS", "EdgeStore"]
