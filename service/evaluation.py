"""Judging a surface's ranking against relevance labels: the labels, the targets searched, the metrics, the report.

Labels (qrels) are JSONL, one judged query a line: ``{"query": "...", "relevant": ["id", ...]}``.
An id is what the surface's answers name: a catalog result's ``entity`` (``capability:emailSend``),
an action's ``template/action``, a code result's ``path`` (file level: a file's chunks count once).

``evaluate`` searches every query in each mode (``lexical`` and ``dense``: one evidence channel
alone; ``served``: the ranking callers get) through a ``Target``: ``HttpTarget``, a running service
called as a client calls it, or ``DataDirTarget``, the engine opened on a data directory in this
process and searched through ``run_search`` (the same parsing and deadline as the HTTP routes).

Metrics use binary relevance, over a ranking whose repeated ids count once, at their first place:
nDCG@10 (gain 1 per relevant id at rank r, discounted by log2(r + 1), over the ideal for
min(relevant, 10) ids), Recall@5 (the share of relevant ids in the top 5), MRR@10 (1 / rank of the
first relevant id in the top 10, else 0) and all@5 (1 when every relevant id is in the top 5).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import orjson

from service.auth import Caller, Plan

if TYPE_CHECKING:
    import aiohttp

    from service.engine.runtime import Engine
    from service.settings import Settings

SURFACES = ("catalog", "code", "actions")
MODES = ("lexical", "dense", "served")
METRICS = ("nDCG@10", "Recall@5", "MRR@10", "all@5")
# Code search names a mode by its passes: lexical, semantic (dense alone), hybrid (what callers get).
CODE_MODES = {"lexical": "lexical", "dense": "semantic", "served": "hybrid"}
# Code answers are chunks and a file may fill several places: ask for this many chunks per file wanted.
CODE_CHUNKS_PER_FILE = 5
CODE_MAX_CHUNKS = 200
WORST_ABOVE = 5  # ids shown ranked above a worst query's first relevant one
MAX_RATE_LIMIT_WAITS = 5
MAX_RETRY_AFTER_S = 60.0


class EvaluationError(Exception):
    """The evaluation cannot go on: a bad qrels file, a target that refuses the caller or cannot be reached."""


class QueryFailed(Exception):
    """One search was refused or failed (a 4xx or 5xx answer, an error answer): counted, not fatal."""


# ---- labels ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One qrels line: a query and the ids relevant to it (each once, in the file's order)."""

    query: str
    relevant: tuple[str, ...]


