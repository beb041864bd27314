"""The server index store: ``AsyncQdrantClient`` against a Qdrant server or cluster (or its local mode).

Only calls a real server supports are used, so local mode (``QdrantClientStore.local``) exercises
the same code in the contract tests. Local mode is a pure-Python emulation, slow past ~20k points
and blocking inside ``async def``: use it for small tests only.

Differences handled here:

- local mode ignores payload indexes other than a text index with ``scoring`` (and warns on each),
  so only that one is created there;
- local mode scores ``TextQuery`` only with the default ``word`` tokenizer, lowercase, no stemmer,
  stopwords or length limits: the text index is built exactly so everywhere.

Adding a named vector to an existing collection uses ``create_vector_name``
(``PUT /collections/{collection}/vectors/{vector}``); a server too old to have it answers with an
error, which becomes a ``StoreError`` that says to upgrade the server or recreate the collection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from .base import CollectionSpec, DenseQuery, Filter, Hit, PointRecord, Query, StoreError, VectorSpec
from .client_codec import floats, hits, optional_filter, qdrant_filter, record_out, vector_sizes, vectors_in

logger = logging.getLogger(__name__)

# Points per request: keeps a 384-d batch around 1 MB of JSON, far below the server's 32 MB limit.
WRITE_CHUNK_POINTS = 256

_TEXT_INDEX = models.TextIndexParams(
    type=models.TextIndexType.TEXT,
    tokenizer=models.TokenizerType.WORD,
    lowercase=True,
    scoring=models.TextScoringParams(type=models.TextScoringType.BM25),
)


class QdrantClientStore:
    """``Store`` on ``AsyncQdrantClient``. ``shard_number``, ``replication_factor`` and
    ``write_consistency_factor`` apply when this store creates a collection (``None``: server default).
    Every write waits until the server has applied it (``wait=True``)."""

    backend = "qdrant-client"
    counts_remembered = False  # each count is a round trip to the cluster

    def __init__(
        self,
        client: AsyncQdrantClient,
        *,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
    ) -> None:
        self._client = client
        self._shard_number = shard_number
        self._replication_factor = replication_factor
        self._write_consistency_factor = write_consistency_factor
        options = client.init_options
        self._local = options.get("location") == ":memory:" or options.get("path") is not None
        self._text_fields: dict[str, str | None] = {}  # collection -> its BM25 text field (None: it has none)

    @classmethod
    def connect(
        cls,
        url: str,
        api_key: str | None = None,
        *,
        timeout_s: int = 10,
        prefer_grpc: bool = False,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
    ) -> QdrantClientStore:
        """A store on the Qdrant server or cluster at ``url``."""
        client = AsyncQdrantClient(url=url, api_key=api_key, timeout=timeout_s, prefer_grpc=prefer_grpc)
        return cls(
            client,
            shard_number=shard_number,
            replication_factor=replication_factor,
            write_consistency_factor=write_consistency_factor,
        )

    @classmethod
    def local(cls, path_or_memory: str | Path = ":memory:") -> QdrantClientStore:
        """A store on qdrant-client's local mode: ``":memory:"`` or a directory. Small data only."""
        if str(path_or_memory) == ":memory:":
            return cls(AsyncQdrantClient(location=":memory:"))
        return cls(AsyncQdrantClient(path=str(path_or_memory)))

    # ---- collections -----------------------------------------------------------------------

    async def ensure_collection(self, spec: CollectionSpec, vectors: Sequence[VectorSpec] = ()) -> None:
        name = spec.name
        with _errors("create the collection", name):
            if not await self._client.collection_exists(name):
                try:
                    await self._client.create_collection(
                        name,
                        vectors_config={
                            v.name: models.VectorParams(size=v.size, distance=models.Distance.COSINE) for v in vectors
                        },
                        shard_number=self._shard_number,
                        replication_factor=self._replication_factor,
                        write_consistency_factor=self._write_consistency_factor,
                    )
                    logger.info("qdrant collection created", extra={"collection": name})
                except UnexpectedResponse as exc:
                    if exc.status_code != 409:  # 409: another process created it meanwhile
                        raise
            info = await self._client.get_collection(name)
            wanted = self._payload_indexes(spec)
            for field_name, schema in wanted:
                if field_name not in info.payload_schema:
                    await self._client.create_payload_index(name, field_name, field_schema=schema, wait=True)
            if not self._local:
                # An index the spec no longer names (a field the surface stopped filtering on) only costs memory.
                for field_name in sorted(set(info.payload_schema) - {field for field, _ in wanted}):
                    await self._client.delete_payload_index(name, field_name, wait=True)
                    logger.info("qdrant payload index dropped", extra={"collection": name, "field": field_name})
        existing = vector_sizes(info)
        for vector in vectors:
            await self._add_vector(name, vector, existing)
        self._text_fields[name] = spec.text_field

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        with _errors("read the collection", collection):
            info = await self._client.get_collection(collection)
        await self._add_vector(collection, vector, vector_sizes(info))

    async def drop_vector(self, collection: str, name: str) -> None:
        with _errors("read the collection", collection):
            sizes = vector_sizes(await self._client.get_collection(collection))
        if name not in sizes:
            return
        if len(sizes) == 1:
            raise StoreError(f"vector {name!r} is the only vector of collection {collection!r}; it cannot be dropped")
        with _errors(f"drop vector {name!r}", collection):
            await self._client.delete_vector_name(collection, name, wait=True)
        logger.info("qdrant vector dropped", extra={"collection": collection, "vector": name})

    # ---- writes ----------------------------------------------------------------------------

    async def upsert(self, collection: str, points: Sequence[PointRecord]) -> None:
        with _errors("upsert points", collection):
            for start in range(0, len(points), WRITE_CHUNK_POINTS):
                structs = [
                    models.PointStruct(id=p.id, vector=vectors_in(p.vectors), payload=dict(p.payload))
                    for p in points[start : start + WRITE_CHUNK_POINTS]
                ]
                await self._client.upsert(collection, points=structs, wait=True)

    async def overwrite_payload(self, collection: str, point_id: str, payload: Mapping[str, Any]) -> None:
        with _errors("overwrite a payload", collection):
            await self._client.overwrite_payload(collection, payload=dict(payload), points=[point_id], wait=True)

    async def set_payload(self, collection: str, point_ids: Sequence[str], payload: Mapping[str, Any]) -> None:
        with _errors("set payload", collection):
            await self._client.set_payload(collection, payload=dict(payload), points=list(point_ids), wait=True)

    async def update_vectors(
        self, collection: str, vectors: Sequence[tuple[str, Mapping[str, Sequence[float]]]]
    ) -> None:
        with _errors("update vectors", collection):
            for start in range(0, len(vectors), WRITE_CHUNK_POINTS):
                batch = [
                    models.PointVectors(id=point_id, vector=vectors_in(named))
                    for point_id, named in vectors[start : start + WRITE_CHUNK_POINTS]
                ]
                await self._client.update_vectors(collection, points=batch, wait=True)

    async def delete(self, collection: str, point_ids: Sequence[str]) -> None:
        with _errors("delete points", collection):
            selector = models.PointIdsList(points=list(point_ids))
            await self._client.delete(collection, points_selector=selector, wait=True)

    async def delete_by_filter(self, collection: str, filter: Filter) -> None:
        with _errors("delete points by filter", collection):
            selector = models.FilterSelector(filter=qdrant_filter(filter))
            await self._client.delete(collection, points_selector=selector, wait=True)

    # ---- reads -----------------------------------------------------------------------------

    async def retrieve(self, collection: str, point_ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        with _errors("retrieve points", collection):
            records = await self._client.retrieve(
                collection, ids=list(point_ids), with_payload=True, with_vectors=with_vectors
            )
        return [record_out(r) for r in records]

    async def scroll(
        self,
        collection: str,
        filter: Filter | None = None,
        *,
        limit: int = 256,
        offset: str | None = None,
        with_vectors: bool = False,
    ) -> tuple[list[PointRecord], str | None]:
        with _errors("scroll points", collection):
            records, next_offset = await self._client.scroll(
                collection,
                scroll_filter=optional_filter(filter),
                limit=limit,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
        return [record_out(r) for r in records], (None if next_offset is None else str(next_offset))

    async def count(self, collection: str, filter: Filter | None = None) -> int:
        with _errors("count points", collection):
            result = await self._client.count(collection, count_filter=optional_filter(filter), exact=True)
        return result.count

    async def search_dense(
        self, collection: str, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10
    ) -> list[Hit]:
        with _errors("search dense vectors", collection):
            response = await self._client.query_points(
                collection,
                query=floats(vector),
                using=vector_name,
                query_filter=optional_filter(filter),
                limit=limit,
                with_payload=True,
            )
        return hits(response.points)

    async def search_text(self, collection: str, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        if not query_terms.split():
            return []
        text_field = await self._text_field(collection)
        with _errors("search text", collection):
            response = await self._client.query_points(
                collection,
                query=models.TextQuery(text=query_terms),
                using=text_field,
                query_filter=optional_filter(filter),
                limit=limit,
                with_payload=True,
            )
        return hits(response.points)

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
        where = optional_filter(filter)
        # The filter goes on each prefetch: each side must pick its top-K among allowed points.
        prefetch = [
            models.Prefetch(query=floats(vector), using=vector_name, filter=where, limit=prefetch_limit)
        ]
        if query_terms.split():
            text_field = await self._text_field(collection)
            prefetch.append(
                models.Prefetch(
                    query=models.TextQuery(text=query_terms), using=text_field, filter=where, limit=prefetch_limit
                )
            )
        with _errors("search hybrid", collection):
            response = await self._client.query_points(
                collection,
                prefetch=prefetch,
                query=models.RrfQuery(rrf=models.Rrf(k=rrf_k)),
                query_filter=where,
                limit=limit,
                with_payload=True,
            )
        return hits(response.points)

    async def search_batch(self, collection: str, queries: Sequence[Query]) -> list[list[Hit]]:
        """The queries as one ``query_batch_points`` request."""
        requests: list[models.QueryRequest] = []
        for query in queries:
            if isinstance(query, DenseQuery):
                requests.append(
                    models.QueryRequest(
                        query=floats(query.vector), using=query.vector_name, filter=optional_filter(query.filter), limit=query.limit, with_payload=_selected(query.fields)
                    )
                )
            elif query.query_terms.split():
                text_field = await self._text_field(collection)
                requests.append(
                    models.QueryRequest(
                        query=models.TextQuery(text=query.query_terms), using=text_field, filter=optional_filter(query.filter), limit=query.limit, with_payload=_selected(query.fields)
                    )
                )
        answered: list[models.QueryResponse] = []
        if requests:
            with _errors("search a batch", collection):
                answered = await self._client.query_batch_points(collection, requests=requests)
        found = iter(answered)
        return [hits(next(found).points) if isinstance(query, DenseQuery) or query.query_terms.split() else [] for query in queries]

    async def flush(self) -> None:
        """Nothing to do: every write waited until the server applied it (its WAL is durable)."""

    async def close(self) -> None:
        with _errors("close the client", "*"):
            await self._client.close()

    # ---- internals -------------------------------------------------------------------------

    def _payload_indexes(self, spec: CollectionSpec) -> list[tuple[str, Any]]:
        indexes: list[tuple[str, Any]] = [] if spec.text_field is None else [(spec.text_field, _TEXT_INDEX)]
        if self._local:
            return indexes  # local mode warns on, and ignores, every other index
        indexes.append(
            (spec.tenant_field, models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True))
        )
        indexes += [(name, models.PayloadSchemaType.KEYWORD) for name in spec.keyword_fields]
        indexes += [
            (name, models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, lookup=True, range=True))
            for name in spec.integer_fields
        ]
        indexes += [(name, models.PayloadSchemaType.BOOL) for name in spec.bool_fields]
        return indexes

    async def _add_vector(self, collection: str, vector: VectorSpec, existing: Mapping[str, int]) -> None:
        known = existing.get(vector.name)
        if known is not None:
            if known != vector.size:
                raise StoreError(
                    f"collection {collection!r} already has vector {vector.name!r} of size {known}, not {vector.size}"
                )
            return
        config = models.DenseVectorNameConfig(
            dense=models.DenseVectorConfig(size=vector.size, distance=models.Distance.COSINE)
        )
        try:
            await self._client.create_vector_name(collection, vector.name, config, wait=True)
        except Exception as exc:
            raise StoreError(
                f"could not add vector {vector.name!r} to collection {collection!r}: {exc}. Adding a named vector "
                "to an existing collection needs a Qdrant server with PUT /collections/{collection}/vectors/{vector}; "
                "upgrade the server, or recreate the collection with the vector"
            ) from exc
        logger.info("qdrant vector added", extra={"collection": collection, "vector": vector.name})

    async def _text_field(self, collection: str) -> str:
        """The BM25 field: known from ensure_collection, else found in the server's payload schema."""
        if collection in self._text_fields:
            known = self._text_fields[collection]
            if known is None:
                raise StoreError(f"collection {collection!r} has no text index: its records are searched lexically elsewhere")
            return known
        with _errors("read the collection", collection):
            info = await self._client.get_collection(collection)
        for field_name, index in info.payload_schema.items():
            params = index.params
            if isinstance(params, models.TextIndexParams) and params.scoring:
                self._text_fields[collection] = field_name
                return field_name
        raise StoreError(f"collection {collection!r} has no text index with scoring; call ensure_collection first")


def _selected(fields: tuple[str, ...] | None) -> bool | list[str]:
    """A query's ``with_payload``: every field, or only those named."""
    return True if fields is None else list(fields)


@contextmanager
def _errors(what: str, collection: str) -> Iterator[None]:
    """Turn any client failure (HTTP, gRPC, timeouts, local-mode ValueError/KeyError) into StoreError."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"qdrant-client could not {what} in collection {collection!r}: {exc!r}") from exc


__all__ = ["QdrantClientStore"]
