"""One collection of the embedded store on disk: its sidecar, its qdrant-edge shard, and when its writes are flushed.

Layout under the store's root::

    <collection>/collection.json   our sidecar: CollectionSpec, dense vectors, placeholder flag, shard directory
    <collection>/shard/            the EdgeShard (segments, WAL, edge_config.json)
    <collection>/shard-<n>/        the same after the n-th index build replaced it (``edge_build``)

The sidecar names the live shard directory; any other ``shard*`` directory is a leftover of an
interrupted index build or swap and is removed when the collection opens.

The engine refuses a shard without any vector, so a collection created with no dense vector gets
an unused sparse placeholder vector. Writes are durable once the shard's ``update()`` returns (its
WAL); ``flush()`` moves them into segments, every ``FLUSH_EVERY_CHANGES`` changes or
``FLUSH_EVERY_S`` seconds, to keep WAL replay short.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from .base import CollectionSpec, StoreError, VectorSpec
from .edge_build import edge_config
from .edge_codec import EDGE_MATCHES_BOOLS, shadow
from .edge_payloads import PayloadCache

logger = logging.getLogger(__name__)

# Segments up to ~20k 384-d vectors are searched exactly (<= ~5 ms here) and get no HNSW graph;
# filtered searches whose candidates fit in as much vector data also scan them exactly, which keeps
# small-tenant queries at full recall. The engine takes both thresholds in KB of vector data (float32).
EXACT_SEARCH_POINTS = 20_000
_INDEX_DIM = 384

# flush() cost grows with the unflushed data (264 ms for 20k points); the WAL already makes
# writes durable, so flush to keep WAL replay short, not for safety.
FLUSH_EVERY_CHANGES = 5_000
FLUSH_EVERY_S = 30.0

# An index build keeps the writes made during it in memory to replay them on its result; past this
# many points it gives up (the next trigger starts over) rather than hold an unbounded log.
CHANGE_LOG_MAX_POINTS = 50_000

_SIDECAR = "collection.json"
_SHARD_DIR = "shard"
_BUILD_SUFFIX = ".build"
_SIDECAR_FORMAT = 1
_PLACEHOLDER_SPARSE = "_no_dense_vector"


@contextmanager
def store_errors(root: Path, what: str, collection: str) -> Iterator[None]:
    """Turn any backend failure (qdrant-edge raises bare ``Exception``; disk full is an OSError) into StoreError."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"qdrant-edge could not {what} in collection {collection!r} under {root}: {exc}") from exc


