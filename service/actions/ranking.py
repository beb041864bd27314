"""Ranking (service, action) pairs for a query: keyword + Jaro-Winkler blended with embedding cosine,
weighted per query by how far each signal can be trusted.

The formula, for each visible pair (instance or catalog row ``u``, action ``a``)::

    score    = w * keyword + (1 - w) * cosine + connected_bonus + risk_bonus   (embeddings available)
    score    = keyword + connected_bonus + risk_bonus                          (embeddings skipped)

    w        = clip(0.75 + 0.3 * (best_coverage - 0.8) - 1.0 * (cosine_gap - 0.12)
                    - 0.05 * max(0, n - 4), 0.15, 0.9)                        (one weight per query)
               best_coverage: the highest ``coverage`` of any candidate: how much of the query the
               keyword side can explain at all (1 when one action holds every query word; 0 for a
               paraphrase sharing no word with any action, which the embedding then decides alone).
               cosine_gap: the best cosine minus the mean of the next 9 dense hits: how decisively
               the embedding picks one action (0 with fewer than 2 hits).
               n: the query's words without stopwords; a long request is worded like a description,
               which the model reads better than word matches do.

    keyword  = 0.5 * coverage + 0.2 * whole_name + 0.3 * own_share
    coverage = mean over the query's words w of
               max(name(w), 0.7 * description(w), 0.9 * service(w), 0.5 * context(w))
               name(w): best similarity of w to a word of the action's name; description(w): of its
               description; service(w): of the instance name, the template key or display name;
               context(w): of the service's description or categories.
               Word similarity: 1 for the same word, 0.95 for its plural or singular, else the
               Jaro-Winkler similarity when it is >= 0.85 and w has 4+ letters, else 0.
    whole_name = (JW - 0.85) / 0.15 clipped to [0, 1], JW = Jaro-Winkler(query words joined,
               action-name words joined): 1 for the exact name, ~0.8 for a one-letter typo, 0 for
               names that only share a prefix such as "get "
    own_share = max over the action's name and its description of min(1, the summed similarities
               of the query words matching it / its distinct words without stopwords): of two
               actions holding the query's words, the one with fewer other words ranks first
    cosine   = cosine similarity of the query's and the action's embeddings, clipped at 0
    connected_bonus = 0.05 when the instance is connected (callable right now)
    risk_bonus      = 0.02 read, 0.01 write, 0 delete (a small nudge toward read-safer actions)

So an exact action name (``list_repos``) gets keyword 1 while ``list_repos_for_org``, holding the
same words, gets ~0.8; a typo (``lsit_repos``) still gets ~0.9 through Jaro-Winkler; a paraphrase
sharing no word with the action ("what's the temperature outside" for ``current_weather``) is found
by the embeddings alone. The constants were tuned on one half of the benchmark's known-item queries
(``bench.bench_actions --half tune``) and are reported on the other half.

``RankingMode.LEXICAL`` ranks by ``keyword`` alone and ``RankingMode.DENSE`` by ``cosine`` alone,
without bonuses: the bare channels an evaluation compares the served ranking with.

Which pairs get the full formula: ``coverage`` is computed for every visible pair (vectorized over
the catalog's postings, ~2-3 ms a query word even for all 124,730 actions). The pool scored in full
is the top ``KEYWORD_POOL`` pairs by coverage plus the pairs of the dense top-K (Qdrant, filtered
to the visible templates, K = 2 x limit within [50, 200]). A pool pair outside the dense top-K
gets its exact cosine from its stored vector when its best possible score (its cosine cannot
exceed the K-th hit's) could still place it in the first ``limit``; so no pair that matters is
blended with a signal it lacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import JaroWinkler

from service.actions.index import ActionIndex, query_words, word_similarity, words
from service.actions.model import SURFACE_NAME, RankingMode, action_key
from service.actions.visibility import Unit
from service.auth import GLOBAL_TENANT
from service.engine import explain
from service.engine.search import LEXICAL_ONLY, embed_query_or_notice
from service.engine.store import DenseQuery, Filter, Hit, Match, MatchAny, StoreError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

KEYWORD_WEIGHT_BASE = 0.75
COVERAGE_TRUST = 0.3
COVERAGE_PIVOT = 0.8
GAP_TRUST = 1.0
GAP_PIVOT = 0.12
GAP_HITS = 10
LENGTH_STEP = 0.05
LENGTH_PIVOT = 4
KEYWORD_WEIGHT_MIN = 0.15
KEYWORD_WEIGHT_MAX = 0.9
COVERAGE_SHARE = 0.5
WHOLE_NAME_SHARE = 0.2
OWN_SHARE = 0.3
DESCRIPTION_WEIGHT = 0.7
SERVICE_WEIGHT = 0.9
CONTEXT_WEIGHT = 0.5
WHOLE_NAME_FLOOR = 0.85
CONNECTED_BONUS = 0.05
RISK_BONUS = (0.02, 0.01, 0.0)  # by risk code: read, write, delete
KEYWORD_POOL = 200
DENSE_TOP_K_MIN = 50
DENSE_TOP_K_MAX = 200


def dense_top_k(limit: int) -> int:
    """Dense candidates to fetch: twice the page, at least 50, at most 200 (each hit costs a payload read)."""
    return min(DENSE_TOP_K_MAX, max(DENSE_TOP_K_MIN, 2 * limit))


DENSE_EMPTY = "the dense ranking has no results"


@dataclass(frozen=True)
class Weights:
    """How one query's scores blend the two signals (they sum to 1)."""

    keyword: float
    embedding: float

    def as_dict(self) -> dict[str, float]:
        return {"keyword": round(self.keyword, 4), "embedding": round(self.embedding, 4)}


