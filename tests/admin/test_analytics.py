"""Search analytics: real searches of the three surfaces over HTTP recorded in real Redis, listed per
surface (top, no result, slowest) for admins only, bounded, kept per deployment prefix, off by a
setting, counted on ``/metrics``, and never in the way of a search while Redis is down."""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.engine.analytics import (
    BUCKET_CAP,
    BUCKET_TTL_S,
    SearchAnalytics,
    analytics_of,
    bucket_key,
    normalize_query,
    read_analytics,
)
from service.engine.queue import forget_deployment
from service.engine.runtime import Engine
from service.settings import Settings
from service.state import ENGINE
from tests.actions.helpers import GMAIL, put_instances, put_templates
from tests.admin.helpers import get_json, get_page
from tests.callers import ADMIN, ALICE, BOB, SALES_ALICE, auth
from tests.code.helpers import register, wait_indexed
from tests.helpers import running_app, with_settings

Client = TestClient[Any, Any]
ALICE_TENANT, BOB_TENANT = "org:acme", "org:bobco"


async def _search(client: Client, path: str, headers: dict[str, str], query: str, **body: Any) -> dict[str, Any]:
    response = await client.post(path, json={"query": query, **body}, headers=headers)
    answer: dict[str, Any] = await response.json()
    assert response.status == 200, answer
    return answer


async def _settled(client: Client) -> None:
    """Wait for the background writes of the searches made so far."""
    await analytics_of(client.app[ENGINE]).settle()


def _row(rows: list[dict[str, Any]], query: str) -> dict[str, Any]:
    found = [row for row in rows if row["query"] == query]
    assert len(found) == 1, (query, rows)
    return found[0]


def _counter(metrics: str, name: str, surface: str) -> float:
    match = re.search(rf'^{name}\{{surface="{surface}"\}} ([0-9.e+]+)$', metrics, re.M)
    return float(match.group(1)) if match else 0.0


async def _analytics_keys(engine: Engine) -> list[bytes]:
    return [key async for key in engine.redis.scan_iter(match=f"{engine.settings.queue_prefix}:analytics:*", count=1000)]


async def test_searches_of_every_surface_are_listed_with_counts_no_results_and_latency(client: Client, settings: Settings) -> None:
    await put_templates(client, [GMAIL])
    await put_instances(client, SALES_ALICE, {"name": "gmail_work", "template": "gmail", "auth": {"type": "oauth", "provider": "google"}})
    # The same query three ways: one row once normalized (trimmed, whitespace collapsed, lowercased).
    for text in ("send an email", "  Send an   EMAIL ", "send an email"):
        assert (await _search(client, "/v1/actions/search", SALES_ALICE, text))["results"], "alice's gmail instance answers"
    # Bob (another org) has no instance: his search answers no result.
    assert (await _search(client, "/v1/actions/search", BOB, "send an email"))["results"] == []
    assert (await _search(client, "/v1/catalog/search", ALICE, "quarterly tax filing", ranking="lexical"))["structuredContent"]["results"] == []
    tree = settings.allowed_roots[0] / f"analytics-{uuid.uuid4().hex[:8]}"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "auth.py").write_text("def hash_password(password: str) -> str:\n    return password[::-1]\n")
    workspace = await register(client, tree)
    await wait_indexed(client, workspace["id"])
    code_path = f"/v1/workspaces/{workspace['id']}/search"
    assert (await _search(client, code_path, ALICE, "hash_password", mode="lexical"))["results"]
    assert (await _search(client, code_path, ALICE, "no such words anywhere", mode="lexical"))["results"] == []
    await _settled(client)

    report = await get_json(client, "/admin/api/analytics")
    assert report["window_hours"] == 24 and report["recording"] is True and report["tenant"] is None
    assert {ALICE_TENANT, BOB_TENANT} <= set(report["tenants"])
    actions = report["surfaces"]["actions"]
    top = _row(actions["top"], "send an email")
    assert top["count"] == 4 and top["tenants"] == [ALICE_TENANT, BOB_TENANT] and top["tenant_count"] == 2
    assert actions["top"][0]["query"] == "send an email"
    nothing = _row(actions["no_results"], "send an email")
    assert nothing["count"] == 1 and nothing["tenants"] == [BOB_TENANT], "only bob's search answered nothing"
    slowest = _row(actions["slowest"], "send an email")
    assert slowest["ms"] > 0
    catalog = report["surfaces"]["catalog"]
    assert _row(catalog["no_results"], "quarterly tax filing")["tenants"] == [ALICE_TENANT]
    code = report["surfaces"]["code"]
    assert _row(code["top"], "hash_password")["count"] == 1
    assert [row["query"] for row in code["no_results"]] == ["no such words anywhere"], "a search that found lines is not a no-result query"
    assert {row["query"] for row in code["slowest"]} == {"hash_password", "no such words anywhere"}
    assert all(row["ms"] > 0 for row in code["slowest"])
    assert code["slowest"][0]["ms"] >= code["slowest"][1]["ms"], "slowest first"

    # One tenant alone: bob's single search, nothing of alice's.
    bobs = await get_json(client, f"/admin/api/analytics?tenant={BOB_TENANT}")
    assert bobs["tenant"] == BOB_TENANT
    assert [(r["query"], r["count"]) for r in bobs["surfaces"]["actions"]["top"]] == [("send an email", 1)]
    assert bobs["surfaces"]["catalog"]["top"] == [] and bobs["surfaces"]["code"]["top"] == []
    one = await get_json(client, "/admin/api/analytics?surface=code&limit=1")
    assert list(one["surfaces"]) == ["code"] and len(one["surfaces"]["code"]["slowest"]) == 1

    # The page shows the same, server-rendered, with the nav link marked current.
    html = await get_page(client, "/admin/analytics")
    assert 'data-tab="analytics" aria-current="page"' in html
    section = re.search(r'<section class="surface-analytics" id="analytics-actions".*?</section>', html, re.S)
    assert section, "the page has an actions section"
    assert re.search(r'<tr data-query="send an email"><td class="query">send an email</td><td class="num" data-count="4">4</td>', section.group(0))
    assert f'<option value="{BOB_TENANT}">' in html
    filtered = await get_page(client, f"/admin/analytics?tenant={BOB_TENANT}&surface=")
    assert f'<option value="{BOB_TENANT}" selected>' in filtered and "quarterly tax filing" not in filtered


