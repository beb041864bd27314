"""Hybrid retrieval over one collection: dense + BM25 fused by RRF, falling back to lexical with a notice.

Surfaces call ``retrieve`` with the caller's filter; it never fails because embeddings failed:
an absent model, an erroring or slow endpoint, or no embedded points yet turn the answer lexical
and say why in ``notices``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import StrEnum

from service.engine.analyzer import query_terms
from service.engine.embeddings import Embedder
from service.engine.store import Filter, Hit, Store
from service.errors import EmbeddingUnavailable

log = logging.getLogger(__name__)

DEFAULT_PREFETCH = 50


class Mode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    DENSE = "dense"


@dataclass
class Retrieved:
    """Fused hits plus how they were found."""

    hits: list[Hit]
    mode: Mode
    notices: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


async def embed_query_or_notice(embedder: Embedder | None, query: str, notices: list[str]) -> list[float] | None:
    """The query vector, or None with a notice saying why search is lexical."""
    if embedder is None:
        notices.append("embeddings are not configured; lexical results only")
        return None
    try:
        return await embedder.embed_query(query)
    except EmbeddingUnavailable as exc:
        notices.append(f"embeddings unavailable ({exc}); lexical results only")
        return None


async def retrieve(
    store: Store,
    collection: str,
    query: str,
    filter: Filter,
    *,
    embedder: Embedder | None,
    mode: Mode = Mode.HYBRID,
    limit: int = 10,
    prefetch_limit: int = DEFAULT_PREFETCH,
) -> Retrieved:
    """Top ``limit`` hits for ``query`` under ``filter`` in the requested mode (or the best it can do)."""
    notices: list[str] = []
    timings: dict[str, float] = {}
    terms = query_terms(query)
    vector = None
    if mode is not Mode.LEXICAL:
        started = time.perf_counter()
        vector = await embed_query_or_notice(embedder, query, notices)
        timings["embed"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    if vector is not None and embedder is not None:
        if mode is Mode.DENSE or not terms:
            hits = await store.search_dense(collection, embedder.vector_name, vector, filter, limit=limit)
            used = Mode.DENSE
        else:
            hits = await store.search_hybrid(
                collection, embedder.vector_name, vector, terms, filter, limit=limit, prefetch_limit=prefetch_limit
            )
            used = Mode.HYBRID
    else:
        hits = await store.search_text(collection, terms, filter, limit=limit) if terms else []
        used = Mode.LEXICAL
    timings["search"] = (time.perf_counter() - started) * 1000
    return Retrieved(hits=hits, mode=used, notices=notices, timings_ms=timings)
