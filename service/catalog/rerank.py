"""The optional stage-2 rerank of ranked catalog search (the "Jev Score rerank").

Gate, in order (the first that applies decides the outcome):

    flag off                                  skipped-flag-off   (the flag is a kill switch)
    plan free / anonymous                     skipped-plan
    pool of <= 8 hybrid candidates            skipped-small-pool
    pool of 9-20 with a decisive top hit      skipped-clear-winner
    no scorer configured                      fallback-error     (errorReason "missing scorer")
    scoring past the shared budget            fallback-timeout   (hybrid order)
    scorer error or incomplete answers        fallback-error     (hybrid order, short errorReason)
    every candidate under the keep floor      fallback-empty-after-drop (keepPath "empty", no hits)
    otherwise                                 applied

"Decisive": with the pool's hybrid scores sorted high to low (s1 >= s2 >= ... >= sn), the top hit
is decisive when its lead over the runner-up is at least half the pool's spread,
``s1 - s2 >= CLEAR_WINNER_SHARE * (s1 - sn)`` with ``s1 > sn``: the top stands further from the
second than the second from the last, so no rerank would plausibly unseat it. The rule is scale
free, so it holds for RRF, BM25 or cosine scores alike.

Keep floor: candidates whose Score is under ``keep_floor`` are dropped, except identity matches:
a candidate whose identity term (package name, id, name leaf) equals a query term or a
contiguous run of query terms stays, after the scored survivors and in hybrid order
(``keepPath: kept-identity``). ``keepPath`` is otherwise ``score`` (every survivor passed the
floor), ``empty`` (nothing survived) or ``hybrid`` (the stage did not reorder).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.auth import Plan
from service.catalog.scorers import ScoreBatch, Scorer, ScorerError

log = logging.getLogger(__name__)

__all__ = [
    "CLEAR_WINNER_POOL_MAX",
    "CLEAR_WINNER_SHARE",
    "DEFAULT_KEEP_FLOOR",
    "SMALL_POOL_MAX",
    "Candidate",
    "KeepPath",
    "Outcome",
    "RerankResult",
    "identity_match",
    "is_clear_winner",
    "rerank",
]

SMALL_POOL_MAX = 8
CLEAR_WINNER_POOL_MAX = 20
CLEAR_WINNER_SHARE = 0.5
# Scores are probabilities (TEI raw_scores=false, a CrossEncoder's sigmoid): under 0.1 the model
# judges the text irrelevant to the query.
DEFAULT_KEEP_FLOOR = 0.1
MAX_CONCURRENT_BATCHES = 4
_WORD = re.compile(r"[^\W_]+")


class Outcome(StrEnum):
    APPLIED = "applied"
    SKIPPED_FLAG_OFF = "skipped-flag-off"
    SKIPPED_PLAN = "skipped-plan"
    SKIPPED_SMALL_POOL = "skipped-small-pool"
    SKIPPED_CLEAR_WINNER = "skipped-clear-winner"
    FALLBACK_TIMEOUT = "fallback-timeout"
    FALLBACK_ERROR = "fallback-error"
    FALLBACK_EMPTY_AFTER_DROP = "fallback-empty-after-drop"


class KeepPath(StrEnum):
    HYBRID = "hybrid"
    SCORE = "score"
    KEPT_IDENTITY = "kept-identity"
    EMPTY = "empty"


@dataclass(frozen=True)
class Candidate:
    """A post-hybrid hit: ``text`` is what the scorer reads, ``identity_terms`` are lowercase names that keep it."""

    ref: str
    text: str
    score: float
    identity_terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class RerankResult:
    """The candidates to show, in order; ``scores`` maps ref -> rerank Score when the stage scored."""

    candidates: list[Candidate]
    telemetry: dict[str, Any]
    duration_ms: float
    scores: dict[str, float] = field(default_factory=dict)


# ---- the stage -----------------------------------------------------------------------------------


def is_clear_winner(scores: Sequence[float]) -> bool:
    """True when the top score leads the second by at least CLEAR_WINNER_SHARE of the spread (see module doc)."""
    ordered = sorted(scores, reverse=True)
    if len(ordered) < 2:
        return True
    spread = ordered[0] - ordered[-1]
    return spread > 0 and ordered[0] - ordered[1] >= CLEAR_WINNER_SHARE * spread


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def identity_match(identity_terms: Sequence[str], query: str) -> bool:
    """True when an identity term equals a query term or a contiguous run of them.

    Both sides split into words on punctuation (``dropbox-shared-link`` equals the run ``dropbox
    shared link``); a run written together (``sharedlink``) also equals its words.
    """
    query_words = _words(query)
    for term in identity_terms:
        words = _words(term)
        if not words:
            continue
        joined = "".join(words)
        for start in range(len(query_words)):
            run: list[str] = []
            for word in query_words[start:]:
                run.append(word)
                if run == words or "".join(run) == joined:
                    return True
                if len("".join(run)) > len(joined):
                    break
    return False


def _gate(candidates: Sequence[Candidate], *, plan: Plan | None, flag_on: bool) -> Outcome | None:
    if not flag_on:
        return Outcome.SKIPPED_FLAG_OFF
    if plan is None or not plan.paid:
        return Outcome.SKIPPED_PLAN
    if len(candidates) <= SMALL_POOL_MAX:
        return Outcome.SKIPPED_SMALL_POOL
    if len(candidates) <= CLEAR_WINNER_POOL_MAX and is_clear_winner([c.score for c in candidates]):
        return Outcome.SKIPPED_CLEAR_WINNER
    return None


class _ScoreRun:
    """Scores every batch concurrently (at most MAX_CONCURRENT_BATCHES in flight), counting attempts."""

    def __init__(self, scorer: Scorer, query: str, batches: list[list[Candidate]]) -> None:
        self.scorer = scorer
        self.query = query
        self.batches = batches
        self.attempted = 0
        self.answers: list[ScoreBatch] = []
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_BATCHES)

    async def _one(self, batch: list[Candidate]) -> ScoreBatch:
        async with self._slots:
            self.attempted += 1
            answer = await self.scorer.score(self.query, [c.text for c in batch])
            if len(answer.scores) != len(batch):
                raise ScorerError(f"incomplete Score answers: {len(answer.scores)}/{len(batch)} scored")
            self.answers.append(answer)
            return answer

    async def scores(self) -> list[float]:
        """One Score per candidate in hybrid order; ScorerError on the first failed batch (the rest cancelled)."""
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._one(batch)) for batch in self.batches]
        except BaseExceptionGroup as failed:
            first = failed.exceptions[0]
            if isinstance(first, ScorerError):
                raise first from None
            if not isinstance(first, Exception):  # KeyboardInterrupt and the like pass through
                raise
            raise ScorerError(f"scorer failed: {type(first).__name__}", str(first)) from None
        return [score for task in tasks for score in task.result().scores]

    def usage(self) -> dict[str, int | None]:
        def total(values: list[int | None]) -> int | None:
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        return {
            "inputTokens": total([a.input_tokens for a in self.answers]),
            "outputTokens": total([a.output_tokens for a in self.answers]),
        }


def _keep(
    query: str, candidates: list[Candidate], scores: list[float], keep_floor: float
) -> tuple[list[Candidate], KeepPath]:
    passed = sorted(
        (pair for pair in zip(candidates, scores, strict=True) if pair[1] >= keep_floor),
        key=lambda pair: -pair[1],  # sorted() is stable: equal Scores keep hybrid order
    )
    by_identity = [
        c
        for c, s in zip(candidates, scores, strict=True)
        if not s >= keep_floor and identity_match(c.identity_terms, query)
    ]
    kept = [c for c, _ in passed] + by_identity
    if not kept:
        return [], KeepPath.EMPTY
    return kept, KeepPath.KEPT_IDENTITY if by_identity else KeepPath.SCORE


async def rerank(
    query: str,
    candidates: list[Candidate],
    *,
    plan: Plan | None,
    flag_on: bool,
    scorer: Scorer | None,
    budget_s: float = 4.0,
    batch_size: int = 16,
    keep_floor: float = DEFAULT_KEEP_FLOOR,
) -> RerankResult:
    """Gate, score and filter ``candidates`` (given in hybrid order); see the module doc for outcomes.

    Cancelling the calling task cancels every in-flight scorer call.
    """
    started = time.perf_counter()

    def done(kept: list[Candidate], telemetry: dict[str, Any], scores: dict[str, float] | None = None) -> RerankResult:
        return RerankResult(kept, telemetry, round((time.perf_counter() - started) * 1000, 3), scores or {})

    skipped = _gate(candidates, plan=plan, flag_on=flag_on)
    if skipped is not None:
        return done(list(candidates), {"outcome": skipped.value, "keepPath": KeepPath.HYBRID.value})
    if scorer is None:
        return done(list(candidates), _telemetry(Outcome.FALLBACK_ERROR, KeepPath.HYBRID, None, None, "missing scorer"))
    batch_size = max(1, batch_size)
    run = _ScoreRun(scorer, query, [candidates[i : i + batch_size] for i in range(0, len(candidates), batch_size)])
    try:
        async with asyncio.timeout(budget_s):
            scores = await run.scores()
    except TimeoutError:
        log.warning(
            "rerank budget spent", extra={"budget_s": budget_s, "model": scorer.model, "batches": run.attempted}
        )
        return done(list(candidates), _telemetry(Outcome.FALLBACK_TIMEOUT, KeepPath.HYBRID, scorer, run))
    except ScorerError as exc:
        log.warning("rerank scorer failed", extra={"reason": exc.reason, "detail": str(exc), "model": scorer.model})
        return done(list(candidates), _telemetry(Outcome.FALLBACK_ERROR, KeepPath.HYBRID, scorer, run, exc.reason))
    kept, keep_path = _keep(query, list(candidates), scores, keep_floor)
    by_ref = {c.ref: s for c, s in zip(candidates, scores, strict=True)}
    outcome = Outcome.FALLBACK_EMPTY_AFTER_DROP if keep_path is KeepPath.EMPTY else Outcome.APPLIED
    return done(kept, _telemetry(outcome, keep_path, scorer, run), by_ref)


def _telemetry(
    outcome: Outcome,
    keep_path: KeepPath,
    scorer: Scorer | None,
    run: _ScoreRun | None,
    error_reason: str | None = None,
) -> dict[str, Any]:
    """The ``telemetry.jevRerank`` object of a stage that ran or attempted to."""
    telemetry: dict[str, Any] = {"outcome": outcome.value, "keepPath": keep_path.value}
    if error_reason is not None:
        telemetry["errorReason"] = error_reason
    telemetry["model"] = scorer.model if scorer is not None else None
    telemetry["aiCallCount"] = run.attempted if run is not None else 0
    telemetry["usage"] = run.usage() if run is not None else {"inputTokens": None, "outputTokens": None}
    return telemetry
