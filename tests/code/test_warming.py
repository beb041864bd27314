"""Warming progress: the share embedded, the rate measured from samples in Redis, the expected finish
and the note on going faster, in a workspace's state and on the dashboard."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.code.state import workspaces_of
from service.code.warming import MIN_SPAN_S, WINDOW_S, Sample, WarmingSamples, measured_rate, warming_progress
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ADMIN, BOB, token_of
from tests.code.helpers import register, search, status, wait_indexed, wait_model_ready

NOW = 1_800_000_000.0
MODEL = "local/all-MiniLM-L6-v2"


@pytest.fixture
def client(shared_client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    return shared_client


def test_no_rate_before_readings_span_min_span() -> None:
    for samples in ([], [Sample(NOW - MIN_SPAN_S + 1, 0)]):
        progress = warming_progress(samples, embedded=10, total=40, now=NOW, model=MODEL)
        assert progress == {"embedded": 10, "total": 40, "share": 0.25, "rate_per_s": None, "eta_s": None, "expected_finish": None, "note": None}


def test_rate_eta_and_expected_finish_from_samples() -> None:
    samples = [Sample(NOW - 60, 0), Sample(NOW - 30, 300)]
    progress = warming_progress(samples, embedded=600, total=1200, now=NOW, model=MODEL)
    assert progress["rate_per_s"] == 10.0 and progress["eta_s"] == 60 and progress["share"] == 0.5
    assert datetime.fromisoformat(progress["expected_finish"]) == datetime.fromtimestamp(NOW + 60, tz=UTC)
    assert progress["note"] is None, "an hour or less needs no advice"


def test_an_eta_over_an_hour_says_how_to_go_faster() -> None:
    progress = warming_progress([Sample(NOW - 100, 0)], embedded=100, total=7_300, now=NOW, model=MODEL)
    assert progress["rate_per_s"] == 1.0 and progress["eta_s"] == 7_200
    note = progress["note"]
    assert "7200 chunks left with local/all-MiniLM-L6-v2 takes about 2.0 hours" in note
    assert "OpenAI-compatible" in note and "AGENTSEARCH_PROVIDER_<ID>_BASE_URL" in note
    assert 'POST /v1/workspaces) with search.embeddings_model "<ID>/<model_id>"' in note


def test_the_rate_counts_only_the_window_since_the_embedded_count_last_fell() -> None:
    samples = [Sample(NOW - WINDOW_S - 60, 0), Sample(NOW - 100, 500), Sample(NOW - 50, 10)]
    assert measured_rate([*samples, Sample(NOW, 60)]) == 1.0, "the drop (a changed model) starts a new measurement"
    progress = warming_progress(samples, embedded=60, total=160, now=NOW, model=MODEL)
    assert progress["rate_per_s"] == 1.0 and progress["eta_s"] == 100
    stalled = warming_progress([Sample(NOW - 60, 60)], embedded=60, total=160, now=NOW, model=None)
    assert stalled["rate_per_s"] == 0.0 and stalled["eta_s"] is None and stalled["expected_finish"] is None


@pytest.mark.asyncio(loop_scope="module")
async def test_another_deployment_on_the_same_redis_sees_none_of_the_samples(client: TestClient[Any, Any], module_settings: Settings) -> None:
    redis = client.app[ENGINE].redis
    ours = WarmingSamples(redis, module_settings.queue_prefix)
    theirs = WarmingSamples(redis, f"{module_settings.queue_prefix}-other")
    now = time.time()
    assert await ours.record("ws_shared", now - 30, 5) == []
    assert await ours.record("ws_shared", now, 20) == [Sample(now - 30, 5)]
    assert await theirs.record("ws_shared", now, 7) == [], "the same workspace id under another prefix is another key"
    assert await redis.zcard(ours.key("ws_shared")) == 2 and await redis.zcard(theirs.key("ws_shared")) == 1
    assert 0 < await redis.ttl(ours.key("ws_shared")) <= WINDOW_S


@pytest.mark.asyncio(loop_scope="module")
async def test_status_and_dashboard_measure_the_rate_of_real_embedding(client: TestClient[Any, Any], module_settings: Settings, tree: Path) -> None:
    wid = (await register(client, tree))["id"]
    indexed = await wait_indexed(client, wid)
    await wait_model_ready(client)
    assert indexed["warming"] is False and indexed["warming_progress"] is None, "cold is not warming"
    workspaces = workspaces_of(client.app[ENGINE])
    registered = workspaces.registry.get(wid)
    assert registered is not None
    await workspaces.mark_warm(registered)

    first = await status(client, wid)
    read_at = time.time()
    assert first["warming"] is True
    assert first["warming_progress"] == {
        "embedded": 0,
        "total": first["chunks"],
        "share": 0.0,
        "rate_per_s": None,
        "eta_s": None,
        "expected_finish": None,
        "note": None,
    }, "one reading measures no rate"

    found = await search(client, wid, query="give the customer their money back", path="src/pkg")
    embedded = found["meta"]["embedded_now"]
    assert 0 < embedded < first["chunks"]
    await asyncio.sleep(max(MIN_SPAN_S - (time.time() - read_at), 0.0) + 0.2)

    later = (await status(client, wid))["warming_progress"]
    assert later["embedded"] == embedded and later["share"] == round(embedded / first["chunks"], 4)
    assert 0 < later["rate_per_s"] <= embedded / MIN_SPAN_S * 1.01, "measured since the first reading (3 significant digits)"
    assert later["eta_s"] == pytest.approx(math.ceil((first["chunks"] - embedded) / later["rate_per_s"]), rel=0.01, abs=1)
    assert datetime.fromisoformat(later["expected_finish"]) > datetime.now(tz=UTC)
    assert later["note"] is None
    key = WarmingSamples(client.app[ENGINE].redis, module_settings.queue_prefix).key(wid)
    assert await client.app[ENGINE].redis.zcard(key) >= 1, "the samples live under the deployment's prefix"

    assert (await client.get(f"/v1/workspaces/{wid}", headers=BOB)).status == 404, "another tenant sees nothing of it"

    index = await (await client.get("/admin/api/index", headers=ADMIN)).json()
    row = next(row for row in index["warming_workspaces"] if row["id"] == wid)
    assert row["embedded"] == embedded and row["total"] == first["chunks"] and row["rate_per_s"] > 0 and row["expected_finish"]
    page = await (await client.get("/admin", headers=ADMIN)).text()
    shown = page.split('id="workspace-warming"', 1)[1].split("</tbody>", 1)[0]
    assert f'data-workspace="{wid}"' in shown and f"{row['share'] * 100:.1f}%" in shown and "chunks/s" in shown


@pytest.mark.asyncio(loop_scope="module")
async def test_the_dashboards_script_redraws_the_warming_table_in_chromium(client: TestClient[Any, Any], module_settings: Settings, tree: Path) -> None:
    """Headless Chromium (Debian's) on the real dashboard; the page's clock is Playwright's, so the
    30 s index refresh runs when the test moves the clock on, not after half a minute of waiting."""
    from playwright.async_api import async_playwright, expect

    from tests.admin.test_browser import CHROMIUM_FLAGS, TIMEOUT_MS, chromium_path

    wid = (await register(client, tree))["id"]
    await wait_indexed(client, wid)
    await wait_model_ready(client)
    base = str(client.make_url("")).rstrip("/")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            await page.clock.install()
            await page.goto(f"{base}/admin")
            await page.fill("#token", token_of(ADMIN))
            await page.click("#login-form button[type=submit]")
            await page.wait_for_url(f"{base}/admin")
            row = page.locator(f'#workspace-warming tr[data-workspace="{wid}"]')
            await expect(row).to_have_count(0)  # not warming when the page was drawn

            workspaces = workspaces_of(client.app[ENGINE])
            registered = workspaces.registry.get(wid)
            assert registered is not None
            await workspaces.mark_warm(registered)
            await page.clock.fast_forward(31_000)
            await expect(row).to_contain_text("0.0%", timeout=TIMEOUT_MS)
            await expect(row).to_contain_text("measuring")

            found = await search(client, wid, query="give the customer their money back", path="src/pkg")
            embedded = found["meta"]["embedded_now"]
            total = (await status(client, wid))["chunks"]
            await asyncio.sleep(MIN_SPAN_S + 0.2)  # the rate needs readings this far apart
            await status(client, wid)  # a reading
            await page.clock.fast_forward(31_000)
            await expect(row).to_contain_text(f"{embedded / total * 100:.1f}%", timeout=TIMEOUT_MS)
            await expect(row).to_contain_text("chunks/s")
            assert await row.locator("td.num").first.get_attribute("title") == f"{embedded} of {total} chunks"
        finally:
            await browser.close()