def fusion_weights(best_coverage: float, cosine_gap: float, query_words: int) -> Weights:
    """The keyword weight ``w`` of the module docstring, from the query's trust in each signal."""
    weight = (
        KEYWORD_WEIGHT_BASE
        + COVERAGE_TRUST * (best_coverage - COVERAGE_PIVOT)
        - GAP_TRUST * (cosine_gap - GAP_PIVOT)
        - LENGTH_STEP * max(0, query_words - LENGTH_PIVOT)
    )
    weight = min(KEYWORD_WEIGHT_MAX, max(KEYWORD_WEIGHT_MIN, weight))
    return Weights(keyword=weight, embedding=1.0 - weight)


@dataclass(frozen=True)
class Ranked:
    unit: Unit
    action_idx: int
    score: float


@dataclass
class Ranking:
    rows: list[Ranked]
    notices: list[str]
    candidates: int
    """Visible (service, action) pairs scored."""
    signals: tuple[str, ...]
    weights: Weights | None = None
    """The served blend's weights; None when one signal ranks alone."""
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CandidatePairs:
    """Every candidate pair as parallel arrays: which unit, which action (global index)."""

    unit: np.ndarray
    action: np.ndarray
    unit_template: np.ndarray

    @classmethod
    def of(cls, index: ActionIndex, units: Sequence[Unit]) -> CandidatePairs:
        unit_template = np.fromiter((u.template_idx for u in units), dtype=np.int64, count=len(units))
        starts = index.starts[unit_template]
        counts = index.starts[unit_template + 1] - starts
        offsets = np.cumsum(counts) - counts
        total = int(counts.sum())
        action = np.arange(total, dtype=np.int64) - np.repeat(offsets, counts) + np.repeat(starts, counts)
        unit = np.repeat(np.arange(len(units), dtype=np.int64), counts)
        return cls(unit=unit, action=action, unit_template=unit_template)


