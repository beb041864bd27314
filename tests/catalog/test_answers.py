"""Answer envelope: timing, the 20 s deadline, rate limits, Waiting block, memories, size and limit, Jev rerank (points 7-8)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from service.catalog.state import catalog_state
from service.respond import search_response
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ADMIN, auth
from tests.catalog.fixtures import CAPABILITIES, DOMAINS, home_package, put, reranking_app, search
from tests.helpers import running_app, stand_in, with_settings

# Twelve near-identical capabilities: BM25 ties them, so the pool is large and has no clear winner.
REPORTS = [{"type": "capability", "id": f"report{chr(65 + i)}", "domain": "reports", "summary": f"Build the quarterly report variant {chr(65 + i)}."} for i in range(12)]


@dataclass
class RerankServer:
    """A real HTTP rerank endpoint (TEI's ``/rerank`` shape) the tests start; ``mode`` picks its behaviour."""

    mode: str = "ok"
    calls: int = 0
    aborted: int = 0
    url: str = ""
    favourite: str = "variant L"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        body = await request.json()
        if self.mode == "forbidden":
            return web.json_response({"error": "no"}, status=403)
        if self.mode == "slow":
            try:
                for _ in range(600):  # until the client gives up and closes the connection
                    if request.transport is None or request.transport.is_closing():
                        self.aborted += 1
                        break
                    await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                self.aborted += 1
                raise
            return web.json_response([])
        scores = [0.9 if self.favourite in text else 0.5 for text in body["texts"]]
        return web.json_response([{"index": i, "score": s} for i, s in enumerate(scores)])


@pytest.fixture
async def rerank_server() -> AsyncIterator[RerankServer]:
    server = RerankServer()
    app = web.Application()
    app.router.add_post("/rerank", server.handle)
    async with stand_in(app) as url:
        server.url = url
        yield server


def _rerank_settings(settings: Settings, server: RerankServer, **changes: Any) -> Settings:
    return with_settings(settings, embeddings_model=None, rerank_enabled=True, rerank_url=server.url, **changes)


async def test_timing_tiles_and_server_timing_header(lexical_client: Any) -> None:
    await put(lexical_client, REPORTS, caller=ADMIN)
    response = await lexical_client.post("/v1/catalog/search", json={"query": "quarterly report"}, headers=auth())
    answer = await response.json()
    timing = answer["timing"]
    assert timing["startedAt"].endswith("Z") and timing["endedAt"] >= timing["startedAt"] and timing["durationMs"] > 0
    names = [tile["name"] for tile in timing["serverTiming"]]
    for name in ("rateLimit", "rowAndRegistryLoad", "identityResolution", "featureFlags", "loadAndRank", "memoryEnrichment", "unaccounted"):
        assert name in names
    assert names[-1] == "unaccounted"
    assert "jevRerank" not in names  # the stage was skipped (flag off): its tile shows only when it ran
    assert "loadAndRank;dur=" in response.headers["Server-Timing"]
    doc = answer["structuredContent"]
    assert doc["telemetry"]["jevRerank"] == {"outcome": "skipped-flag-off", "keepPath": "hybrid"}
    assert doc["phaseTimings"]["jevRerankMs"] >= 0 and doc["phaseTimings"]["waitingItemsTimedOut"] is False
    detail = (await search(lexical_client, {"entity": "capability:reportA"}))
    assert "telemetry" not in detail["structuredContent"] and "jevRerank" not in str(detail["timing"])


async def test_rerank_outcomes_by_plan_pool_and_scorer(settings: Settings, rerank_server: RerankServer) -> None:
    async with reranking_app(_rerank_settings(settings, rerank_server, rerank_budget_s=0.5)) as client:
        await put(client, REPORTS + CAPABILITIES, caller=ADMIN)
        free = (await search(client, {"query": "quarterly report"}, caller=auth("f", plan="free")))["structuredContent"]
        assert free["telemetry"]["jevRerank"]["outcome"] == "skipped-plan" and rerank_server.calls == 0
        applied = (await search(client, {"query": "quarterly report"}, caller=auth("p", plan="pro")))["structuredContent"]
        jev = applied["telemetry"]["jevRerank"]
        assert jev["outcome"] == "applied" and jev["keepPath"] == "score" and jev["aiCallCount"] >= 1
        assert jev["model"].startswith("rerank@") and set(jev["usage"]) == {"inputTokens", "outputTokens"}
        assert applied["results"][0]["entity"] == "capability:reportL" and applied["results"][0]["rerankScore"] == 0.9
        small = (await search(client, {"query": "read one email body"}, caller=auth("p", plan="pro")))["structuredContent"]
        assert small["telemetry"]["jevRerank"]["outcome"] == "skipped-small-pool"
        rerank_server.mode = "forbidden"
        failed = (await search(client, {"query": "quarterly report"}, caller=auth("p", plan="max")))["structuredContent"]
        assert failed["telemetry"]["jevRerank"]["outcome"] == "fallback-error" and failed["telemetry"]["jevRerank"]["errorReason"] == "Gateway 403"
        assert len(failed["results"]) == 10  # hybrid order kept
        rerank_server.mode = "slow"
        slow = (await search(client, {"query": "quarterly report"}, caller=auth("p", plan="standard")))["structuredContent"]
        assert slow["telemetry"]["jevRerank"]["outcome"] == "fallback-timeout" and len(slow["results"]) == 10


async def test_deadline_returns_the_did_not_finish_error_and_aborts_the_rerank(settings: Settings, rerank_server: RerankServer) -> None:
    rerank_server.mode = "slow"
    async with reranking_app(_rerank_settings(settings, rerank_server, rerank_budget_s=30.0, request_deadline_s=1.5)) as client:
        await put(client, REPORTS, caller=ADMIN)
        started = time.perf_counter()
        answer = await search(client, {"query": "quarterly report"}, caller=auth("p", plan="pro"))
        assert time.perf_counter() - started < 3.0
        assert answer["isError"] is True
        assert answer["content"].startswith("Search did not finish within 1.5s")
        assert answer["structuredContent"]["error"]["code"] == "deadline_exceeded"
        names = [tile["name"] for tile in answer["timing"]["serverTiming"]]
        assert "jevRerank" in names and "waitingItems" not in names  # stopped before its next phase
        await asyncio.sleep(0.3)
        assert rerank_server.calls >= 1 and rerank_server.aborted == rerank_server.calls


async def test_a_search_begun_late_in_its_request_still_answers_before_the_request_deadline(settings: Settings, rerank_server: RerankServer) -> None:
    """The search's budget counts from the request: a route that spends 0.6 s of a 1.5 s deadline
    before it searches still gets the surface's did-not-finish answer, not the middleware's 504."""

    async def late_search(request: web.Request) -> web.Response:
        await asyncio.sleep(0.6)  # what authentication, a session or a slow parse may spend first
        return await search_response(request, "catalog")

    rerank_server.mode = "slow"
    changed = _rerank_settings(settings, rerank_server, rerank_budget_s=30.0, request_deadline_s=1.5)
    async with reranking_app(changed, setup=lambda app: app.router.add_post("/v1/late-search", late_search)) as client:
        await put(client, REPORTS, caller=ADMIN)
        response = await client.post("/v1/late-search", json={"query": "quarterly report"}, headers=auth("p", plan="pro"))
        answer = await response.json()
    assert response.status == 200, answer  # past the request deadline the middleware would have answered 504
    assert answer["isError"] is True and answer["content"].startswith("Search did not finish within 1.5s")
    assert rerank_server.calls >= 1


async def test_rate_limit_answers_429_with_a_rate_limit_object(settings: Settings) -> None:
    async with running_app(settings, embeddings_model=None) as client:
        for _ in range(80):
            response = await client.post("/v1/catalog/search", json={"query": ""}, headers=auth("busy"))
            assert response.status == 200
        response = await client.post("/v1/catalog/search", json={"query": ""}, headers=auth("busy"))
        answer = await response.json()
        assert response.status == 429 and response.headers["Retry-After"]
        assert answer["isError"] is True and answer["error"]["code"] == "rate_limited"
        limit = answer["structuredContent"]["rateLimit"]
        assert limit["code"] == "rate_limited" and limit["plan"] == "free" and limit["limit"] == 80 and limit["window"] == "minute"
        assert limit["surface"] == "catalog" and int(response.headers["Retry-After"]) == limit["retryAfterSeconds"]
        assert "entitlement" not in answer["structuredContent"]
        assert "Rate limited (rate_limited)" in answer["content"]
        other = await client.post("/v1/catalog/search", json={"query": ""}, headers=auth("calm"))
        assert other.status == 200


async def test_waiting_block_shows_three_then_more_and_skips_setup(lexical_client: Any) -> None:
    items = [{"type": "waiting", "id": f"w{i}", "title": f"Reconnect service {i}", "status": "block" if i < 2 else "degraded", "category": "oauth-reconnect"} for i in range(5)]
    items.append({"type": "waiting", "id": "setup", "title": "Finish onboarding", "status": "setup", "category": "onboarding"})
    await put(lexical_client, [*items, home_package()])
    answer = await search(lexical_client, {"query": "shades"})
    waiting = answer["structuredContent"]["waiting"]
    assert [i["id"] for i in waiting["items"]] == ["w0", "w1", "w2"] and waiting["more"] == 2
    assert answer["content"].startswith("## Waiting\n- **Reconnect service 0** (block)")
    assert "- 2 more: call the waiting_summary tool (GET /v1/catalog/waiting) for the full list" in answer["content"]
    assert "Finish onboarding" not in answer["content"]
    for body in ({"entity": "package:home-controls"}, {"query": ""}):
        assert "## Waiting" not in (await search(lexical_client, body))["content"]


async def test_slow_waiting_checks_are_dropped_after_one_and_a_half_seconds(lexical_client: Any) -> None:
    """The waiting source is replaced by a slow one: a hung provider check cannot be caused for real here."""
    await put(lexical_client, [home_package(), {"type": "waiting", "id": "w", "title": "Reconnect", "status": "block"}])

    async def hung(engine: Any, caller: Any) -> list[dict[str, Any]]:
        await asyncio.sleep(10)
        return []

    catalog_state(lexical_client.server.app[ENGINE]).waiting_source = hung
    started = time.perf_counter()
    answer = await search(lexical_client, {"query": "shades"})
    assert 1.4 < time.perf_counter() - started < 4.0
    doc = answer["structuredContent"]
    assert doc["phaseTimings"]["waitingItemsTimedOut"] is True and "waiting" not in doc and doc["results"]


async def test_memories_surface_on_ranked_queries_and_survive_size_trimming(lexical_client: Any) -> None:
    await put(lexical_client, REPORTS, caller=ADMIN)
    await put(
        lexical_client,
        [
            {"type": "memory", "id": "m1", "text": "The quarterly report goes to the finance team first."},
            {"type": "memory", "id": "m2", "text": "Old quarterly report habit", "archived": True},
        ],
    )
    full = await search(lexical_client, {"query": "quarterly report"})
    assert [m["id"] for m in full["structuredContent"]["memories"]] == ["m1"]
    assert "## Memories\n- The quarterly report goes to the finance team first. (`memory:m1`)" in full["content"]
    tight = await search(lexical_client, {"query": "quarterly report", "maxResponseSize": 900})
    assert len(tight["content"]) <= 900
    doc = tight["structuredContent"]
    assert doc["memories"][0]["id"] == "m1" and 0 < len(doc["results"]) < len(full["structuredContent"]["results"])
    assert any("trimmed to fit maxResponseSize=900" in n for n in doc["notices"])
    assert "trimmed to fit maxResponseSize=900" in tight["content"]
    limited = await search(lexical_client, {"query": "quarterly report", "limit": 2})
    assert len(limited["structuredContent"]["results"]) == 2
    listing = await search(lexical_client, {"domain": "reports"})
    assert "memories" not in listing["structuredContent"]


async def test_a_memory_written_after_searches_without_any_surfaces_on_the_next(lexical_client: Any) -> None:
    """A caller with no memories is answered from a count the store remembers: the first memory written
    after such searches must show on the next one, and one archived must go."""
    await put(lexical_client, REPORTS, caller=ADMIN)
    for _ in range(2):
        assert (await search(lexical_client, {"query": "quarterly report"}))["structuredContent"]["memories"] == []
    await put(lexical_client, [{"type": "memory", "id": "m1", "text": "The quarterly report goes to the finance team first."}])
    assert [m["id"] for m in (await search(lexical_client, {"query": "quarterly report"}))["structuredContent"]["memories"]] == ["m1"]
    await put(lexical_client, [{"type": "memory", "id": "m1", "text": "The quarterly report goes to the finance team first.", "archived": True}])
    assert (await search(lexical_client, {"query": "quarterly report"}))["structuredContent"]["memories"] == []


async def test_domain_index_and_entity_answers_carry_timing_but_no_jev_fields(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    for body in ({"query": ""}, {"domain": "email"}, {"entity": "capability:emailSend"}, {"query": "emailSend"}):
        answer = await search(lexical_client, body)
        assert answer["timing"]["durationMs"] >= 0
        if answer["structuredContent"]["kind"] != "ranked":
            assert "telemetry" not in answer["structuredContent"] and "phaseTimings" not in answer["structuredContent"]