async def test_buckets_keep_the_last_24_hours_bounded_and_the_slowest_latency(engine: Engine) -> None:
    recorder = SearchAnalytics(engine.redis, engine.settings.queue_prefix, enabled=True)
    now = time.time()
    tenant = "org:acme"
    recorder.record("actions", tenant, "Old Query", 2, 10.0, now_s=now - 24 * 3600)  # 24 hours ago: out of the window
    recorder.record("actions", tenant, "edge query", 2, 10.0, now_s=now - 23 * 3600)  # the oldest bucket read
    for ms in (5.0, 250.0, 40.0):
        recorder.record("actions", tenant, "slow query", 1, ms, now_s=now)
    await recorder.settle()
    report = await read_analytics(engine, ["actions"], now_s=now)
    actions = report.surfaces["actions"]
    assert {row.query for row in actions.top} == {"edge query", "slow query"}
    assert _row([row.as_dict("ms") for row in actions.slowest], "slow query")["ms"] == 250.0, "the slowest latency is kept, not the last"
    assert _row([row.as_dict("count") for row in actions.top], "slow query")["count"] == 3

    # Past BUCKET_CAP distinct queries in an hour, the bucket keeps the busiest BUCKET_CAP.
    recorder.record("catalog", tenant, "popular", 3, 1.0, now_s=now)
    recorder.record("catalog", tenant, "popular", 3, 1.0, now_s=now)
    for start in range(0, BUCKET_CAP + 20, 200):
        for i in range(start, min(start + 200, BUCKET_CAP + 20)):
            recorder.record("catalog", tenant, f"query {i}", 1, 1.0, now_s=now)
        await recorder.settle()
    key = bucket_key(engine.settings.queue_prefix, "catalog", int(now // 3600), "top")
    assert await engine.redis.zcard(key) == BUCKET_CAP
    assert await engine.redis.zscore(key, f"{tenant}\tpopular") == 2, "the busiest query stays"
    assert 0 < await engine.redis.ttl(key) <= BUCKET_TTL_S
    assert recorder.dropped == 0 and recorder.failed == 0


class CountingPipelines:
    """The engine's real Redis client, its pipelines (one round trip each) counted."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.pipelines = 0

    def pipeline(self, **options: Any) -> Any:
        self.pipelines += 1
        return self.redis.pipeline(**options)


async def test_records_made_together_are_written_in_one_round_trip_with_the_same_figures(engine: Engine) -> None:
    client = CountingPipelines(engine.redis)
    recorder = SearchAnalytics(client, engine.settings.queue_prefix, enabled=True)
    now = time.time()
    for i in range(40):  # four queries, ten searches each; query 0 never answers anything
        recorder.record("code", "org:acme", f"Query {i % 4}", 0 if i % 4 == 0 else 2, float(i), now_s=now)
    await recorder.settle()
    assert client.pipelines == 1
    hour = int(now // 3600)
    prefix = engine.settings.queue_prefix
    top = await engine.redis.zrange(bucket_key(prefix, "code", hour, "top"), 0, -1, withscores=True)
    assert sorted(top) == [(f"org:acme\tquery {q}".encode(), 10.0) for q in range(4)]
    none = await engine.redis.zrange(bucket_key(prefix, "code", hour, "none"), 0, -1, withscores=True)
    assert none == [(b"org:acme\tquery 0", 10.0)]
    slow = dict(await engine.redis.zrange(bucket_key(prefix, "code", hour, "slow"), 0, -1, withscores=True))
    assert slow == {f"org:acme\tquery {q}".encode(): 36.0 + q for q in range(4)}, "each query's slowest search"
    for kind in ("top", "none", "slow"):
        assert 0 < await engine.redis.ttl(bucket_key(prefix, "code", hour, kind)) <= BUCKET_TTL_S


def test_queries_are_normalized_and_capped() -> None:
    assert normalize_query("  Send\tan \n EMAIL  ") == "send an email"
    assert normalize_query("x" * 500) == "x" * 200
    assert normalize_query("   ") == ""


async def test_another_deployment_prefix_sees_nothing(client: Client, settings: Settings, tmp_path: Path) -> None:
    await _search(client, "/v1/actions/search", ALICE, "only in the first deployment")
    await _settled(client)
    mine = await get_json(client, "/admin/api/analytics")
    assert _row(mine["surfaces"]["actions"]["top"], "only in the first deployment")["count"] == 1
    other_prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    other = with_settings(settings, queue_prefix=other_prefix, data_dir=tmp_path / "other-data", worker_in_process=False)
    try:
        async with running_app(other) as second:
            theirs = await get_json(second, "/admin/api/analytics")
            assert theirs["tenants"] == []
            assert all(surface["top"] == [] and surface["slowest"] == [] for surface in theirs["surfaces"].values())
    finally:
        await forget_deployment(client.app[ENGINE].redis, other_prefix)


async def test_setting_off_records_nothing_in_redis_but_metrics_count(settings: Settings) -> None:
    async with running_app(settings, search_analytics=False) as client:
        before = await (await client.get("/metrics")).text()
        await _search(client, "/v1/actions/search", ALICE, "nothing recorded")
        await _search(client, "/v1/actions/search", ALICE, "nothing recorded")
        await _settled(client)
        after = await (await client.get("/metrics")).text()
        assert _counter(after, "agentsearch_searches_total", "actions") == _counter(before, "agentsearch_searches_total", "actions") + 2
        assert _counter(after, "agentsearch_searches_no_results_total", "actions") == _counter(before, "agentsearch_searches_no_results_total", "actions") + 2
        assert await _analytics_keys(client.app[ENGINE]) == []
        report = await get_json(client, "/admin/api/analytics")
        assert report["recording"] is False and report["surfaces"]["actions"]["top"] == []
        assert 'id="analytics-off"' in await get_page(client, "/admin/analytics")


async def test_metrics_count_searches_and_no_result_searches_per_surface(client: Client) -> None:
    before = await (await client.get("/metrics")).text()
    await _search(client, "/v1/catalog/search", ALICE, "anything at all", ranking="lexical")
    after = await (await client.get("/metrics")).text()
    assert "# TYPE agentsearch_searches_total counter" in after
    assert _counter(after, "agentsearch_searches_total", "catalog") == _counter(before, "agentsearch_searches_total", "catalog") + 1
    assert _counter(after, "agentsearch_searches_no_results_total", "catalog") == _counter(before, "agentsearch_searches_no_results_total", "catalog") + 1


async def test_only_admins_see_analytics_and_bad_filters_are_400(client: Client) -> None:
    await _search(client, "/v1/actions/search", ALICE, "private words of acme")
    await _settled(client)
    for headers, status in (({}, 401), (ALICE, 403), (auth("mallory", org="acme"), 403)):
        response = await client.get("/admin/api/analytics", headers=headers)
        body = await response.json()
        assert response.status == status and set(body) == {"error"}, body
        assert "private words" not in await response.text()
    page = await client.get("/admin/analytics", allow_redirects=False)
    assert page.status == 303 and page.headers["Location"] == "/admin/login"
    refused = await client.get("/admin/analytics", headers=ALICE, allow_redirects=False)
    text = await refused.text()
    assert refused.status == 403 and "admin token" in text and "private words" not in text
    for query, says in (
        ("surface=nope", "surface must be one of actions, catalog, code"),
        ("limit=0", "limit must be between 1 and 100"),
        ("limit=many", "limit must be an integer"),
        ("tenant=", "are empty"),
        ("tenant=" + "x" * 201, "tenant is longer than 200"),
        ("who=me", "unknown query parameter(s) who"),
    ):
        body = await get_json(client, f"/admin/api/analytics?{query}", headers=ADMIN, status=400)
        assert says in body["error"]["message"], (query, body)


async def test_redis_down_searches_answer_and_the_failure_is_logged_once(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    # Nothing listens on port 1: a real refused connection, as when Redis is down.
    down = replace(settings, redis_url="redis://127.0.0.1:1/0", worker_in_process=False, embeddings_model=None)
    caplog.set_level(logging.WARNING, logger="service.engine.analytics")
    async with running_app(down) as client:
        for _ in range(3):
            answer = await _search(client, "/v1/catalog/search", ALICE, "invoice billing")
            assert answer["isError"] is False
        recorder = analytics_of(client.app[ENGINE])
        await recorder.settle()
        assert recorder.failed == 3
    warnings = [r for r in caplog.records if r.name == "service.engine.analytics"]
    assert len(warnings) == 1 and "could not write to Redis" in warnings[0].getMessage(), [r.getMessage() for r in warnings]