def read_qrels(path: Path) -> list[Judged]:
    """The judged queries of the JSONL file ``path``; ``EvaluationError`` naming the line of a bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvaluationError(f"cannot read qrels file {path}: {exc}") from None
    judged = [_judged(line, f"{path}:{number}") for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not judged:
        raise EvaluationError(f"qrels file {path} has no judged query: write one JSON object a line, {{\"query\": ..., \"relevant\": [...]}}")
    return judged


def _judged(line: str, where: str) -> Judged:
    try:
        item = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise EvaluationError(f"{where}: not JSON ({exc})") from None
    if not isinstance(item, dict):
        raise EvaluationError(f'{where}: expected an object {{"query": ..., "relevant": [...]}}, got {type(item).__name__}')
    query, relevant = item.get("query"), item.get("relevant")
    if not isinstance(query, str) or not query.strip():
        raise EvaluationError(f"{where}: query must be a non-empty string")
    if not isinstance(relevant, list) or not relevant or not all(isinstance(r, str) and r for r in relevant):
        raise EvaluationError(f"{where}: relevant must be a non-empty list of ids (non-empty strings)")
    return Judged(query, tuple(dict.fromkeys(relevant)))


# ---- metrics ----------------------------------------------------------------------------------------


def _unique(ranking: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def ndcg_at(ranking: Sequence[str], relevant: Sequence[str], k: int = 10) -> float:
    wanted = set(relevant)
    if not wanted:
        return 0.0
    gained = sum(1 / math.log2(rank + 1) for rank, item in enumerate(_unique(ranking)[:k], start=1) if item in wanted)
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(wanted), k) + 1))
    return gained / ideal


def recall_at(ranking: Sequence[str], relevant: Sequence[str], k: int = 5) -> float:
    wanted = set(relevant)
    return len(wanted & set(_unique(ranking)[:k])) / len(wanted) if wanted else 0.0


def mrr_at(ranking: Sequence[str], relevant: Sequence[str], k: int = 10) -> float:
    rank = first_relevant_rank(ranking, relevant)
    return 1 / rank if rank is not None and rank <= k else 0.0


def all_at(ranking: Sequence[str], relevant: Sequence[str], k: int = 5) -> float:
    wanted = set(relevant)
    return 1.0 if wanted and wanted <= set(_unique(ranking)[:k]) else 0.0


def first_relevant_rank(ranking: Sequence[str], relevant: Sequence[str]) -> int | None:
    """The 1-based rank of the first relevant id in ``ranking`` (repeats counted once); None when absent."""
    wanted = set(relevant)
    return next((rank for rank, item in enumerate(_unique(ranking), start=1) if item in wanted), None)


def scores_of(ranking: Sequence[str], relevant: Sequence[str]) -> dict[str, float]:
    """Every metric of one ranked answer, by name (``METRICS``)."""
    return {
        "nDCG@10": ndcg_at(ranking, relevant),
        "Recall@5": recall_at(ranking, relevant),
        "MRR@10": mrr_at(ranking, relevant),
        "all@5": all_at(ranking, relevant),
    }


# ---- what each surface is sent and answers ------------------------------------------------------------


def search_body(surface: str, query: str, mode: str, limit: int) -> dict[str, Any]:
    """The search request body of ``surface`` for ``query`` ranked by ``mode`` (one of ``MODES``)."""
    if surface == "catalog":
        return {"query": query, "limit": limit, "ranking": mode}
    if surface == "actions":
        return {"query": query, "limit": limit, "include_catalog": True, "ranking": mode}
    if surface == "code":
        return {"query": query, "limit": min(limit * CODE_CHUNKS_PER_FILE, CODE_MAX_CHUNKS), "mode": CODE_MODES[mode]}
    raise ValueError(f"unknown surface {surface!r}; one of {', '.join(SURFACES)}")


def ranked_ids(surface: str, body: Mapping[str, Any]) -> list[str]:
    """The ids an answer of ``surface`` ranks, best first, each once; ``QueryFailed`` for an error answer."""
    if surface == "catalog":
        doc = body.get("structuredContent") or {}
        if body.get("isError") or doc.get("kind") == "error":
            raise QueryFailed(_error_text(None, doc if doc.get("error") else body))
        ids = [row.get("entity") for row in doc.get("results") or []]
    elif surface == "actions":
        ids = [f"{row['template']}/{row['action']}" for row in body.get("results") or [] if row.get("template") and row.get("action")]
    else:
        ids = [row.get("path") for row in body.get("results") or []]
    return _unique([str(item) for item in ids if item])


def _error_text(status: int | None, body: Any) -> str:
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        text = f"{error.get('code', 'error')}: {error.get('message', '')}"
    else:
        text = str(body)[:300]
    return f"{status} {text}" if status is not None else text


# ---- targets -------------------------------------------------------------------------------------------


class Target(Protocol):
    """Where the searches go: the ids one search ranks, best first (``QueryFailed`` when refused)."""

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]: ...


def _search_path(surface: str, workspace: str | None) -> str:
    if surface == "catalog":
        return "/v1/catalog/search"
    if surface == "actions":
        return "/v1/actions/search"
    return f"/v1/workspaces/{quote(_workspace_of(workspace), safe='')}/search"


def _workspace_of(workspace: str | None) -> str:
    if not workspace:
        raise EvaluationError("code search is per workspace: name the workspace id with --workspace (agentsearch index prints it)")
    return workspace


class HttpTarget:
    """A running service at ``url``, called with ``token`` as a client calls it. Over the caller's rate
    limit it waits as ``Retry-After`` says; a refused token or an unreachable service ends the evaluation."""

    def __init__(self, url: str, token: str, *, workspace: str | None = None, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.workspace = workspace
        self._token = token
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HttpTarget:
        import aiohttp

        self._session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {self._token}"}, timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]:
        import aiohttp

        assert self._session is not None, "use HttpTarget as an async context manager"
        url = self.url + _search_path(surface, self.workspace)
        body = search_body(surface, query, mode, limit)
        for waits in range(MAX_RATE_LIMIT_WAITS + 1):
            try:
                async with self._session.post(url, json=body) as response:
                    status, retry_after = response.status, response.headers.get("Retry-After")
                    raw = await response.read()
            except aiohttp.ClientConnectionError as exc:
                raise EvaluationError(f"cannot reach {self.url}: {exc}") from None
            except TimeoutError:
                raise QueryFailed(f"no answer within {self._timeout_s:g}s") from None
            try:
                payload: Any = orjson.loads(raw)
            except orjson.JSONDecodeError:
                payload = raw.decode(errors="replace")
            if status in (401, 403):
                raise EvaluationError(f"{self.url} refused the token: {_error_text(status, payload)}")
            if status == 429 and waits < MAX_RATE_LIMIT_WAITS:
                await asyncio.sleep(_retry_after_s(retry_after))
                continue
            if not 200 <= status < 300:
                raise QueryFailed(_error_text(status, payload))
            return ranked_ids(surface, payload)[:limit]
        raise AssertionError("unreachable: the last wait answers or raises")


def _retry_after_s(header: str | None) -> float:
    try:
        return min(max(float(header or 1), 0.1), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0


class DataDirTarget:
    """The engine opened on ``settings``' data directory in this process (every surface), searched as
    ``sub`` of ``org`` on the max plan, its rate limits off: an operator's evaluation is not abuse."""

    def __init__(self, settings: Settings, *, sub: str = "eval", org: str | None = None, workspace: str | None = None) -> None:
        self.settings = replace(settings, rate_limits_enabled=False)
        self.caller = Caller(sub=sub, org=org, plan=Plan.MAX)
        self.workspace = workspace
        self._engine: Engine | None = None

    async def __aenter__(self) -> DataDirTarget:
        from service.engine.startup import open_engine
        from service.engine.store import StoreLockedError
        from service.surfaces import surfaces

        try:
            self._engine = await open_engine(self.settings, surfaces())
        except StoreLockedError as exc:
            raise EvaluationError(f"{exc}; evaluate the running service with --url and --token instead") from None
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._engine is not None:
            await self._engine.close()
            self._engine = None

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]:
        from service.engine.surface import run_search
        from service.errors import AgentSearchError

        assert self._engine is not None, "use DataDirTarget as an async context manager"
        target = _workspace_of(self.workspace) if surface == "code" else None
        try:
            answer = await run_search(self._engine, surface, self.caller, search_body(surface, query, mode, limit), target=target)
        except AgentSearchError as exc:
            raise QueryFailed(_error_text(exc.status, exc.body())) from None
        if not 200 <= answer.status < 300:
            raise QueryFailed(_error_text(answer.status, answer.body))
        return ranked_ids(surface, answer.body)[:limit]


