"""Ranked catalog retrieval: dense and BM25 candidates, score fusion, and the catalog's own arrangement.

Fusion. The store answers a dense top-K (cosine) and a BM25 top-K over the same tenant filter; we
fuse them as ``cosine + LEXICAL_WEIGHT * bm25 / max_bm25``. Rank fusion (RRF, the store's
``search_hybrid``) lost to dense alone on the MetaTool set (nDCG@10 0.627 vs 0.674 with k=60 on
1,000 queries) because it gives BM25's noisy tail the same say as the model; a score blend keeps
the model's order and lets lexical evidence break near-ties. The weight was picked on one 1,000
query sample (seed 7, first half) and confirmed on a held-out one (seed 7, queries 1,001-2,000):
dense 0.698, blend 0.05/0.1/0.15/0.2/0.3 -> 0.714/0.720/0.712/0.701/0.679; ``bench/bench_catalog.py``
reports it on another sample. Without embeddings the same code ranks by BM25 alone, with a notice
(``service.engine.search.dense_and_text`` fetches both channels and says why one is missing).

Arrangement, after fusion: an exact-identity bonus (the query is an entity's name), package exports
as their own hits only on a strong match (else a "best action" hint on the package card, or
nothing; a high-confidence export goes ahead of its own package card), and MCP tools kept out of
unscoped results (they are only searched with a domain scope).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from service.catalog.hierarchy import apply_parent_evidence, apply_parent_evidence_batch
from service.catalog.keys import Kind
from service.catalog.state import catalog_index
from service.engine.analyzer import spoken
from service.engine.explain import note
from service.engine.intents import split_intents, task_terms
from service.engine.search import dense_and_text, embed_queries_or_notice
from service.engine.store import DenseQuery, Filter, Hit, StoreError, TextQuery

if TYPE_CHECKING:
    from service.engine.embeddings import Embedder
    from service.engine.records import RecordIndex
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# BM25's weight in the blend, by how much of the query the best lexical hits hold (``lexical_weight``).
LEXICAL_WEIGHT_MIN = 0.05
LEXICAL_WEIGHT_MAX = 0.3
PREFETCH = 50
# The payload fields ranking reads (fusion, identity, exports, parents, pairing, hints): the
# candidates are retrieved with these alone, and the hits shown are read whole afterwards
# (``ranked.ranked_hits``), so a search does not carry every candidate's texts and schemas.
RANK_FIELDS = (
    "key",
    "kind",
    "entity",
    "entity_id",
    "tenant",
    "scope",
    "hidden",
    "terms",
    "identity_terms",
    "name_leaf",
    "name",
    "title",
    "tool",
    "server",
    "domain",
    "package_id",
    "callables",
    "subpath",
    "summary",
)
# Cosine under which MiniLM pairs are unrelated text; such hits count only with a lexical match.
DENSE_FLOOR = 0.25
# Dense-only hits must come within this much of the query's best cosine.
DENSE_MARGIN = 0.3
IDENTITY_BONUS = 0.5
# Export strength: share of the query's terms found in the export's subpath, callable names and purpose.
STRONG_EXPORT_COVERAGE = 0.6
MEDIUM_EXPORT_COVERAGE = 0.25
STRONG_EXPORT_COSINE = 0.6
MEDIUM_EXPORT_COSINE = 0.4
CONTRACT_COVERAGE = 0.75
CONTRACT_COSINE = 0.65
MAX_EXPORT_HITS_PER_PACKAGE = 2
MAX_BEST_ACTIONS = 2

# Lexical hits whose query-term coverage sets the blend's lexical weight.
COVERAGE_HITS = 3
# Hits within this of an intent's best are said to answer it (``whyMatched``).
INTENT_MARGIN = 0.05
INTENT_SHOWN = 80
MODES = ("hybrid", "lexical", "dense")
_NON_ALNUM = re.compile(r"[^0-9a-z]+")


@dataclass
class Scored:
    """One candidate with its channel scores and what the arrangement attached to it."""

    payload: Mapping[str, Any]
    dense: float | None
    lexical: float
    score: float
    why: tuple[str, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.payload.get("kind"))

    @property
    def entity(self) -> str:
        return str(self.payload.get("entity"))

    def identity_terms(self) -> tuple[str, ...]:
        """Names that identify the entity: id, name leaf, title (lowercase)."""
        names = {str(self.payload.get(k) or "").lower() for k in ("entity_id", "name_leaf", "name", "title", "tool")}
        names.update(str(c).lower() for c in self.payload.get("callables") or [])
        return tuple(sorted(n for n in names if n))


@dataclass
class Retrieval:
    hits: list[Scored]
    mode: str
    notices: list[str]
    vector: list[float] | None
    query_terms: str
    intents: list[str] = field(default_factory=list)


def why_matched(q_terms: Sequence[str], payload: Mapping[str, Any]) -> tuple[str, ...]:
    doc_terms = set(str(payload.get("terms", "")).split())
    return tuple(term for term in q_terms if term in doc_terms)


def evidence(hit: Scored) -> tuple[str, ...]:
    """What beyond its own words placed a hit: the request's intents it answers, and its parent's match."""
    lines = [f"intent: {text[:INTENT_SHOWN]}" for text in dict.fromkeys(hit.extras.get("intents") or ())]
    parent = hit.extras.get("parent")
    if parent:
        lines.append(f"parent {parent['entity']} matches the query ({parent['cosine']:.2f})")
    return tuple(lines)


def score_from(hit: Scored) -> dict[str, Any]:
    """The parts of a ranked hit's score (the card's ``scoreFrom``)."""
    out: dict[str, Any] = {"cosine": None if hit.dense is None else round(hit.dense, 4), "lexical": round(hit.lexical, 4)}
    if hit.extras.get("parent"):
        out["parent"] = hit.extras["parent"]
    if hit.extras.get("intents"):
        out["intents"] = list(dict.fromkeys(hit.extras["intents"]))
    return out


async def retrieve(
    engine: Engine,
    query: str,
    flt: Filter,
    *,
    mode: str = "hybrid",
    prefetch: int = PREFETCH,
    vector: list[float] | None = None,
    fields: tuple[str, ...] | None = None,
) -> Retrieval:
    """Dense and BM25 candidates under ``flt``, fused; ``mode`` restricts the channels (bench, fallback);
    ``fields``: the payload fields each candidate carries (None: all of them).

    In hybrid mode a request of several intents (``split_intents``) is retrieved for the whole and for
    each intent, the vectors embedded in one batch, and the lists combined (``combine_intents``)."""
    index = catalog_index(engine)
    embedder = engine.embedders.default
    intents = split_intents(query) if mode == "hybrid" and vector is None else [query]
    notices: list[str] = []
    if len(intents) > 1:
        intent_vectors = await embed_queries_or_notice(embedder, [spoken(intent) for intent in intents], notices)
        if intent_vectors is None:
            mode = "lexical"  # the notice says why; the one-list path must not wait on the model again
        elif embedder is not None:
            found = await _retrieve_intents(index, embedder, query, intents, intent_vectors, flt, prefetch, fields)
            if found is not None:
                return found
    found_one = await dense_and_text(
        index,
        spoken(query),  # names read as words, as the records' names are embedded
        flt,
        embedder=embedder,
        dense=mode in ("hybrid", "dense"),
        text=mode in ("hybrid", "lexical"),
        limit=prefetch,
        vector=vector,
        terms=task_terms(query),
        fields=fields,
    )
    used = mode if found_one.vector is not None or mode == "lexical" else "lexical"
    fused = fuse(found_one.dense, found_one.text, found_one.query_terms.split())
    if used == "hybrid" and found_one.vector is not None and embedder is not None:
        fused = await apply_parent_evidence(index, embedder, found_one.vector, fused)
    return Retrieval(fused, used, [*notices, *found_one.notices], found_one.vector, found_one.query_terms)


async def _retrieve_intents(
    index: RecordIndex,
    embedder: Embedder,
    query: str,
    intents: list[str],
    intent_vectors: list[list[float]],
    flt: Filter,
    prefetch: int,
    fields: tuple[str, ...] | None,
) -> Retrieval | None:
    """The whole request and each intent retrieved and fused, then combined; None when the dense
    channel is not ready (the caller answers with one list)."""
    # The whole request's vector is the mean of its intents' (its own would cost one more, long encode).
    vectors = [mean_vector(intent_vectors), *intent_vectors]
    terms = [task_terms(text) for text in [query, *intents]]
    # Every list's dense and BM25 candidates in one store call.
    queries = [
        q for v, t in zip(vectors, terms, strict=True) for q in (DenseQuery(embedder.vector_name, v, flt, prefetch, fields), TextQuery(t, flt, prefetch, fields))
    ]
    try:
        found = await index.search_batch(queries)
    except StoreError as exc:
        log.info("dense search unavailable", extra={"error": str(exc)})
        return None
    lists = [relevant_hits(fuse(found[2 * i], found[2 * i + 1], t.split())) for i, t in enumerate(terms)]
    lists = await apply_parent_evidence_batch(index, embedder, list(zip(vectors, lists, strict=True)))
    hits = combine_intents(lists[0], list(zip(intents, lists[1:], strict=True)))
    return Retrieval(hits, "hybrid", [], vectors[0], terms[0], intents)


def mean_vector(vectors: Sequence[Sequence[float]]) -> list[float]:
    """The unit-length mean of unit vectors."""
    total = np.sum(np.asarray(vectors, dtype=np.float32), axis=0)
    norm = float(np.linalg.norm(total)) or 1.0
    return [float(x) for x in total / norm]


def combine_intents(whole: list[Scored], intents: Sequence[tuple[str, list[Scored]]]) -> list[Scored]:
    """One list from the whole request's hits and each intent's: every intent's best hits reach the top.

    Each intent's scores are shifted so its best hit scores what the whole request's best does, and a
    candidate keeps its highest score over the lists (the whole's included); so the top of the
    combined list holds each intent's best answer, in the order of how strongly each was matched,
    instead of only the strongest intent's. ``extras["intents"]`` names the intents a hit answers.
    """
    top = whole[0].score if whole else max((h[0].score for _, h in intents if h), default=0.0)
    best: dict[str, Scored] = {}
    for hit in whole:
        best[str(hit.payload.get("key"))] = hit
    for text, hits in intents:
        if not hits:
            continue
        shift = top - hits[0].score
        for hit in hits:
            key = str(hit.payload.get("key"))
            shifted = hit.score + shift
            current = best.get(key)
            if current is None or shifted > current.score:
                replacement = Scored(hit.payload, hit.dense, hit.lexical, shifted, hit.why, {**(current.extras if current else {}), **hit.extras})
                best[key] = replacement
                current = replacement
            if hit.score >= hits[0].score - INTENT_MARGIN:
                current.extras.setdefault("intents", []).append(text)
    combined = sorted(best.values(), key=lambda s: -s.score)
    return combined


def fuse(dense_hits: Sequence[Hit], text_hits: Sequence[Hit], q_terms: Sequence[str] = ()) -> list[Scored]:
    """Blend cosine and normalized BM25 with the query's lexical weight (see module doc). ``why`` is
    filled later, for shown hits only."""
    dense = {h.id: h for h in dense_hits}
    lexical = {h.id: h for h in text_hits}
    top_bm25 = max((h.score for h in text_hits), default=0.0) or 1.0
    dense_floor = min((h.score for h in dense_hits), default=0.0)
    weight = lexical_weight(dense_hits, text_hits, q_terms)
    scored: list[Scored] = []
    for point_id in dict.fromkeys([*dense, *lexical]):
        hit = dense.get(point_id) or lexical[point_id]
        cosine = dense[point_id].score if point_id in dense else None
        bm25 = lexical[point_id].score / top_bm25 if point_id in lexical else 0.0
        score = (cosine if cosine is not None else dense_floor) + weight * bm25 if dense_hits else bm25
        scored.append(Scored(hit.payload, cosine, bm25, score))
    scored.sort(key=lambda s: -s.score)
    return scored


def lexical_weight(dense_hits: Sequence[Hit], text_hits: Sequence[Hit], q_terms: Sequence[str]) -> float:
    """How much BM25 may move the model's order for this query: the share of the query's terms the
    best lexical hit holds (a hit that explains the whole query is strong evidence; one rare word
    matched out of ten is not)."""
    if not text_hits or not q_terms:
        return LEXICAL_WEIGHT_MIN
    wanted = set(q_terms)
    coverage = max(len(wanted & set(str(h.payload.get("terms", "")).split())) / len(wanted) for h in text_hits[:COVERAGE_HITS])
    return LEXICAL_WEIGHT_MIN + (LEXICAL_WEIGHT_MAX - LEXICAL_WEIGHT_MIN) * coverage


def relevant_hits(candidates: Sequence[Scored]) -> list[Scored]:
    """Lexical matches, and dense-only matches near the best cosine (and above the noise floor).

    The dense channel always returns K neighbours, related or not; a dense-only hit far below the
    query's best cosine is a neighbour, not a match, and would only pad the list.
    """
    best = max((c.dense for c in candidates if c.dense is not None), default=0.0)
    floor = max(DENSE_FLOOR, best - DENSE_MARGIN)
    kept = []
    for c in candidates:
        # A hit an intent found keeps the floor of that intent's own list (its best cosine, not the request's).
        own_floor = c.extras.setdefault("denseFloor", floor)
        if c.lexical > 0 or (c.dense is not None and c.dense >= own_floor):
            kept.append(c)
    return kept


def _squash(name: str) -> str:
    """``Home-Controls`` and ``home controls`` -> ``homecontrols``: names compared without case or separators."""
    return _NON_ALNUM.sub("", name.lower())


def apply_identity_bonus(candidates: list[Scored], query: str) -> None:
    """Lift candidates the query names exactly (``dropbox`` -> package ``dropbox``), then re-sort."""
    wanted = _squash(query)
    if wanted:
        for candidate in candidates:
            if wanted in {_squash(name) for name in candidate.identity_terms()}:
                candidate.score += IDENTITY_BONUS
                candidate.extras["identity"] = True
                note(candidate.entity, {"identity": IDENTITY_BONUS})
    candidates.sort(key=lambda s: -s.score)


# ---- exports ---------------------------------------------------------------------------------------


def export_coverage(candidate: Scored, q_terms: Sequence[str]) -> float:
    if not q_terms:
        return 0.0
    identity = set(str(candidate.payload.get("identity_terms", "")).split())
    return sum(1 for t in q_terms if t in identity) / len(q_terms)


def export_strength(candidate: Scored, q_terms: Sequence[str]) -> str:
    """``strong`` (own hit), ``medium`` (hint on the package card) or ``weak`` (dropped)."""
    coverage = export_coverage(candidate, q_terms)
    cosine = candidate.dense or 0.0
    if candidate.extras.get("identity") or coverage >= STRONG_EXPORT_COVERAGE or cosine >= STRONG_EXPORT_COSINE:
        return "strong"
    if coverage >= MEDIUM_EXPORT_COVERAGE or cosine >= MEDIUM_EXPORT_COSINE:
        return "medium"
    return "weak"


def arrange_exports(candidates: list[Scored], q_terms: Sequence[str], package_cards: Mapping[str, Mapping[str, Any]]) -> list[Scored]:
    """Keep strong exports as hits (at most two per package), fold medium ones into their package card.

    ``package_cards`` maps package id to the package's payload, so a medium export whose package did
    not rank by itself brings its package card in, at the export's position.
    """
    out: list[Scored] = []
    by_package: dict[str, Scored] = {}
    export_hits: dict[str, int] = {}
    pending_hints: dict[str, list[Scored]] = {}
    for candidate in candidates:
        if candidate.kind == Kind.PACKAGE.value:
            package_id = str(candidate.payload.get("package_id"))
            if package_id in by_package:
                continue
            by_package[package_id] = candidate
            candidate.extras.setdefault("bestActions", [])
            for hint in pending_hints.pop(package_id, []):
                _add_hint(candidate, hint)
            out.append(candidate)
            continue
        if candidate.kind != Kind.EXPORT.value:
            out.append(candidate)
            continue
        package_id = str(candidate.payload.get("package_id"))
        strength = export_strength(candidate, q_terms)
        coverage = export_coverage(candidate, q_terms)
        candidate.extras["strength"] = strength
        if strength == "strong" and export_hits.get(package_id, 0) < MAX_EXPORT_HITS_PER_PACKAGE:
            export_hits[package_id] = export_hits.get(package_id, 0) + 1
            if coverage >= CONTRACT_COVERAGE or (candidate.dense or 0.0) >= CONTRACT_COSINE or candidate.extras.get("identity"):
                candidate.extras["highConfidence"] = True
            out.append(candidate)
        elif strength != "weak":
            parent = by_package.get(package_id)
            if parent is not None:
                _add_hint(parent, candidate)
            elif package_id in package_cards:
                card = Scored(package_cards[package_id], None, 0.0, candidate.score, candidate.why, {"bestActions": []})
                _add_hint(card, candidate)
                by_package[package_id] = card
                out.append(card)
            else:
                pending_hints.setdefault(package_id, []).append(candidate)
    return _exports_before_parents(out)


def _exports_before_parents(hits: list[Scored]) -> list[Scored]:
    """Move each high-confidence export hit just ahead of its own package card when the card ranked higher.

    A package card's text repeats its exports' subpaths and purposes, so a query aimed at one export
    also matches the card, on evidence borrowed from that export: the export is the better answer.
    """
    out = list(hits)
    for hit in hits:
        if hit.kind != Kind.EXPORT.value or not hit.extras.get("highConfidence"):
            continue
        package_id = str(hit.payload.get("package_id"))
        parent = next((i for i, h in enumerate(out) if h.kind == Kind.PACKAGE.value and str(h.payload.get("package_id")) == package_id), None)
        position = out.index(hit)
        if parent is not None and parent < position:
            out.insert(parent, out.pop(position))
    return out


def _add_hint(card: Scored, export: Scored) -> None:
    hints = card.extras.setdefault("bestActions", [])
    if len(hints) < MAX_BEST_ACTIONS:
        hints.append({"entity": export.entity, "subpath": export.payload.get("subpath"), "purpose": export.payload.get("summary") or ""})
