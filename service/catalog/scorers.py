"""Rerank scorers: what scores (query, text) pairs for the rerank stage, a remote endpoint or a local cross-encoder.

``build_scorer`` picks one from the settings. A scorer answers a Score per text in order
(probabilities: under ``rerank.DEFAULT_KEEP_FLOOR`` the model judges the text irrelevant);
``ScorerError`` carries the short ``errorReason`` a failed rerank reports.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import aiohttp
import orjson
from yarl import URL


@dataclass(frozen=True)
class ScoreBatch:
    """One scorer answer: a Score per text, in order; token counts when the scorer reports them."""

    scores: list[float]
    input_tokens: int | None = None
    output_tokens: int | None = None


class ScorerError(Exception):
    """The scorer failed; ``reason`` is the short ``errorReason`` (``Gateway 403``), the message may say more."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(detail or reason)
        self.reason = reason


@runtime_checkable
class Scorer(Protocol):
    model: str

    async def score(self, query: str, texts: Sequence[str]) -> ScoreBatch: ...




class HttpScorer:
    """A text-embeddings-inference style ``/rerank`` endpoint.

    Sends ``{"query", "texts", "raw_scores": false, "truncate": true}`` and reads
    ``[{"index", "score"}, ...]``; Cohere/Jina-style ``{"results": [{"index", "relevance_score"}],
    "usage": {...}}`` answers are read too. ``url`` is the server's base URL or its ``/rerank``
    endpoint. ``session_factory`` returns a shared ClientSession that this scorer never closes;
    without one the scorer opens its own on first use and ``aclose()`` closes it.
    """

    def __init__(
        self,
        url: str,
        model: str | None = None,
        session_factory: Callable[[], aiohttp.ClientSession] | None = None,
    ) -> None:
        base = url.rstrip("/")
        self.endpoint = base if base.endswith("/rerank") else f"{base}/rerank"
        self.model = model or f"rerank@{URL(self.endpoint).host or base}"
        self._session_factory = session_factory
        self._own_session: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._session_factory is not None:
            return self._session_factory()
        if self._own_session is None or self._own_session.closed:
            self._own_session = aiohttp.ClientSession()
        return self._own_session

    async def score(self, query: str, texts: Sequence[str]) -> ScoreBatch:
        payload = {"query": query, "texts": list(texts), "raw_scores": False, "truncate": True}
        try:
            async with self._session().post(
                self.endpoint, data=orjson.dumps(payload), headers={"Content-Type": "application/json"}
            ) as response:
                if response.status >= 400:
                    raise ScorerError(f"Gateway {response.status}")
                body = await response.read()
        except aiohttp.ClientError as exc:
            raise ScorerError("Gateway unreachable", f"rerank endpoint {self.endpoint}: {type(exc).__name__}") from None
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ScorerError("Gateway answered non-JSON") from None
        return parse_score_answer(data, len(texts))

    async def aclose(self) -> None:
        if self._own_session is not None:
            await self._own_session.close()
            self._own_session = None


class CrossEncoderScorer:
    """A sentence-transformers CrossEncoder from a local directory (offline), run on one worker thread.

    The model loads on first use (or ``await warm()`` at start-up, so the first search does not
    spend its budget loading). Scores pass the model's activation (sigmoid for one label), so they
    are probabilities like TEI's.
    """

    def __init__(self, model_dir: Path | str, *, model: str | None = None, device: str | None = None) -> None:
        path = Path(model_dir)
        if not path.is_dir():
            raise ScorerError(
                "missing scorer",
                f"rerank model directory {path} does not exist; set AGENTSEARCH_RERANK_MODEL_DIR to a local "
                "sentence-transformers CrossEncoder directory (with config.json)",
            )
        if not (path / "config.json").is_file():
            raise ScorerError(
                "missing scorer", f"rerank model directory {path} has no config.json: not a model directory"
            )
        self.model_dir = path
        self.model = model or f"local/{path.name}"
        self._device = device
        self._encoder: Any = None
        self._load_lock = threading.Lock()
        # One thread: a CPU cross-encoder gains nothing from parallel batches and would starve the host.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rerank")

    def _load(self) -> Any:
        with self._load_lock:
            if self._encoder is None:
                from sentence_transformers import CrossEncoder  # heavy import, only when configured

                self._encoder = CrossEncoder(str(self.model_dir), local_files_only=True, device=self._device)
            return self._encoder

    def _predict(self, query: str, texts: list[str]) -> ScoreBatch:
        try:
            encoder = self._load()
        except Exception as exc:
            raise ScorerError("missing scorer", f"cannot load {self.model_dir}: {exc}") from None
        try:
            pairs = [(query, text) for text in texts]
            scores = encoder.predict(pairs, batch_size=max(1, len(pairs)), show_progress_bar=False)
        except Exception as exc:
            raise ScorerError(f"scorer failed: {type(exc).__name__}", str(exc)) from None
        return ScoreBatch([float(s) for s in scores], _count_tokens(encoder, query, texts), 0)

    async def warm(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    async def score(self, query: str, texts: Sequence[str]) -> ScoreBatch:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._predict, query, list(texts))

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _count_tokens(encoder: Any, query: str, texts: list[str]) -> int | None:
    """Input tokens the model read (pairs truncated as predict truncates them); None if it cannot tell."""
    try:
        encoded = encoder.tokenizer([query] * len(texts), texts, truncation=True, max_length=encoder.max_seq_length)
        return sum(len(ids) for ids in encoded["input_ids"])
    except Exception:  # token counts are telemetry; never fail a search for them
        return None


def build_scorer(settings: Any, *, session_factory: Callable[[], aiohttp.ClientSession] | None = None) -> Scorer | None:
    """The scorer the settings configure: ``rerank_url`` (HTTP) first, then ``rerank_model_dir``, else None."""
    if getattr(settings, "rerank_url", None):
        return HttpScorer(settings.rerank_url, getattr(settings, "rerank_model", None), session_factory)
    if getattr(settings, "rerank_model_dir", None):
        return CrossEncoderScorer(settings.rerank_model_dir, model=getattr(settings, "rerank_model", None))
    return None


def parse_score_answer(data: Any, expected: int) -> ScoreBatch:
    """A ScoreBatch from a rerank answer, or ScorerError ``incomplete Score answers`` naming the keys seen."""
    usage: Any = None
    if isinstance(data, list):
        items: Any = data
        keys = sorted(data[0]) if data and isinstance(data[0], dict) else []
    elif isinstance(data, dict):
        items = next((data[k] for k in ("results", "data") if isinstance(data.get(k), list)), None)
        usage = data.get("usage")
        keys = sorted(str(k) for k in data)
    else:
        items, keys = None, []
    scores: dict[int, float] = {}
    for item in items or []:
        if not isinstance(item, dict):
            continue
        index = item.get("index")
        value = item.get("score", item.get("relevance_score"))
        if isinstance(index, int) and 0 <= index < expected and _is_number(value):
            scores[index] = float(value)  # type: ignore[arg-type]  # _is_number checked it
    if len(scores) < expected:
        sample = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
        raise ScorerError(f"incomplete Score answers: {len(scores)}/{expected} scored, keys [{sample}]")
    return ScoreBatch([scores[i] for i in range(expected)], *_usage(usage))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None

    def first_int(*names: str) -> int | None:
        return next((usage[n] for n in names if isinstance(usage.get(n), int)), None)

    return first_int("input_tokens", "prompt_tokens", "total_tokens"), first_int("output_tokens", "completion_tokens")
