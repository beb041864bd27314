"""Auto-surfaced long-term memories for ranked queries: the caller's own, not archived, clearly relevant.

A memory surfaces when the model finds it close (cosine at least ``MEMORY_COSINE``) or when most of
the query's terms appear in it; archived or very weak matches never do. On a store that remembers
counts, a caller with no memories costs a count, not a search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.auth import Caller
from service.catalog.keys import Kind
from service.catalog.markdown import collapse_whitespace
from service.catalog.ranking import why_matched
from service.catalog.state import catalog_index
from service.catalog.waiting import user_tenants
from service.engine.store import DenseQuery, Filter, Hit, Match, MatchAny, StoreError, TextQuery

if TYPE_CHECKING:
    from service.engine.runtime import Engine

MAX_MEMORIES = 3
MEMORY_COSINE = 0.5
MEMORY_TERM_SHARE = 0.6
SUMMARY_CHARS = 160


async def find_memories(engine: Engine, caller: Caller, q_terms: str, vector: list[float] | None) -> list[dict[str, Any]]:
    """Up to ``MAX_MEMORIES`` one-liners: ``{id, summary, whyMatched, score}``."""
    flt = Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.MEMORY.value)), must_not=(Match("archived", True),))
    terms = q_terms.split()
    found: dict[str, dict[str, Any]] = {}
    index = catalog_index(engine)
    if index.counts_remembered and not await index.count(flt):
        # Most callers keep no memories: where the store remembers counts until its next write, the
        # count is far cheaper than the two searches (whose BM25 half scores the query terms over every
        # record); a remote store would pay a round trip for it, so there the searches alone run.
        return []
    embedder = engine.embedders.default
    text_hits: list[Hit] | None = None
    if vector is not None and embedder is not None:
        try:  # both channels in one store call
            hits, text_hits = await index.search_batch([DenseQuery(embedder.vector_name, vector, flt, MAX_MEMORIES), TextQuery(q_terms, flt, MAX_MEMORIES)])
        except StoreError:
            hits = []
        for hit in hits:
            if hit.score >= MEMORY_COSINE:
                found[str(hit.payload["key"])] = _one_liner(hit.payload, terms, hit.score)
    if terms:
        if text_hits is None:
            text_hits = await index.search_text(q_terms, flt, limit=MAX_MEMORIES)
        for hit in text_hits:
            matched = why_matched(terms, hit.payload)
            if len(matched) / len(terms) >= MEMORY_TERM_SHARE:
                found.setdefault(str(hit.payload["key"]), _one_liner(hit.payload, terms, None))
    ordered = sorted(found.values(), key=lambda m: -(m["score"] or 0.0))
    return ordered[:MAX_MEMORIES]


def _one_liner(payload: Any, terms: list[str], score: float | None) -> dict[str, Any]:
    return {
        "id": payload.get("entity_id"),
        "summary": collapse_whitespace(str(payload.get("text", "")), SUMMARY_CHARS),
        "whyMatched": list(why_matched(terms, payload)),
        "score": round(score, 4) if score is not None else None,
    }
