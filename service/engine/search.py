"""Hybrid retrieval over one collection: dense + BM25 fused by RRF, falling back to lexical with a notice.

Surfaces call ``retrieve`` with the caller's filter; it never fails because embeddings failed:
an absent model, an erroring or slow endpoint, or no embedded points yet turn the answer lexical
and say why in ``notices``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from service.engine.analyzer import query_terms
from service.engine.embeddings import Embedder
from service.engine.records import RecordIndex
from service.engine.store import DenseQuery, Filter, Hit, Store, StoreError, TextQuery
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


LEXICAL_ONLY = "lexical results only"


async def embed_query_or_notice(embedder: Embedder | None, query: str, notices: list[str], *, wait_for_load: bool = True) -> list[float] | None:
    """The query vector, or None with a notice saying why search is lexical (the one wording every
    surface uses). ``wait_for_load=False``: a model still loading is not waited for."""
    if embedder is not None and not wait_for_load and embedder.state == "loading":
        notices.append(f"the embedding model is still loading; {LEXICAL_ONLY}")
        return None
    vectors = await embed_queries_or_notice(embedder, [query], notices)
    return vectors[0] if vectors is not None else None


async def embed_queries_or_notice(embedder: Embedder | None, queries: Sequence[str], notices: list[str]) -> list[list[float]] | None:
    """Several queries' vectors in one batch (a request and its intents), or None with a notice."""
    if embedder is None:
        notices.append(f"embeddings are not configured; {LEXICAL_ONLY}")
        return None
    try:
        return await embedder.embed_queries(queries)
    except EmbeddingUnavailable as exc:
        notices.append(f"embeddings unavailable ({exc}); {LEXICAL_ONLY}")
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


@dataclass
class Candidates:
    """The dense and BM25 candidates of one query, the vector they were found with (None: lexical)
    and the notices saying why the dense channel was left out."""

    dense: list[Hit]
    text: list[Hit]
    vector: list[float] | None
    query_terms: str
    notices: list[str] = field(default_factory=list)


async def dense_and_text(
    records: RecordIndex,
    query: str,
    filter: Filter,
    *,
    embedder: Embedder | None,
    dense: bool = True,
    text: bool = True,
    limit: int = DEFAULT_PREFETCH,
    vector: list[float] | None = None,
    terms: str | None = None,
    fields: tuple[str, ...] | None = None,
) -> Candidates:
    """The query vector (``vector``, else embedded, else a notice), then the top ``limit`` dense and
    BM25 candidates under ``filter``; the surface fuses them. ``dense``/``text`` pick the channels;
    without a vector (no model, the model failed, the collection has no vector yet) the BM25
    candidates are fetched whatever ``text`` says, so the answer falls back to lexical. ``fields``:
    the payload fields each hit carries (None: all of them)."""
    terms = query_terms(query) if terms is None else terms
    notices: list[str] = []
    dense_hits: list[Hit] = []
    if dense:
        if vector is None:
            vector = await embed_query_or_notice(embedder, query, notices)
        if vector is not None and embedder is not None:
            try:
                if text:  # both channels in one store call
                    dense_hits, text_hits = await records.search_batch(
                        [DenseQuery(embedder.vector_name, vector, filter, limit, fields), TextQuery(terms, filter, limit, fields)]
                    )
                    return Candidates(dense_hits, text_hits, vector, terms, notices)
                (dense_hits,) = await records.search_batch([DenseQuery(embedder.vector_name, vector, filter, limit, fields)])
            except StoreError as exc:
                dense_unavailable(exc, notices)
                vector = None
    text_hits = []
    if text or vector is None:
        (text_hits,) = await records.search_batch([TextQuery(terms, filter, limit, fields)])
    return Candidates(dense_hits, text_hits, vector, terms, notices)


def dense_unavailable(exc: StoreError, notices: list[str]) -> None:
    """A collection whose first embeddings have not landed has no vector yet: say so, answer lexically."""
    log.info("dense search unavailable", extra={"error": str(exc)})
    notices.append(f"semantic results are not ready yet (embedding in progress); {LEXICAL_ONLY}")