# ---- the evaluation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorstQuery:
    """A query the served ranking (or the one mode judged) answered worst, and what ranked above its first relevant id."""

    query: str
    relevant: tuple[str, ...]
    ndcg: float
    mrr: float
    first_relevant_rank: int | None
    """Rank of the first relevant id in the answer (up to ``limit`` ids); None when none was in it."""
    ranked_above: tuple[str, ...]
    """Up to 5 ids ranked above it: the answer's top 5 when none was found."""

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "relevant": list(self.relevant),
            "nDCG@10": self.ndcg,
            "MRR@10": self.mrr,
            "first_relevant_rank": self.first_relevant_rank,
            "ranked_above": list(self.ranked_above),
        }


@dataclass(frozen=True)
class Failures:
    """The searches of one mode that failed: how many, and the first one's error."""

    count: int
    first_error: str


@dataclass
class EvalReport:
    """Scores per mode (means over the queries each mode answered), failures, and the worst queries."""

    surface: str
    queries: int
    scores: dict[str, dict[str, float]]
    worst: list[WorstQuery]
    worst_mode: str | None = None
    limit: int = 10
    answered: dict[str, int] = field(default_factory=dict)
    failures: dict[str, Failures] = field(default_factory=dict)

    @property
    def answered_any(self) -> bool:
        return any(self.answered.values())

    def table(self) -> str:
        """The report as markdown: one row per mode, the failures, the worst queries."""
        lines = [
            f"## {self.surface}: {self.queries} judged queries, top {self.limit}",
            "",
            "| mode | answered | " + " | ".join(METRICS) + " |",
            "|---|---:|" + "---:|" * len(METRICS),
        ]
        for mode, answered in self.answered.items():
            values = self.scores.get(mode) or {}
            cells = [f"{values[m]:.3f}" if m in values else "–" for m in METRICS]
            lines.append(f"| {mode} | {answered}/{self.queries} | " + " | ".join(cells) + " |")
        for mode, failed in self.failures.items():
            lines += ["", f"{mode}: {failed.count} of {self.queries} searches failed; the first: {_cell(failed.first_error, 300)}"]
        if self.worst:
            lines += [
                "",
                f"### Worst queries ({self.worst_mode})",
                "",
                "| query | nDCG@10 | MRR@10 | first relevant | ranked above |",
                "|---|---:|---:|---:|---|",
            ]
            for item in self.worst:
                rank = str(item.first_relevant_rank) if item.first_relevant_rank is not None else f"not in top {self.limit}"
                above = ", ".join(f"`{_cell(i, 80)}`" for i in item.ranked_above) or "–"
                lines.append(f"| {_cell(item.query, 100)} | {item.ndcg:.3f} | {item.mrr:.3f} | {rank} | {above} |")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "surface": self.surface,
            "queries": self.queries,
            "limit": self.limit,
            "scores": self.scores,
            "answered": self.answered,
            "failures": {mode: {"count": f.count, "first_error": f.first_error} for mode, f in self.failures.items()},
            "worst_mode": self.worst_mode,
            "worst": [item.as_json() for item in self.worst],
        }