async def rank(
    engine: Engine, index: ActionIndex, units: Sequence[Unit], query: str, limit: int, *, mode: RankingMode = RankingMode.SERVED
) -> Ranking:
    """The best ``limit`` pairs of ``units`` for ``query`` (non-empty), with notices about skipped signals.

    ``mode``: the served blend, or one channel alone (``lexical``, ``dense``) with no bonuses.
    """
    use_keyword = mode is not RankingMode.DENSE
    use_embedding = mode is not RankingMode.LEXICAL
    timings: dict[str, float] = {}
    started = time.perf_counter()
    pairs = CandidatePairs.of(index, units)
    qwords = query_words(query) if use_keyword else []
    evidence = keyword_evidence(index, units, pairs, qwords)
    timings["keyword"] = _ms(started)
    dense = await _dense_search(engine, index, pairs, query, dense_top_k(limit), timings, mode) if use_embedding else _Dense()
    started = time.perf_counter()
    notices = list(dense.notices)
    if use_keyword and not qwords:
        notices.append("the query has no words to match by keyword")
    pool = _pool(evidence.coverage, pairs, dense)
    keyword = _keyword(index, pairs, pool, evidence, qwords) if use_keyword else None
    served = mode is RankingMode.SERVED
    bonus = _bonuses(index, units, pairs, pool) if served else np.zeros(len(pool), dtype=np.float32)
    weights = None
    if dense.vector is not None and keyword is not None:
        best_coverage = float(evidence.coverage.max()) if len(evidence.coverage) else 0.0
        weights = fusion_weights(best_coverage, dense.gap(), len(qwords))
        await _fill_cosines(engine, index, pairs, pool, keyword, bonus, dense, weights, limit)
    ranked = _final(index, units, pairs, pool, keyword, bonus, dense, weights, limit)
    timings["blend"] = _ms(started)
    signals = tuple(name for name, used in (("keyword", use_keyword), ("embedding", dense.vector is not None)) if used)
    return Ranking(rows=ranked, notices=notices, candidates=len(pairs.action), signals=signals, weights=weights, timings_ms=timings)


@dataclass(frozen=True)
class KeywordEvidence:
    """Per candidate pair: the query-word ``coverage``, and what ``own_share`` (module docstring) derives from."""

    coverage: np.ndarray
    name_hits: np.ndarray
    """The summed similarities of the query words matching a word of the action's name."""
    text_hits: np.ndarray
    """The same for the action's description."""

    def own_share(self, index: ActionIndex, pairs: CandidatePairs, at: np.ndarray) -> np.ndarray:
        """``own_share`` of the pairs at positions ``at`` (only the pool needs it, not every pair)."""
        actions = pairs.action[at]
        name = np.minimum(1.0, self.name_hits[at] / index.name_size[actions])
        text = np.minimum(1.0, self.text_hits[at] / index.text_size[actions])
        return np.maximum(name, text)


def keyword_evidence(index: ActionIndex, units: Sequence[Unit], pairs: CandidatePairs, qwords: Sequence[str]) -> KeywordEvidence:
    """Per pair, the mean over query words of its best name / description / service / context match,
    and the share of the action's own name or description words the query matched."""
    size = len(pairs.action)
    coverage = np.zeros(size, dtype=np.float32)
    name_hits = np.zeros(size, dtype=np.float32)
    text_hits = np.zeros(size, dtype=np.float32)
    if not qwords or not size:
        return KeywordEvidence(coverage=coverage, name_hits=name_hits, text_hits=text_hits)
    instance_words = [(u, words(unit.instance.name)) for u, unit in enumerate(units) if unit.instance is not None]
    for word in qwords:
        ids, sims = index.match(word)
        name = index.best_over(index.names, ids, sims, index.size)[pairs.action]
        text = index.best_over(index.texts, ids, sims, index.size)[pairs.action]
        service = index.best_over(index.services, ids, sims, len(index.blocks))[pairs.unit_template]
        context = index.best_over(index.contexts, ids, sims, len(index.blocks))[pairs.unit_template]
        for u, own_words in instance_words:
            service[u] = max(float(service[u]), word_similarity(word, own_words))
        unit_best = np.maximum(SERVICE_WEIGHT * service, CONTEXT_WEIGHT * context)
        best = np.maximum(name, DESCRIPTION_WEIGHT * text)
        np.maximum(best, unit_best[pairs.unit], out=best)
        coverage += best
        name_hits += name
        text_hits += text
    coverage /= len(qwords)
    return KeywordEvidence(coverage=coverage, name_hits=name_hits, text_hits=text_hits)


