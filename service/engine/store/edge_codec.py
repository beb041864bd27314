"""Translation between the store's types and qdrant-edge's: payloads, vectors, records and filters.

qdrant-edge 0.9 turns ``MatchValue(True)`` into the integer 1, which never matches a boolean
payload, so top-level boolean payload values are mirrored into keyword shadow fields on the way in,
matched through them, and left out on the way back.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any, cast

import qdrant_edge as qe

from .base import Condition, Filter, HasVector, Match, MatchAny, PointRecord, Range, StoreError

# qdrant-edge 0.9 turns MatchValue(True) into 1; once a release keeps it a bool, match natively.
EDGE_MATCHES_BOOLS = isinstance(qe.MatchValue(True).value, bool)
BOOL_SHADOW = "__bool__"


def shadow(key: str) -> str:
    """The keyword field that mirrors the boolean payload field ``key``."""
    return f"{BOOL_SHADOW}{key}"


def payload_in(payload: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    if not EDGE_MATCHES_BOOLS:
        for key, value in payload.items():
            if isinstance(value, bool):
                out[shadow(key)] = "true" if value else "false"
    return out


def payload_out(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    if not payload:
        return {}
    return {key: value for key, value in payload.items() if not key.startswith(BOOL_SHADOW)}


def floats(vector: Sequence[float]) -> list[float]:
    tolist = getattr(vector, "tolist", None)  # numpy arrays convert in C, 20x faster
    return [float(x) for x in vector] if tolist is None else list(tolist())


def vectors_in(vectors: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    return {name: floats(values) for name, values in vectors.items()}


def record_out(record: qe.Record, dense_vectors: Container[str], with_vectors: bool) -> PointRecord:
    """A shard's record as a ``PointRecord``; of its vectors, only the named dense ones."""
    vectors: dict[str, list[float]] = {}
    if with_vectors and isinstance(record.vector, dict):
        vectors = {
            name: list(cast(list[float], values)) for name, values in record.vector.items() if name in dense_vectors
        }
    return PointRecord(id=str(record.id), payload=payload_out(record.payload), vectors=vectors)


def optional_filter(flt: Filter | None) -> qe.Filter | None:
    return None if flt is None else edge_filter(flt)


def edge_filter(flt: Filter) -> qe.Filter:
    # Empty lists become None: an empty `should` must not mean "match nothing".
    return qe.Filter(
        must=[_edge_condition(c) for c in flt.must] or None,
        should=[_edge_condition(c) for c in flt.should] or None,
        must_not=[_edge_condition(c) for c in flt.must_not] or None,
    )


def _edge_condition(cond: Condition) -> Any:
    if isinstance(cond, Match):
        if isinstance(cond.value, bool) and not EDGE_MATCHES_BOOLS:
            return qe.FieldCondition(shadow(cond.field), match=qe.MatchValue("true" if cond.value else "false"))
        return qe.FieldCondition(cond.field, match=qe.MatchValue(cond.value))
    if isinstance(cond, MatchAny):
        return qe.FieldCondition(cond.field, match=qe.MatchAny(cast(list[str] | list[int], list(cond.values))))
    if isinstance(cond, Range):
        return qe.FieldCondition(cond.field, range=qe.RangeFloat(gte=cond.gte, gt=cond.gt, lte=cond.lte, lt=cond.lt))
    if isinstance(cond, HasVector):
        return qe.HasVectorCondition(cond.vector)
    if isinstance(cond, Filter):
        return edge_filter(cond)
    raise StoreError(f"unsupported filter condition {cond!r}")


__all__ = [
    "BOOL_SHADOW",
    "EDGE_MATCHES_BOOLS",
    "edge_filter",
    "floats",
    "optional_filter",
    "payload_in",
    "payload_out",
    "record_out",
    "shadow",
    "vectors_in",
]
