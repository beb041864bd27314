"""One collection of the embedded store on disk: its sidecar, its qdrant-edge shard, and when its writes are flushed.

Layout under the store's root::

    <collection>/collection.json   our sidecar: CollectionSpec, dense vectors, placeholder flag
    <collection>/shard/            the EdgeShard (segments, WAL, edge_config.json)

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
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from .base import CollectionSpec, StoreError, VectorSpec
from .edge_codec import EDGE_MATCHES_BOOLS, shadow

logger = logging.getLogger(__name__)

# Segments up to ~20k 384-d vectors are searched exactly (<= ~5 ms here) and get no HNSW graph;
# filtered searches whose candidates fit in as much vector data also scan them exactly, which keeps
# small-tenant queries at full recall. Both thresholds are in KB of vector data (float32).
EXACT_SEARCH_POINTS = 20_000
EXACT_SEARCH_KB = EXACT_SEARCH_POINTS * 384 * 4 // 1024
_HNSW_M = 16
_HNSW_EF_CONSTRUCT = 100

# flush() cost grows with the unflushed data (264 ms for 20k points); the WAL already makes
# writes durable, so flush to keep WAL replay short, not for safety.
FLUSH_EVERY_CHANGES = 5_000
FLUSH_EVERY_S = 30.0

_SIDECAR = "collection.json"
_SHARD_DIR = "shard"
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
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changes_since_flush: int = 0
    last_flush: float = field(default_factory=time.monotonic)

    def errors(self, what: str) -> AbstractContextManager[None]:
        """Backend failures inside become ``StoreError`` naming ``what`` and this collection."""
        return store_errors(self.root, what, self.spec.name)

    def update(self, what: str, op: qe.UpdateOperation, changes: int) -> None:
        with self.errors(what):
            self.shard.update(op)
        self.changes_since_flush += max(changes, 1)

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
        _write_sidecar(self.root, self.spec, self.vectors, self.placeholder_sparse)


def open_collection(root: Path, name: str) -> EdgeCollection | None:
    """The collection ``name`` under ``root``, as its sidecar describes it; None when it has no sidecar."""
    sidecar = root / name / _SIDECAR
    if not sidecar.exists():
        return None
    with store_errors(root, "read the collection sidecar", name):
        meta = json.loads(sidecar.read_text())
    spec = _spec_from_json(meta["spec"])
    vectors = {str(k): int(v) for k, v in meta["vectors"].items()}
    placeholder = bool(meta["placeholder_sparse"])
    shard_dir = root / name / _SHARD_DIR
    config = _edge_config(vectors, placeholder)
    if not (shard_dir / "edge_config.json").exists():
        # The sidecar is written before the shard is created: resume an interrupted creation.
        with store_errors(root, "create the shard", name):
            shard = qe.EdgeShard.create(str(shard_dir), config)
    else:
        shard = _load_shard(root, name, shard_dir, config)
    logger.info("edge collection loaded", extra={"collection": name, "vectors": vectors})
    return EdgeCollection(root=root, spec=spec, vectors=vectors, placeholder_sparse=placeholder, shard=shard)


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


def create_collection(root: Path, spec: CollectionSpec, vectors: Sequence[VectorSpec]) -> EdgeCollection:
    """Create the collection's directory, sidecar and shard (in that order) under ``root``."""
    sizes = {v.name: v.size for v in vectors}
    placeholder = not sizes
    shard_dir = root / spec.name / _SHARD_DIR
    with store_errors(root, "create the collection directory", spec.name):
        (root / spec.name).mkdir(parents=True, exist_ok=True)
    # Sidecar first: if we crash before the shard exists, the next open creates it.
    _write_sidecar(root, spec, sizes, placeholder)
    with store_errors(root, "create the shard", spec.name):
        shard = qe.EdgeShard.create(str(shard_dir), _edge_config(sizes, placeholder))
    logger.info("edge collection created", extra={"collection": spec.name, "vectors": sizes})
    return EdgeCollection(root=root, spec=spec, vectors=sizes, placeholder_sparse=placeholder, shard=shard)


def payload_indexes(spec: CollectionSpec) -> list[tuple[str, Any]]:
    """The payload indexes the collection's shard should have: (field, index parameters)."""
    indexes: list[tuple[str, Any]] = [
        (spec.tenant_field, qe.KeywordIndexParams(is_tenant=True)),
        # Word splits on non-alphanumerics like qdrant-client local mode's default tokenizer and a
        # server's `word`; on analyzer output (words joined by spaces) it equals Whitespace.
        (spec.text_field, qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True, scoring=True)),
    ]
    indexes += [(name, qe.KeywordIndexParams()) for name in spec.keyword_fields]
    indexes += [(name, qe.IntegerIndexParams(lookup=True, range=True)) for name in spec.integer_fields]
    indexes += [(name, qe.BoolIndexParams()) for name in spec.bool_fields]
    if not EDGE_MATCHES_BOOLS:
        indexes += [(shadow(name), qe.KeywordIndexParams()) for name in spec.bool_fields]
    return indexes


def _write_sidecar(root: Path, spec: CollectionSpec, vectors: Mapping[str, int], placeholder: bool) -> None:
    meta = {
        "format": _SIDECAR_FORMAT,
        "spec": asdict(spec),
        "vectors": dict(vectors),
        "placeholder_sparse": placeholder,
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


def _edge_config(vectors: Mapping[str, int], placeholder_sparse: bool) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={name: qe.EdgeVectorParams(size, qe.Distance.Cosine) for name, size in vectors.items()},
        sparse_vectors={_PLACEHOLDER_SPARSE: qe.EdgeSparseVectorParams()} if placeholder_sparse else None,
        hnsw_config=qe.HnswIndexConfig(m=_HNSW_M, ef_construct=_HNSW_EF_CONSTRUCT, full_scan_threshold=EXACT_SEARCH_KB),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=EXACT_SEARCH_KB),
    )


def _spec_from_json(data: Mapping[str, Any]) -> CollectionSpec:
    return CollectionSpec(
        name=str(data["name"]),
        tenant_field=str(data["tenant_field"]),
        text_field=str(data["text_field"]),
        keyword_fields=tuple(data["keyword_fields"]),
        integer_fields=tuple(data["integer_fields"]),
        bool_fields=tuple(data["bool_fields"]),
    )


__all__ = [
    "EXACT_SEARCH_POINTS",
    "FLUSH_EVERY_CHANGES",
    "FLUSH_EVERY_S",
    "EdgeCollection",
    "create_collection",
    "open_collection",
    "payload_indexes",
    "store_errors",
]