@dataclass
class _Dense:
    vector: list[float] | None = None
    vector_name: str | None = None
    cosines: dict[int, float] = field(default_factory=dict)
    """Global action index -> cosine, for the dense top-K (and, later, the pool)."""
    complete: bool = False
    """Fewer hits than asked: every embedded candidate is among them, the rest have no vector."""
    floor: float = 0.0
    """The lowest cosine of the top-K: no action outside it scores higher."""
    notices: list[str] = field(default_factory=list)

    def gap(self) -> float:
        """The best cosine minus the mean of the next ``GAP_HITS - 1`` (0 with fewer than two hits)."""
        best = sorted(self.cosines.values(), reverse=True)[:GAP_HITS]
        if len(best) < 2:
            return 0.0
        return best[0] - sum(best[1:]) / (len(best) - 1)


async def _dense_search(
    engine: Engine, index: ActionIndex, pairs: CandidatePairs, query: str, top_k: int, timings: dict[str, float], mode: RankingMode
) -> _Dense:
    dense = _Dense()
    embedder = engine.embedders.default
    started = time.perf_counter()
    # A model still loading is not waited for: that would hold the request for the seconds a load takes.
    vector = await embed_query_or_notice(embedder, query, dense.notices, wait_for_load=False)
    if mode is RankingMode.DENSE:
        dense.notices = [notice.replace(LEXICAL_ONLY, DENSE_EMPTY) for notice in dense.notices]
    if vector is None or embedder is None:
        return dense
    timings["embed"] = _ms(started)
    started = time.perf_counter()
    positions = np.unique(pairs.unit_template)
    try:
        hits = await _nearest(engine, embedder.vector_name, vector, _template_filter(index, positions), top_k)
    except StoreError as exc:
        log.info("dense action search skipped", extra={"error": str(exc)})
        dense.notices.append(f"no action embeddings are available yet; {DENSE_EMPTY if mode is RankingMode.DENSE else LEXICAL_ONLY}")
        return dense
    timings["dense"] = _ms(started)
    dense.vector, dense.vector_name = vector, embedder.vector_name
    for hit in hits:
        idx = index.locate(str(hit.payload.get("template")), str(hit.payload.get("action")))
        if idx is not None:
            dense.cosines[idx] = max(0.0, hit.score)
    dense.complete = len(hits) < top_k
    dense.floor = min(dense.cosines.values(), default=0.0)
    searched = int((index.starts[positions + 1] - index.starts[positions]).sum())
    if dense.complete and len(hits) < searched:
        fate = "the dense ranking leaves them out" if mode is RankingMode.DENSE else "they rank by keyword only"
        dense.notices.append(f"{searched - len(hits)} of the {searched} actions searched are not embedded yet; {fate}")
    if not hits:
        dense.vector = None
    return dense


def _template_filter(index: ActionIndex, positions: np.ndarray) -> Filter:
    """Global action records of the templates at ``positions``: listed when few, else everything but the rest."""
    base = Filter(must=(Match("tenant", GLOBAL_TENANT),))
    if len(positions) * 2 <= len(index.blocks):
        return base.and_(MatchAny("template", tuple(index.blocks[p].key for p in positions.tolist())))
    others = np.setdiff1d(np.arange(len(index.blocks)), positions, assume_unique=True)
    if not len(others):
        return base
    return Filter(must=base.must, must_not=(MatchAny("template", tuple(index.blocks[p].key for p in others.tolist())),))


