"""Translation between the store's types and qdrant-client's models: vectors, records, hits, filters, collection info."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from qdrant_client import models

from .base import Condition, Filter, HasVector, Hit, Match, MatchAny, PointRecord, Range, StoreError


def vector_sizes(info: models.CollectionInfo) -> dict[str, int]:
    """The collection's dense vectors by name, with their sizes."""
    vectors = info.config.params.vectors
    if isinstance(vectors, Mapping):
        return {name: params.size for name, params in vectors.items()}
    if isinstance(vectors, models.VectorParams):  # an unnamed default vector: not ours, but report it
        return {"": vectors.size}
    return {}


def floats(vector: Sequence[float]) -> list[float]:
    tolist = getattr(vector, "tolist", None)  # numpy arrays convert in C
    return [float(x) for x in vector] if tolist is None else list(tolist())


def vectors_in(vectors: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    return {name: floats(values) for name, values in vectors.items()}


def record_out(record: models.Record) -> PointRecord:
    vectors: dict[str, list[float]] = {}
    if isinstance(record.vector, Mapping):
        vectors = {
            name: list(cast(list[float], values)) for name, values in record.vector.items() if isinstance(values, list)
        }
    return PointRecord(id=str(record.id), payload=dict(record.payload or {}), vectors=vectors)


def hits(points: Sequence[models.ScoredPoint]) -> list[Hit]:
    return [Hit(id=str(p.id), score=float(p.score), payload=dict(p.payload or {})) for p in points]


def optional_filter(flt: Filter | None) -> models.Filter | None:
    return None if flt is None else qdrant_filter(flt)


def qdrant_filter(flt: Filter) -> models.Filter:
    # Empty lists become None: an empty `should` must not mean "match nothing".
    return models.Filter(
        must=[_qdrant_condition(c) for c in flt.must] or None,
        should=[_qdrant_condition(c) for c in flt.should] or None,
        must_not=[_qdrant_condition(c) for c in flt.must_not] or None,
    )


def _qdrant_condition(cond: Condition) -> Any:
    if isinstance(cond, Match):
        return models.FieldCondition(key=cond.field, match=models.MatchValue(value=cond.value))
    if isinstance(cond, MatchAny):
        return models.FieldCondition(
            key=cond.field, match=models.MatchAny(any=cast(list[str] | list[int], list(cond.values)))
        )
    if isinstance(cond, Range):
        return models.FieldCondition(
            key=cond.field, range=models.Range(gte=cond.gte, gt=cond.gt, lte=cond.lte, lt=cond.lt)
        )
    if isinstance(cond, HasVector):
        return models.HasVectorCondition(has_vector=cond.vector)
    if isinstance(cond, Filter):
        return qdrant_filter(cond)
    raise StoreError(f"unsupported filter condition {cond!r}")


__all__ = ["floats", "hits", "optional_filter", "qdrant_filter", "record_out", "vector_sizes", "vectors_in"]
