"""Ranking (service, action) pairs for a query: keyword + Jaro-Winkler blended with embedding cosine.

The formula, for each visible pair (instance or catalog row ``u``, action ``a``)::

    score    = 0.4 * keyword + 0.6 * cosine + connected_bonus + risk_bonus   (embeddings available)
    score    = keyword + connected_bonus + risk_bonus                        (embeddings skipped)

    keyword  = 0.6 * coverage + 0.4 * whole_name
    coverage = mean over the query's words w of max(name(w), 0.7 * description(w), 0.9 * service(w))
               name(w): best similarity of w to a word of the action's name; description(w): of its
               description; service(w): of the instance name, the template key or display name.
               Word similarity: 1 for the same word, 0.95 for its plural or singular, else the
               Jaro-Winkler similarity when it is >= 0.85 and w has 4+ letters, else 0.
    whole_name = (JW - 0.85) / 0.15 clipped to [0, 1], JW = Jaro-Winkler(query words joined,
               action-name words joined): 1 for the exact name, ~0.8 for a one-letter typo, 0 for
               names that only share a prefix such as "get "
    cosine   = cosine similarity of the query's and the action's embeddings, clipped at 0
    connected_bonus = 0.05 when the instance is connected (callable right now)
    risk_bonus      = 0.02 read, 0.01 write, 0 delete (a small nudge toward read-safer actions)

So an exact action name (``list_repos``) gets keyword 1 while ``list_repos_for_org``, holding the
same words, gets 0.76; a typo (``lsit_repos``) still gets 0.9 through Jaro-Winkler; a paraphrase
sharing no word with the action ("what's the temperature outside" for ``current_weather``) is found
by the embeddings alone.

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
from service.actions.model import SURFACE_NAME, action_key
from service.actions.visibility import Unit
from service.auth import GLOBAL_TENANT
from service.engine.search import LEXICAL_ONLY, embed_query_or_notice
from service.engine.store import Filter, Match, MatchAny, StoreError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

KEYWORD_WEIGHT = 0.4
EMBEDDING_WEIGHT = 0.6
COVERAGE_SHARE = 0.6
WHOLE_NAME_SHARE = 0.4
DESCRIPTION_WEIGHT = 0.7
SERVICE_WEIGHT = 0.9
WHOLE_NAME_FLOOR = 0.85
CONNECTED_BONUS = 0.05
RISK_BONUS = (0.02, 0.01, 0.0)  # by risk code: read, write, delete
KEYWORD_POOL = 200
DENSE_TOP_K_MIN = 50
DENSE_TOP_K_MAX = 200


def dense_top_k(limit: int) -> int:
    """Dense candidates to fetch: twice the page, at least 50, at most 200 (each hit costs a payload read)."""
    return min(DENSE_TOP_K_MAX, max(DENSE_TOP_K_MIN, 2 * limit))


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
    engine: Engine, index: ActionIndex, units: Sequence[Unit], query: str, limit: int, *, use_keyword: bool = True, use_embedding: bool = True
) -> Ranking:
    """The best ``limit`` pairs of ``units`` for ``query`` (non-empty), with notices about skipped signals.

    ``use_keyword`` / ``use_embedding`` switch a signal off (the benchmark's lexical-only and
    dense-only rows); the HTTP API always asks for both.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    pairs = CandidatePairs.of(index, units)
    qwords = query_words(query) if use_keyword else []
    coverage = keyword_coverage(index, units, pairs, qwords)
    timings["keyword"] = _ms(started)
    dense = await _dense_search(engine, index, pairs, query, dense_top_k(limit), timings) if use_embedding else _Dense()
    started = time.perf_counter()
    notices = list(dense.notices)
    if use_keyword and not qwords:
        notices.append("the query has no words to match by keyword")
    pool = _pool(coverage, pairs, dense)
    keyword = _keyword(index, pairs, pool, coverage, qwords) if use_keyword else None
    bonus = _bonuses(index, units, pairs, pool)
    if dense.vector is not None and keyword is not None:
        await _fill_cosines(engine, index, pairs, pool, keyword, bonus, dense, limit)
    ranked = _final(index, units, pairs, pool, keyword, bonus, dense, limit)
    timings["blend"] = _ms(started)
    signals = tuple(name for name, used in (("keyword", use_keyword), ("embedding", dense.vector is not None)) if used)
    return Ranking(rows=ranked, notices=notices, candidates=len(pairs.action), signals=signals, timings_ms=timings)