def _pool(coverage: np.ndarray, pairs: CandidatePairs, dense: _Dense) -> np.ndarray:
    """The top pairs by coverage plus every pair of a dense top-K action."""
    matched = np.flatnonzero(coverage > 0)
    if len(matched) > KEYWORD_POOL:
        top = np.argpartition(-coverage[matched], KEYWORD_POOL)[:KEYWORD_POOL]
        matched = matched[top]
    if dense.cosines:
        hit_actions = np.fromiter(dense.cosines.keys(), dtype=np.int64, count=len(dense.cosines))
        matched = np.union1d(matched, np.flatnonzero(np.isin(pairs.action, hit_actions)))
    return matched


def _keyword(index: ActionIndex, pairs: CandidatePairs, pool: np.ndarray, evidence: KeywordEvidence, qwords: Sequence[str]) -> np.ndarray:
    """Keyword score of the pool: coverage, the whole-name Jaro-Winkler similarity and the action's own share."""
    keyword = COVERAGE_SHARE * evidence.coverage[pool] + OWN_SHARE * evidence.own_share(index, pairs, pool)
    if qwords and len(pool):
        joined = " ".join(qwords)
        names = [index.name_norm[a] for a in pairs.action[pool].tolist()]
        similarity = process.cdist([joined], names, scorer=JaroWinkler.normalized_similarity, dtype=np.float32)[0]
        # Rescaled so a shared "get " prefix (Jaro-Winkler ~0.8) counts nothing and a typo (~0.97) most.
        whole = np.clip((similarity - WHOLE_NAME_FLOOR) / (1 - WHOLE_NAME_FLOOR), 0, 1)
        keyword = keyword + WHOLE_NAME_SHARE * whole
    return keyword


def _bonuses(index: ActionIndex, units: Sequence[Unit], pairs: CandidatePairs, pool: np.ndarray) -> np.ndarray:
    connected = np.fromiter((units[u].connected for u in pairs.unit[pool].tolist()), dtype=bool, count=len(pool))
    return CONNECTED_BONUS * connected + np.asarray(RISK_BONUS, dtype=np.float32)[index.risk_code[pairs.action[pool]]]


async def _fill_cosines(
    engine: Engine,
    index: ActionIndex,
    pairs: CandidatePairs,
    pool: np.ndarray,
    keyword: np.ndarray,
    bonus: np.ndarray,
    dense: _Dense,
    weights: Weights,
    limit: int,
) -> None:
    """Exact cosines for pool pairs outside the dense top-K that could still reach the first ``limit``.

    A pair outside the top-K has cosine <= ``dense.floor``, so its score is at most
    w * keyword + (1 - w) * floor + bonus; only pairs whose bound beats the ``limit``-th exact score
    of the others need their stored vector (usually none or a few, not the whole pool).
    """
    if dense.complete:
        return  # no vector exists outside the hits: cosine 0
    actions = pairs.action[pool]
    missing = np.fromiter((a not in dense.cosines for a in actions.tolist()), dtype=bool, count=len(pool))
    if not missing.any():
        return
    known = ~missing
    exact = weights.keyword * keyword[known] + weights.embedding * np.fromiter(
        (dense.cosines[a] for a in actions[known].tolist()), dtype=np.float32, count=int(known.sum())
    ) + bonus[known]
    threshold = float(np.partition(exact, len(exact) - limit)[len(exact) - limit]) if len(exact) >= limit else float("-inf")
    bound = weights.keyword * keyword[missing] + weights.embedding * dense.floor + bonus[missing]
    wanted = sorted(set(actions[missing][bound >= threshold].tolist()))
    if wanted:
        dense.cosines.update(await _stored_cosines(engine, index, wanted, dense))


# The payload fields a dense hit of the ranking is read for: which action it is.
_HIT_FIELDS = ("template", "action")


async def _nearest(engine: Engine, vector_name: str, vector: Sequence[float], flt: Filter, limit: int) -> list[Hit]:
    """``search_dense`` of the action records, each hit carrying only ``_HIT_FIELDS``."""
    found = await engine.records(SURFACE_NAME).search_batch([DenseQuery(vector_name, vector, flt, limit=limit, fields=_HIT_FIELDS)])
    return found[0]