@dataclass
class EdgeCollection:
    """An open shard and what the sidecar says about it; ``root`` is the store's directory."""

    root: Path
    spec: CollectionSpec
    vectors: dict[str, int]  # dense vector name -> size
    placeholder_sparse: bool
    shard: qe.EdgeShard
    shard_dir: str = _SHARD_DIR  # the live shard's directory under root/<name>
    index_threshold_points: int = EXACT_SEARCH_POINTS
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changes_since_flush: int = 0
    last_flush: float = field(default_factory=time.monotonic)
    # While an index build runs on a copy, every update applied since the copy, to replay on the result.
    change_log: list[qe.UpdateOperation] | None = None
    change_log_points: int = 0
    # Updates applied so far, and exact counts by filter as of an update number: this process is
    # the only writer, so a count taken since the last update is still exact.
    writes: int = 0
    counts: dict[Any, tuple[int, int]] = field(default_factory=dict)
    # The payloads searches returned, by point version (edge_payloads): a new shard starts a new one.
    payloads: PayloadCache = field(default_factory=PayloadCache)

    def errors(self, what: str) -> AbstractContextManager[None]:
        """Backend failures inside become ``StoreError`` naming ``what`` and this collection."""
        return store_errors(self.root, what, self.spec.name)

    @property
    def path(self) -> Path:
        """The collection's directory."""
        return self.root / self.spec.name

    def update(self, what: str, op: qe.UpdateOperation, changes: int) -> None:
        self.writes += 1  # first: an update that fails may have changed points all the same
        with self.errors(what):
            self.shard.update(op)
        self.changes_since_flush += max(changes, 1)
        if self.change_log is not None:
            self.change_log.append(op)
            self.change_log_points += max(changes, 1)
            if self.change_log_points > CHANGE_LOG_MAX_POINTS:
                self.change_log = None  # the build sees it and gives up

    def vector_counts(self) -> tuple[int, int]:
        """(dense vectors stored, of them inside an HNSW graph); a point without a vector counts for none.

        The engine's approximate count (~0.3 ms at 100k points, the exact one takes ~20 ms).
        """
        if not self.vectors:
            return 0, 0
        with self.errors("count the dense vectors"):
            stored = sum(
                self.shard.count(qe.CountRequest(exact=False, filter=qe.Filter(must=[qe.HasVectorCondition(name)])))
                for name in self.vectors
            )
            indexed = self.shard.info().indexed_vectors_count
        return stored, indexed

    def unindexed_vectors(self) -> int:
        """Dense vectors outside any HNSW graph: what every unfiltered dense query scans exactly."""
        stored, indexed = self.vector_counts()
        return max(0, stored - indexed)

    @property
    def placeholder_name(self) -> str | None:
        """The name of the unused sparse vector of a collection without dense vectors, else None."""
        return _PLACEHOLDER_SPARSE if self.placeholder_sparse else None

    def maybe_flush(self) -> None:
        due = time.monotonic() - self.last_flush >= FLUSH_EVERY_S
        if self.changes_since_flush >= FLUSH_EVERY_CHANGES or (self.changes_since_flush and due):
            self.flush()

    def flush(self) -> None:
        if self.changes_since_flush == 0:
            return
        with self.errors("flush"):
            self.shard.flush()
        self.changes_since_flush = 0
        self.last_flush = time.monotonic()

    def add_vector(self, vector: VectorSpec) -> None:
        known = self.vectors.get(vector.name)
        if known is not None:
            if known != vector.size:
                raise StoreError(
                    f"collection {self.spec.name!r} already has vector {vector.name!r} of size {known}, not {vector.size}"
                )
            return
        op = qe.UpdateOperation.create_dense_vector(vector.name, vector.size, qe.Distance.Cosine)
        self.update(f"add vector {vector.name!r}", op, 0)
        # Shard config on disk before the sidecar names the vector: a reload must accept both.
        self.flush()
        self.vectors[vector.name] = vector.size
        self.write_sidecar()
        logger.info(
            "edge vector added", extra={"collection": self.spec.name, "vector": vector.name, "size": vector.size}
        )

    def write_sidecar(self) -> None:
        _write_sidecar(self.root, self.spec, self.vectors, self.placeholder_sparse, self.shard_dir)

    def next_shard_dir(self) -> str:
        """The directory name the next index build writes its result to (without the build suffix)."""
        generation = int(self.shard_dir.rpartition("-")[2]) + 1 if "-" in self.shard_dir else 1
        return f"{_SHARD_DIR}-{generation}"


def build_dir(shard_dir: Path) -> Path:
    """Where an index build copies and optimizes the shard that will live at ``shard_dir``."""
    return shard_dir.with_name(shard_dir.name + _BUILD_SUFFIX)