def keyword_coverage(index: ActionIndex, units: Sequence[Unit], pairs: CandidatePairs, qwords: Sequence[str]) -> np.ndarray:
    """Per pair, the mean over query words of its best name / description / service match."""
    coverage = np.zeros(len(pairs.action), dtype=np.float32)
    if not qwords or not len(pairs.action):
        return coverage
    instance_words = [(u, words(unit.instance.name)) for u, unit in enumerate(units) if unit.instance is not None]
    for word in qwords:
        ids, sims = index.match(word)
        name = index.best_over(index.names, ids, sims, index.size)
        text = index.best_over(index.texts, ids, sims, index.size)
        service = index.best_over(index.services, ids, sims, len(index.blocks))[pairs.unit_template]
        for u, own_words in instance_words:
            service[u] = max(float(service[u]), word_similarity(word, own_words))
        best = np.maximum(name[pairs.action], DESCRIPTION_WEIGHT * text[pairs.action])
        np.maximum(best, SERVICE_WEIGHT * service[pairs.unit], out=best)
        coverage += best
    coverage /= len(qwords)
    return coverage


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


async def _dense_search(engine: Engine, index: ActionIndex, pairs: CandidatePairs, query: str, top_k: int, timings: dict[str, float]) -> _Dense:
    dense = _Dense()
    embedder = engine.embedders.default
    started = time.perf_counter()
    # A model still loading is not waited for: that would hold the request for the seconds a load takes.
    vector = await embed_query_or_notice(embedder, query, dense.notices, wait_for_load=False)
    if vector is None or embedder is None:
        return dense
    timings["embed"] = _ms(started)
    started = time.perf_counter()
    positions = np.unique(pairs.unit_template)
    try:
        hits = await engine.records(SURFACE_NAME).search_dense(embedder.vector_name, vector, _template_filter(index, positions), limit=top_k)
    except StoreError as exc:
        log.info("dense action search skipped", extra={"error": str(exc)})
        dense.notices.append(f"no action embeddings are available yet; {LEXICAL_ONLY}")
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
        dense.notices.append(f"{searched - len(hits)} of the {searched} actions searched are not embedded yet; they rank by keyword only")
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


def _keyword(index: ActionIndex, pairs: CandidatePairs, pool: np.ndarray, coverage: np.ndarray, qwords: Sequence[str]) -> np.ndarray:
    """Keyword score of the pool: coverage plus the whole-name Jaro-Winkler similarity."""
    keyword = COVERAGE_SHARE * coverage[pool]
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
    engine: Engine, index: ActionIndex, pairs: CandidatePairs, pool: np.ndarray, keyword: np.ndarray, bonus: np.ndarray, dense: _Dense, limit: int
) -> None:
    """Exact cosines for pool pairs outside the dense top-K that could still reach the first ``limit``.

    A pair outside the top-K has cosine <= ``dense.floor``, so its score is at most
    0.4 * keyword + 0.6 * floor + bonus; only pairs whose bound beats the ``limit``-th exact score
    of the others need their stored vector (usually none or a few, not the whole pool).
    """
    if dense.complete:
        return  # no vector exists outside the hits: cosine 0
    actions = pairs.action[pool]
    missing = np.fromiter((a not in dense.cosines for a in actions.tolist()), dtype=bool, count=len(pool))
    if not missing.any():
        return
    known = ~missing
    exact = KEYWORD_WEIGHT * keyword[known] + EMBEDDING_WEIGHT * np.fromiter(
        (dense.cosines[a] for a in actions[known].tolist()), dtype=np.float32, count=int(known.sum())
    ) + bonus[known]
    threshold = float(np.partition(exact, len(exact) - limit)[len(exact) - limit]) if len(exact) >= limit else float("-inf")
    bound = KEYWORD_WEIGHT * keyword[missing] + EMBEDDING_WEIGHT * dense.floor + bonus[missing]
    wanted = sorted(set(actions[missing][bound >= threshold].tolist()))
    if wanted:
        dense.cosines.update(await _stored_cosines(engine, index, wanted, dense))


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
        hits = await engine.records(SURFACE_NAME).search_dense(dense.vector_name, dense.vector, only, limit=len(keys))
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
    index: ActionIndex, units: Sequence[Unit], pairs: CandidatePairs, pool: np.ndarray, keyword: np.ndarray | None, bonus: np.ndarray, dense: _Dense, limit: int
) -> list[Ranked]:
    """Blend (weights renormalized over the signals present), add the bonuses, order, cut."""
    pool_actions = pairs.action[pool]
    pool_units = pairs.unit[pool]
    cosine = None
    if dense.vector is not None:
        cosine = np.fromiter((dense.cosines.get(a, 0.0) for a in pool_actions.tolist()), dtype=np.float32, count=len(pool_actions))
    if keyword is not None and cosine is not None:
        score = KEYWORD_WEIGHT * keyword + EMBEDDING_WEIGHT * cosine
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
    return [Ranked(unit=units[int(pool_units[i])], action_idx=int(pool_actions[i]), score=float(score[i])) for i in order[:limit]]


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