def _cell(text: str, limit: int) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


async def evaluate(
    target: Target,
    surface: str,
    judged: Sequence[Judged],
    *,
    modes: Sequence[str] = MODES,
    limit: int = 10,
    worst: int = 10,
    concurrency: int = 4,
) -> EvalReport:
    """Search every judged query in each of ``modes`` (``concurrency`` at a time) and score the answers.

    ``worst`` queries of the served mode (else the first mode given) with the lowest nDCG@10, then
    the lowest MRR@10, are reported; a query whose relevant ids lead the answer (nDCG@10 1) is not."""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise EvaluationError(f"modes must be among {', '.join(MODES)}; got {', '.join(unknown) or 'none'}")
    if surface not in SURFACES:
        raise EvaluationError(f"surface must be one of {', '.join(SURFACES)}; got {surface!r}")
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(item: Judged, mode: str) -> list[str] | QueryFailed:
        async with gate:
            try:
                return await target.ranked(surface, item.query, mode, limit)
            except QueryFailed as failed:
                return failed

    report = EvalReport(surface=surface, queries=len(judged), scores={}, worst=[], limit=limit)
    answers: dict[str, list[list[str] | QueryFailed]] = {}
    for mode in modes:
        answers[mode] = await _all_or_first_error([one(item, mode) for item in judged])
        ranked = [(item, answer) for item, answer in zip(judged, answers[mode], strict=True) if not isinstance(answer, QueryFailed)]
        failed = [answer for answer in answers[mode] if isinstance(answer, QueryFailed)]
        report.answered[mode] = len(ranked)
        if failed:
            report.failures[mode] = Failures(len(failed), str(failed[0]))
        if ranked:
            per_query = [scores_of(answer, item.relevant) for item, answer in ranked]
            report.scores[mode] = {m: sum(s[m] for s in per_query) / len(per_query) for m in METRICS}
    report.worst_mode = "served" if "served" in modes else modes[0]
    report.worst = worst_queries(judged, answers[report.worst_mode], worst)
    return report


def worst_queries(judged: Sequence[Judged], answers: Sequence[list[str] | QueryFailed], count: int) -> list[WorstQuery]:
    """The ``count`` answered queries of lowest nDCG@10, then lowest MRR@10 (file order breaks ties)."""
    found: list[WorstQuery] = []
    for item, answer in zip(judged, answers, strict=True):
        if isinstance(answer, QueryFailed):
            continue
        ndcg = ndcg_at(answer, item.relevant)
        if ndcg >= 1.0 - 1e-12:
            continue
        rank = first_relevant_rank(answer, item.relevant)
        above = _unique(answer)[: (rank - 1 if rank is not None else len(answer))][:WORST_ABOVE]
        found.append(WorstQuery(item.query, item.relevant, ndcg, mrr_at(answer, item.relevant), rank, tuple(above)))
    found.sort(key=lambda q: (q.ndcg, q.mrr))  # stable: file order among equals
    return found[: max(0, count)]


async def _all_or_first_error(searches: Sequence[Any]) -> list[list[str] | QueryFailed]:
    """Every search's result; on a fatal ``EvaluationError`` the others are cancelled and it is raised alone."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(search) for search in searches]
    except BaseExceptionGroup as errors:
        fatal = [e for e in errors.exceptions if isinstance(e, EvaluationError)]
        if fatal and len(fatal) == len(errors.exceptions):
            raise fatal[0] from None
        raise
    return [task.result() for task in tasks]