def threshold_kb(points: int) -> int:
    """A per-segment size in points of 384-d float32 vectors, in the KB the engine's thresholds take."""
    return max(1, points * _INDEX_DIM * 4 // 1024)


def open_collection(root: Path, name: str, *, index_threshold_points: int = EXACT_SEARCH_POINTS) -> EdgeCollection | None:
    """The collection ``name`` under ``root``, as its sidecar describes it; None when it has no sidecar."""
    sidecar = root / name / _SIDECAR
    if not sidecar.exists():
        return None
    with store_errors(root, "read the collection sidecar", name):
        meta = json.loads(sidecar.read_text())
    spec = _spec_from_json(meta["spec"])
    vectors = {str(k): int(v) for k, v in meta["vectors"].items()}
    placeholder = bool(meta["placeholder_sparse"])
    coll_shard_dir = str(meta.get("shard_dir", _SHARD_DIR))
    _remove_leftovers(root, name, coll_shard_dir)
    shard_dir = root / name / coll_shard_dir
    placeholder_name = _PLACEHOLDER_SPARSE if placeholder else None
    config = edge_config(vectors, placeholder_name, threshold_kb(index_threshold_points))
    if not (shard_dir / "edge_config.json").exists():
        # The sidecar is written before the shard is created: resume an interrupted creation.
        with store_errors(root, "create the shard", name):
            shard = qe.EdgeShard.create(str(shard_dir), config)
    else:
        shard = _load_shard(root, name, shard_dir, config)
    logger.info("edge collection loaded", extra={"collection": name, "vectors": vectors, "shard_dir": coll_shard_dir})
    return EdgeCollection(
        root=root,
        spec=spec,
        vectors=vectors,
        placeholder_sparse=placeholder,
        shard=shard,
        shard_dir=coll_shard_dir,
        index_threshold_points=index_threshold_points,
    )


def _remove_leftovers(root: Path, name: str, live: str) -> None:
    """Remove shard directories other than the live one: an interrupted build's copy, a swapped-out shard."""
    for path in (root / name).iterdir():
        if path.is_dir() and path.name.startswith(_SHARD_DIR) and path.name != live:
            logger.info("edge removing a stale shard directory", extra={"collection": name, "path": str(path)})
            with store_errors(root, "remove a stale shard directory", name):
                shutil.rmtree(path)


def _load_shard(root: Path, name: str, shard_dir: Path, config: qe.EdgeConfig) -> qe.EdgeShard:
    try:
        return qe.EdgeShard.load(str(shard_dir), config)
    except Exception as exc:
        # A crash between adding a vector to the shard and rewriting the sidecar leaves the two
        # apart; the shard's own persisted config is the truth, and ensure_vector repairs ours.
        logger.warning(
            "edge shard refused the sidecar config; loading with its own",
            extra={"collection": name, "error": str(exc)},
        )
        with store_errors(root, "load the shard", name):
            return qe.EdgeShard.load(str(shard_dir))


def create_collection(
    root: Path, spec: CollectionSpec, vectors: Sequence[VectorSpec], *, index_threshold_points: int = EXACT_SEARCH_POINTS
) -> EdgeCollection:
    """Create the collection's directory, sidecar and shard (in that order) under ``root``."""
    sizes = {v.name: v.size for v in vectors}
    placeholder = not sizes
    shard_dir = root / spec.name / _SHARD_DIR
    with store_errors(root, "create the collection directory", spec.name):
        (root / spec.name).mkdir(parents=True, exist_ok=True)
    # Sidecar first: if we crash before the shard exists, the next open creates it.
    _write_sidecar(root, spec, sizes, placeholder, _SHARD_DIR)
    config = edge_config(sizes, _PLACEHOLDER_SPARSE if placeholder else None, threshold_kb(index_threshold_points))
    with store_errors(root, "create the shard", spec.name):
        shard = qe.EdgeShard.create(str(shard_dir), config)
    logger.info("edge collection created", extra={"collection": spec.name, "vectors": sizes})
    return EdgeCollection(
        root=root,
        spec=spec,
        vectors=sizes,
        placeholder_sparse=placeholder,
        shard=shard,
        index_threshold_points=index_threshold_points,
    )


def payload_indexes(spec: CollectionSpec) -> list[tuple[str, Any]]:
    """The payload indexes the collection's shard should have: (field, index parameters)."""
    indexes: list[tuple[str, Any]] = [(spec.tenant_field, qe.KeywordIndexParams(is_tenant=True))]
    if spec.text_field is not None:
        # Word splits on non-alphanumerics like qdrant-client local mode's default tokenizer and a
        # server's `word`; on analyzer output (words joined by spaces) it equals Whitespace.
        indexes.append((spec.text_field, qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True, scoring=True)))
    indexes += [(name, qe.KeywordIndexParams()) for name in spec.keyword_fields]
    indexes += [(name, qe.IntegerIndexParams(lookup=True, range=True)) for name in spec.integer_fields]
    indexes += [(name, qe.BoolIndexParams()) for name in spec.bool_fields]
    if not EDGE_MATCHES_BOOLS:
        indexes += [(shadow(name), qe.KeywordIndexParams()) for name in spec.bool_fields]
    return indexes


def _write_sidecar(root: Path, spec: CollectionSpec, vectors: Mapping[str, int], placeholder: bool, shard_dir: str) -> None:
    meta = {
        "format": _SIDECAR_FORMAT,
        "spec": asdict(spec),
        "vectors": dict(vectors),
        "placeholder_sparse": placeholder,
        "shard_dir": shard_dir,
    }
    path = root / spec.name / _SIDECAR
    tmp = path.with_suffix(".json.tmp")
    with store_errors(root, "write the collection sidecar", spec.name):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _spec_from_json(data: Mapping[str, Any]) -> CollectionSpec:
    return CollectionSpec(
        name=str(data["name"]),
        tenant_field=str(data["tenant_field"]),
        text_field=None if data["text_field"] is None else str(data["text_field"]),
        keyword_fields=tuple(data["keyword_fields"]),
        integer_fields=tuple(data["integer_fields"]),
        bool_fields=tuple(data["bool_fields"]),
    )


__all__ = [
    "CHANGE_LOG_MAX_POINTS",
    "EXACT_SEARCH_POINTS",
    "FLUSH_EVERY_CHANGES",
    "FLUSH_EVERY_S",
    "EdgeCollection",
    "build_dir",
    "create_collection",
    "open_collection",
    "payload_indexes",
    "store_errors",
    "threshold_kb",
]