async def _stored_cosines(engine: Engine, index: ActionIndex, actions: Sequence[int], dense: _Dense) -> dict[int, float]:
    """Exact cosines of actions outside the dense top-K: a dense search restricted to their record keys.

    The engine scores just those points (no vectors cross into Python) and skips any without a vector.
    """
    assert dense.vector is not None and dense.vector_name is not None
    keys = []
    for idx in actions:
        block, action = index.action_at(idx)
        keys.append(action_key(block.key, action.name))
    only = Filter(must=(Match("tenant", GLOBAL_TENANT), MatchAny("key", tuple(keys))))
    try:
        hits = await _nearest(engine, dense.vector_name, dense.vector, only, len(keys))
    except StoreError as exc:
        log.info("stored action vectors unavailable", extra={"error": str(exc)})
        return {}
    cosines = {}
    for hit in hits:
        position = index.locate(str(hit.payload.get("template")), str(hit.payload.get("action")))
        if position is not None:
            cosines[position] = max(0.0, hit.score)
    return cosines


def _final(
    index: ActionIndex,
    units: Sequence[Unit],
    pairs: CandidatePairs,
    pool: np.ndarray,
    keyword: np.ndarray | None,
    bonus: np.ndarray,
    dense: _Dense,
    weights: Weights | None,
    limit: int,
) -> list[Ranked]:
    """Blend (with ``weights`` when both signals are present, else the one present alone), add the bonuses, order, cut."""
    pool_actions = pairs.action[pool]
    pool_units = pairs.unit[pool]
    cosine = None
    if dense.vector is not None:
        cosine = np.fromiter((dense.cosines.get(a, 0.0) for a in pool_actions.tolist()), dtype=np.float32, count=len(pool_actions))
    if keyword is not None and cosine is not None and weights is not None:
        score = weights.keyword * keyword + weights.embedding * cosine
    elif cosine is not None:
        score = cosine
    else:
        score = (keyword if keyword is not None else np.zeros(len(pool), dtype=np.float32)).astype(np.float32)
    score = score + bonus
    # Only the best `limit` need ordering; ties break toward connected, read-safer, then by name.
    candidates = np.argsort(-score, kind="stable")[: max(limit * 4, limit + 50)].tolist()
    order = sorted(
        candidates,
        key=lambda i: (-round(float(score[i]), 6), not units[pool_units[i]].connected, int(index.risk_code[pool_actions[i]]), units[pool_units[i]].sort_name, int(pool_actions[i])),
    )
    chosen = order[:limit]
    if explain.current() is not None:
        _explain(index, units, pool_units, pool_actions, chosen, keyword, cosine, bonus, weights)
    return [Ranked(unit=units[int(pool_units[i])], action_idx=int(pool_actions[i]), score=float(score[i])) for i in chosen]


def _explain(
    index: ActionIndex,
    units: Sequence[Unit],
    pool_units: np.ndarray,
    pool_actions: np.ndarray,
    chosen: Sequence[int],
    keyword: np.ndarray | None,
    cosine: np.ndarray | None,
    bonus: np.ndarray,
    weights: Weights | None,
) -> None:
    """Each ranked pair's signals and bonuses, for an explained search (keyed ``template|service|action``)."""
    for i in chosen:
        unit = units[int(pool_units[i])]
        action = index.action_at(int(pool_actions[i]))[1]
        connected = CONNECTED_BONUS if unit.connected and float(bonus[i]) > 0 else 0.0
        explain.note(
            f"{unit.block.key}|{unit.instance.name if unit.instance is not None else ''}|{action.name}",
            {
                "keyword": None if keyword is None else round(float(keyword[i]), 4),
                "cosine": None if cosine is None else round(float(cosine[i]), 4),
                "blend": None if weights is None else weights.as_dict(),
                "connectedBonus": connected,
                "riskBonus": round(float(bonus[i]) - connected, 4),
            },
        )


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
