"""The store contract: collections of points with named dense vectors, payload and a BM25 text index.

Expressed in Qdrant's own terms so that one interface fits both adapters:

- ``EdgeStore`` (``service.engine.store.edge``): the Qdrant engine in-process (qdrant-edge), the
  embedded default, one shard per collection on disk;
- ``QdrantClientStore`` (``service.engine.store.client``): ``AsyncQdrantClient`` to a server or
  cluster, or qdrant-client's local mode for small contract tests.

Point ids are strings holding a UUID (see ``point_id``). Every collection has:

- a keyword payload index on ``CollectionSpec.tenant_field`` with ``is_tenant=true``;
- a full-text index with BM25 scoring on ``CollectionSpec.text_field`` (``terms``; None: none, for a
  collection whose lexical search lives elsewhere, and a text query on it is a ``StoreError``), filled with the
  analyzer's output (lowercase alphanumeric words joined by spaces, so that every backend tokenizes
  it the same way with the default ``word``/whitespace tokenizer);
- keyword indexes on ``CollectionSpec.keyword_fields``, integer ones on ``integer_fields``;
- zero or more named dense vectors (cosine), added with ``ensure_vector``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# A fixed namespace so that point ids are stable across processes, machines and adapters.
_POINT_NAMESPACE = uuid.UUID("6f1c54d2-8a4e-4f0e-9a55-3c1e2b7d9a10")


def point_id(collection: str, key: str) -> str:
    """The point id of the record ``key`` in ``collection``: a UUIDv5 string, stable everywhere."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{collection}\x00{key}"))


@dataclass(frozen=True)
class CollectionSpec:
    """What a collection holds besides its vectors: which payload fields are indexed and how. The
    spec is the whole list: ``ensure_collection`` drops a payload index of a field it does not name."""

    name: str
    tenant_field: str = "tenant"
    text_field: str | None = "terms"
    keyword_fields: tuple[str, ...] = ()
    integer_fields: tuple[str, ...] = ()
    bool_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class VectorSpec:
    """One named dense vector of a collection (cosine distance)."""

    name: str
    size: int


# ---- filters: a small closed language that both adapters translate -------------------------


@dataclass(frozen=True)
class Match:
    """``field`` equals ``value`` (for an array field: contains it)."""

    field: str
    value: str | int | bool


@dataclass(frozen=True)
class MatchAny:
    """``field`` equals one of ``values``."""

    field: str
    values: tuple[str, ...] | tuple[int, ...]


@dataclass(frozen=True)
class Range:
    """Numeric range on ``field``; ``None`` bounds are open."""

    field: str
    gte: float | None = None
    lte: float | None = None
    gt: float | None = None
    lt: float | None = None


@dataclass(frozen=True)
class HasVector:
    """The point carries the named vector."""

    vector: str


@dataclass(frozen=True)
class Filter:
    """All of ``must``, at least one of ``should`` (when given), none of ``must_not``."""

    must: tuple[Condition, ...] = ()
    should: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()

    def and_(self, *conditions: Condition) -> Filter:
        """A copy with ``conditions`` added to ``must``."""
        return Filter(must=self.must + tuple(conditions), should=self.should, must_not=self.must_not)


Condition = Match | MatchAny | Range | HasVector | Filter


# ---- data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointRecord:
    """A point to write or one read back. ``vectors`` maps vector name to values."""

    id: str
    payload: Mapping[str, Any]
    vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One scored point of a query."""

    id: str
    score: float
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class DenseQuery:
    """One query of a batch: nearest points by cosine on ``vector_name``, as ``Store.search_dense``."""

    vector_name: str
    vector: Sequence[float]
    filter: Filter | None = None
    limit: int = 10
    fields: tuple[str, ...] | None = None
    """The payload fields each hit carries (None: all of them): a caller that reads a few fields of
    large payloads asks for only those."""


@dataclass(frozen=True)
class TextQuery:
    """One query of a batch: BM25 over the text index, as ``Store.search_text`` (no terms: no hits)."""

    query_terms: str
    filter: Filter | None = None
    limit: int = 10
    fields: tuple[str, ...] | None = None
    """The payload fields each hit carries (None: all of them)."""


Query = DenseQuery | TextQuery


class StoreError(Exception):
    """The backend failed (I/O, disk full, server unreachable); the message says which."""


class StoreFullError(StoreError):
    """The data volume is (nearly) full: the write was refused before the engine could run out of space mid-write."""


class StoreLockedError(StoreError):
    """Another process owns the embedded store's data directory; the message names its pid."""


class Store(Protocol):
    """What the engine needs of an index backend. Every method is a coroutine."""

    backend: str  # "qdrant-edge" | "qdrant-client"
    counts_remembered: bool
    """Whether ``count`` answers from memory until the collection's next write (a local store): then a
    count is cheap enough to ask before a search, to skip a search that cannot find anything."""

    async def ensure_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec] = ()) -> None:
        """Create the collection and its payload indexes if missing; add missing vectors."""

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        """Add a named dense vector to an existing collection if it is not there yet."""

    async def drop_vector(self, collection: str, name: str) -> None:
        """Remove a named dense vector and its values from every point; a missing name is a no-op.
        The last vector of a collection is refused (StoreError)."""

    async def upsert(self, collection: str, points: Sequence[PointRecord]) -> None:
        """Insert or replace whole points (payload and vectors)."""

    async def overwrite_payload(self, collection: str, point_id: str, payload: Mapping[str, Any]) -> None:
        """Replace a point's payload, keeping its vectors. A missing point is a StoreError."""

    async def set_payload(self, collection: str, point_ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        """Merge ``payload`` keys into the payload of existing points. A missing point is a StoreError."""

    async def update_vectors(self, collection: str, vectors: Sequence[tuple[str, Mapping[str, Sequence[float]]]]) -> None:
        """Set named vectors of existing points, keeping their payload. A missing point is a StoreError."""

    async def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        """Delete points by id (missing ids are ignored)."""

    async def delete_by_filter(self, collection: str, filter: Filter) -> None:
        """Delete every point matching ``filter``."""

    async def retrieve(self, collection: str, point_ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        """The existing points among ``point_ids`` (order not guaranteed)."""

    async def scroll(
        self,
        collection: str,
        filter: Filter | None = None,
        *,
        limit: int = 256,
        offset: str | None = None,
        with_vectors: bool = False,
    ) -> tuple[list[PointRecord], str | None]:
        """One page of points matching ``filter`` and the offset of the next page (None at the end)."""

    async def count(self, collection: str, filter: Filter | None = None) -> int:
        """Exact number of points matching ``filter``."""

    async def search_dense(
        self, collection: str, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10
    ) -> list[Hit]:
        """Nearest points by cosine similarity on ``vector_name`` (points without it are skipped)."""

    async def search_text(self, collection: str, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        """BM25 over the text index; ``query_terms`` is analyzer output. Points with no query term do not match."""

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
        """One engine call: prefetch dense top-K and BM25 top-K, fuse with RRF (score = RRF score)."""

    async def search_batch(self, collection: str, queries: Sequence[Query]) -> list[list[Hit]]:
        """Several dense and BM25 queries in one engine call: each one's hits, in the order of
        ``queries``, as ``search_dense`` or ``search_text`` answers it alone (with only the payload
        ``fields`` a query names). A vector the collection lacks fails the whole batch (StoreError)."""

    async def flush(self) -> None:
        """Make every acknowledged write durable."""

    async def close(self) -> None:
        """Flush and release the backend."""
