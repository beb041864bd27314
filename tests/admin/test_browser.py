"""The dashboard in headless Chromium (Playwright, Debian's ``chromium``): log in, watch counts change as jobs
run, retry a failed job, abort a queued one, read it with JavaScript off; the tabs and their counts, bulk
retry, the confirmation before a delete (confirm(), or the server's page with JavaScript off), and the
layout at 390 px. Screenshots go to test-artifacts/; with ``AGENTSEARCH_ADMIN_SCREENSHOTS=docs`` each
tab's also goes to docs/admin-<tab>.png.

One browser and one app for the module (each costs seconds); each test uses its own jobs and page.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from playwright.async_api import Browser, async_playwright, expect

from service.engine.analytics import analytics_of
from service.engine.queue import forget_deployment
from service.settings import Settings
from service.state import ENGINE
from tests.actions.helpers import GMAIL, SLACK, oauth, put_instances, put_templates
from tests.admin.helpers import HOLD, admin_client, enqueue_hold, job, release, wait_status
from tests.callers import ADMIN, ALICE, BOB, SALES_ALICE, TEST_SECRET, auth, token_of
from tests.catalog.fixtures import CAPABILITIES, DOMAINS, put, wait_embedded
from tests.helpers import REDIS_URL, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "Debian's chromium is not installed: `make chromium` installs it (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    executable = chromium_path()
    async with async_playwright() as playwright:
        # launch() starts Chromium on a fresh temporary profile (user data dir) of its own.
        launched = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """The service on a real port (TestServer binds 127.0.0.1), with the hold job and fast sampling."""
    base = tmp_path_factory.mktemp("admin-browser")
    (base / "workspaces").mkdir()
    prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    settings = Settings(
        data_dir=base / "data",
        redis_url=REDIS_URL,
        queue_prefix=prefix,
        jwt_secret=TEST_SECRET,
        allowed_roots=(base / "workspaces",),
        sweep_interval_s=60,
        worker_health_check_s=5,
        job_timeout_s=60,
    )
    try:
        async with admin_client(settings, sample_interval_s=0.5) as client:
            yield client
    finally:
        redis = aioredis.from_url(REDIS_URL)
        try:
            await forget_deployment(redis, prefix)
        finally:
            await redis.aclose()


async def _log_in(page: Any, base: str) -> None:
    await page.goto(f"{base}/admin")
    assert page.url.endswith("/admin/login")
    await page.fill("#token", token_of(ADMIN))
    await page.click("#login-form button[type=submit]")
    await page.wait_for_url(f"{base}/admin")


async def _answer(dialog: Any, asked: list[str], *, accept: bool) -> None:
    """Answer the page's confirm() as an admin would, noting its question."""
    asked.append(dialog.message)
    await (dialog.accept() if accept else dialog.dismiss())


def _cell(page: Any, kind: str, field: str) -> Any:
    return page.locator(f'#kind-counts tr[data-kind="{kind}"] td[data-count="{field}"]')


async def test_live_dashboard_retry_and_abort_in_chromium(browser: Browser, served: Any) -> None:
    base = str(served.make_url("")).rstrip("/")
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    try:
        await _log_in(page, base)
        cookie = next(c for c in await context.cookies() if c["name"] == "agentsearch_admin")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/admin"
        assert await page.evaluate("document.cookie") == ""  # the token is out of the page's reach
        await page.evaluate("window.notReloaded = true")

        # Counts change as jobs run, with no reload.
        # One at a time: jobs enqueued in the same millisecond share a score in arq's sorted set,
        # which then orders them by id ("b-next" before "b-run").
        first = await enqueue_hold(served, "b-run")
        await wait_status(served, first, "in_progress")
        second = await enqueue_hold(served, "b-next")
        await expect(_cell(page, HOLD, "in_progress")).to_have_text("1", timeout=TIMEOUT_MS)
        await expect(_cell(page, HOLD, "queued")).to_have_text("1", timeout=TIMEOUT_MS)
        await release(served, "b-run")
        await expect(_cell(page, HOLD, "complete")).to_have_text("1", timeout=TIMEOUT_MS)
        await release(served, "b-next")
        await expect(_cell(page, HOLD, "complete")).to_have_text("2", timeout=TIMEOUT_MS)
        assert [(await job(served, i))["status"] for i in (first, second)] == ["complete", "complete"]

        # A real job fails for real (embed_records of a collection no surface owns); retry it from its row.
        failing = f"{served.app[ENGINE].settings.queue_prefix}:test:b-fail"
        await served.app[ENGINE].queue.enqueue("embed_records", "no-such-collection", [["k", "h"]], job_id=failing)
        await expect(_cell(page, "embed_records", "failed")).to_have_text("1", timeout=TIMEOUT_MS)
        await page.locator(f'#jobs-body tr[data-job-id="{failing}"] button.retry').click()
        await expect(page.locator("#notice")).to_contain_text(f"Job {failing} retried as", timeout=TIMEOUT_MS)
        retried_as = (await job(served, failing))["retried_as"]
        await expect(_cell(page, "embed_records", "failed")).to_have_text("2", timeout=TIMEOUT_MS)
        await expect(page.locator(f'#jobs-body tr[data-job-id="{retried_as}"]')).to_contain_text(f"retry of {failing}", timeout=TIMEOUT_MS)

        # Abort a queued job: it waits behind a running one, then fails as aborted without running.
        busy = await enqueue_hold(served, "b-busy")
        await wait_status(served, busy, "in_progress")
        queued = await enqueue_hold(served, "b-queued")
        row = page.locator(f'#jobs-body tr[data-job-id="{queued}"]')
        await expect(row).to_have_attribute("data-status", "queued", timeout=TIMEOUT_MS)
        asked: list[str] = []
        page.once("dialog", lambda dialog: _answer(dialog, asked, accept=True))
        await row.locator("button.abort").click()  # Abort asks first (confirm())
        await expect(page.locator("#notice")).to_contain_text(f"Abort of job {queued} requested", timeout=TIMEOUT_MS)
        assert asked == [f"Abort job {queued}?"]
        await expect(row).to_contain_text("abort requested", timeout=TIMEOUT_MS)
        await release(served, "b-busy")
        await expect(row).to_contain_text("failed (aborted)", timeout=TIMEOUT_MS)
        await expect(page.locator("#chart svg polyline[data-queue=embed]")).to_have_count(2, timeout=TIMEOUT_MS)  # depth, throughput
        await expect(page.locator('#workers-body tr[data-queue="embed"]')).to_have_attribute("data-status", "up")

        assert await page.evaluate("window.notReloaded === true"), "the page refreshed itself without a full reload"
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
    finally:
        await context.close()


async def test_dashboard_reads_and_acts_with_javascript_off(browser: Browser, served: Any) -> None:
    base = str(served.make_url("")).rstrip("/")
    context = await browser.new_context(java_script_enabled=False, viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    try:
        await _log_in(page, base)
        finished = await enqueue_hold(served, "n-done")
        await release(served, "n-done")
        await wait_status(served, finished, "complete")
        # Without JavaScript the page reloads itself (<meta refresh>) and shows what changed.
        async with page.expect_navigation(timeout=TIMEOUT_MS):
            pass
        row = page.locator(f'#jobs-body tr[data-job-id="{finished}"]')
        await expect(row).to_have_attribute("data-status", "complete")
        await expect(row).to_contain_text('{"held":"n-done"}')

        await row.locator("td.id a").click()
        await expect(page.locator("#job-status")).to_have_text("complete")
        await expect(page.locator("#job-detail")).to_contain_text(HOLD)

        await page.goto(f"{base}/admin")
        await page.click("#sweep-form button")
        await page.wait_for_url(f"{base}/admin")
        await expect(page.locator("#notice")).to_contain_text("Enqueued the sweep as job")
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "admin-dashboard-no-js.png"), full_page=True)
    finally:
        await context.close()


TABS = ("busy", "queues", "retries", "scheduled", "dead")
# Set to a folder (docs) to save a screenshot of each tab there: docs/admin-<tab>.png.
SCREENSHOTS = os.environ.get("AGENTSEARCH_ADMIN_SCREENSHOTS")


async def _fail_for_real(served: Any, name: str) -> str:
    """A real job failing for real on the bulk queue: embed_records of a collection no surface owns."""
    job_id = f"{served.app[ENGINE].settings.queue_prefix}:test:{name}"
    await served.app[ENGINE].queue.enqueue("embed_records", "no-such-collection", [["k", "h"]], job_id=job_id, bulk=True)
    await wait_status(served, job_id, "failed")
    return job_id


async def test_tabs_agree_with_their_counts_and_fit_a_phone(browser: Browser, served: Any) -> None:
    base = str(served.make_url("")).rstrip("/")
    running = await enqueue_hold(served, "t-run")
    await wait_status(served, running, "in_progress")
    waiting = await enqueue_hold(served, "t-wait")
    later = await enqueue_hold(served, "t-later", defer_s=600)
    again = await enqueue_hold(served, "t-again", "retry_later", fast=True)
    await release(served, "t-again")
    await wait_status(served, again, "deferred")
    dead = await _fail_for_real(served, "t-dead")
    expected = {"busy": running, "queues": waiting, "retries": again, "scheduled": later, "dead": dead}
    desktop = await browser.new_context(viewport={"width": 1280, "height": 900})
    phone = await browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = await desktop.new_page()
        await _log_in(page, base)
        if SCREENSHOTS:
            await page.screenshot(path=str(ROOT / SCREENSHOTS / "admin-dashboard.png"), full_page=True)
        for tab in TABS:
            await page.click(f'#tabs a[data-tab="{tab}"]')  # the tabs are plain links
            await page.wait_for_url(f"{base}/admin/{tab}")
            rows = page.locator("#tab-rows tr[data-job-id]")
            await expect(page.locator(f"#count-{tab}")).to_have_text(str(await rows.count()))
            await expect(page.locator(f'#tab-rows tr[data-job-id="{expected[tab]}"]')).to_have_count(1)
            if SCREENSHOTS:
                await page.screenshot(path=str(ROOT / SCREENSHOTS / f"admin-{tab}.png"), full_page=True)
        await page.goto(f"{base}/admin/jobs/{dead}")
        await expect(page.locator("#job-traceback")).to_contain_text("LookupError")
        if SCREENSHOTS:
            await page.screenshot(path=str(ROOT / SCREENSHOTS / "admin-dead-job.png"), full_page=True)

        small = await phone.new_page()
        await _log_in(small, base)
        for path in ("/admin", *(f"/admin/{tab}" for tab in TABS), f"/admin/jobs/{dead}"):
            await small.goto(f"{base}{path}")
            width = await small.evaluate("document.scrollingElement.scrollWidth")
            assert width <= 390, f"{path} is {width} px wide at 390 px: the page scrolls sideways"
        await small.goto(f"{base}/admin/dead")
        await small.locator(f'#tab-rows tr[data-job-id="{dead}"] button.retry').click()
        notice = small.locator("#notice")
        await expect(notice).to_contain_text(f"Job {dead} retried as", timeout=TIMEOUT_MS)
        box = await notice.bounding_box()
        assert box is not None and box["y"] < 50 and box["x"] >= 0 and box["x"] + box["width"] <= 390, box  # at the top, in view
        if SCREENSHOTS:
            await small.screenshot(path=str(ROOT / SCREENSHOTS / "admin-phone-dead.png"))
    finally:
        await release(served, "t-run")
        await release(served, "t-wait")
        await desktop.close()
        await phone.close()


async def test_bulk_retry_and_confirmed_delete_on_dead(browser: Browser, served: Any) -> None:
    base = str(served.make_url("")).rstrip("/")
    failed = [await _fail_for_real(served, f"k-{i}") for i in range(3)]
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    plain = await browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
    try:
        page = await context.new_page()
        await _log_in(page, base)
        await page.goto(f"{base}/admin/dead")
        for job_id in failed[:2]:
            await page.locator(f'#tab-rows input[value="{job_id}"]').check()
        await page.click("#bulk-retry")
        await expect(page.locator("#notice")).to_contain_text("Retried: 2 jobs", timeout=TIMEOUT_MS)
        for job_id in failed[:2]:  # back in the queue under a new id: it runs (and fails again, for the same reason)
            retried_as = (await job(served, job_id))["retried_as"]
            assert (await wait_status(served, retried_as, "failed"))["retry_of"] == job_id
            await expect(page.locator(f'#tab-rows tr[data-job-id="{job_id}"]')).to_have_count(0)

        # Delete asks first: dismissed, nothing is deleted; accepted, the job is gone.
        asked: list[str] = []
        await page.locator(f'#tab-rows input[value="{failed[2]}"]').check()
        page.once("dialog", lambda dialog: _answer(dialog, asked, accept=False))
        await page.click("#bulk-delete")
        await wait_until(lambda: len(asked) == 1, timeout_s=10)
        assert (await job(served, failed[2]))["status"] == "failed"
        page.once("dialog", lambda dialog: _answer(dialog, asked, accept=True))
        await page.click("#bulk-delete")
        await expect(page.locator("#notice")).to_contain_text("Deleted: 1 job", timeout=TIMEOUT_MS)
        assert asked == ["Delete the selected jobs? This cannot be undone."] * 2
        await expect(page.locator(f'#tab-rows tr[data-job-id="{failed[2]}"]')).to_have_count(0)

        # With JavaScript off the server asks: a confirmation page, then the delete.
        survivor = await _fail_for_real(served, "k-nojs")
        bare = await plain.new_page()
        await _log_in(bare, base)
        await bare.goto(f"{base}/admin/dead")
        await bare.locator(f'#tab-rows input[value="{survivor}"]').check()
        await bare.click("#bulk-delete")
        await expect(bare.locator("#confirm h2")).to_have_text("Delete 1 job from Dead? This cannot be undone.")
        assert (await job(served, survivor))["status"] == "failed"
        await bare.click("#confirm-form button")
        await bare.wait_for_url(f"{base}/admin/dead")
        await expect(bare.locator("#notice")).to_contain_text("Deleted: 1 job")
        await expect(bare.locator(f'#tab-rows tr[data-job-id="{survivor}"]')).to_have_count(0)
    finally:
        await context.close()
        await plain.close()


async def test_analytics_page_lists_real_searches_filters_by_tenant_and_fits_a_phone(browser: Browser, served: Any) -> None:
    """The Analytics tab after real searches: per surface the top, no-result and slowest queries; the
    tenant filter is a plain form; at 390 px the page does not scroll sideways."""
    base = str(served.make_url("")).rstrip("/")
    await put_templates(served, [GMAIL, SLACK])
    await put_instances(served, SALES_ALICE, oauth("gmail_work", "gmail", "google"), oauth("slack_team", "slack", "slack"))
    searches = [
        ("/v1/actions/search", SALES_ALICE, "send an email"),
        ("/v1/actions/search", SALES_ALICE, "Send an  email"),
        ("/v1/actions/search", SALES_ALICE, "send an email"),
        ("/v1/actions/search", SALES_ALICE, "post a message to a channel"),
        ("/v1/actions/search", SALES_ALICE, "list messages in the mailbox"),
        ("/v1/actions/search", BOB, "send an email"),
        ("/v1/catalog/search", ALICE, "quarterly tax filing"),
    ]
    for path, headers, query in searches:
        body = {"query": query, **({"ranking": "lexical"} if path == "/v1/catalog/search" else {})}
        response = await served.post(path, json=body, headers=headers)
        assert response.status == 200, await response.text()
    await analytics_of(served.app[ENGINE]).settle()
    desktop = await browser.new_context(viewport={"width": 1280, "height": 900})
    phone = await browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = await desktop.new_page()
        await _log_in(page, base)
        await page.goto(f"{base}/admin/busy")
        await page.click('#tabs a[data-tab="analytics"]')  # a plain link in the header bar of every page
        await page.wait_for_url(f"{base}/admin/analytics")
        await expect(page.locator('#tabs a[data-tab="analytics"]')).to_have_attribute("aria-current", "page")
        await expect(page.locator('#top-actions tr[data-query="send an email"] td[data-count]')).to_have_text("4")
        await expect(page.locator('#no-results-actions tr[data-query="send an email"] td.tenants')).to_have_text("org:bobco")
        await expect(page.locator('#no-results-catalog tr[data-query="quarterly tax filing"]')).to_have_count(1)
        await expect(page.locator("#slowest-actions tr[data-query] td[data-ms]")).to_have_count(3)
        if SCREENSHOTS:
            await page.screenshot(path=str(ROOT / SCREENSHOTS / "admin-analytics.png"), full_page=True)
        await page.select_option("#analytics-tenant", "org:bobco")
        await page.click("#analytics-form button[type=submit]")
        await page.wait_for_url("**/admin/analytics?tenant=org%3Abobco*")
        await expect(page.locator("#top-actions tr[data-query]")).to_have_count(1)
        await expect(page.locator('#top-actions tr[data-query="send an email"] td[data-count]')).to_have_text("1")
        await expect(page.locator("#top-catalog tr[data-query]")).to_have_count(0)

        small = await phone.new_page()
        await _log_in(small, base)
        await small.goto(f"{base}/admin/analytics")
        await expect(small.locator('#top-actions tr[data-query="send an email"]')).to_have_count(1)
        width = await small.evaluate("document.scrollingElement.scrollWidth")
        assert width <= 390, f"/admin/analytics is {width} px wide at 390 px: the page scrolls sideways"
        ARTIFACTS.mkdir(exist_ok=True)
        await small.screenshot(path=str(ARTIFACTS / "admin-analytics-phone.png"), full_page=True)
    finally:
        await desktop.close()
        await phone.close()


async def test_playground_searches_as_a_caller_and_fits_a_phone(browser: Browser, served: Any) -> None:
    """The playground in Chromium: pick the surface and the caller, search, read each hit's channel
    scores and the timings; the URL reopens the same trace; an empty query answers the form with its
    message; at 390 px the page does not scroll sideways (the table scrolls in its box)."""
    base = str(served.make_url("")).rstrip("/")
    park = {"type": "package", "id": "park-mailer", "name": "park-mailer", "summary": "Email the park rangers a daily message digest.", "tags": ["email"]}
    await put(served, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(served, [park], caller=auth("pat", org="parkco"), owner="org")
    await wait_embedded(served)
    desktop = await browser.new_context(viewport={"width": 1280, "height": 900})
    phone = await browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = await desktop.new_page()
        await _log_in(page, base)
        await page.click('#tabs a[data-tab="playground"]')  # a plain link in the header bar
        await page.wait_for_url(f"{base}/admin/playground")
        await page.select_option("#pg-surface", "catalog")
        await page.fill("#pg-sub", "pat")
        await page.fill("#pg-org", "parkco")
        await page.fill("#pg-query", "send an email message")
        await page.click("#pg-run")
        await page.wait_for_url("**/admin/playground?*query=send+an+email+message*")
        rows = page.locator("#pg-results tbody tr[data-rank]")
        await expect(rows.first).to_have_attribute("data-id", "capability:emailSend")
        await expect(page.locator('#pg-results tr[data-id="package:park-mailer"]')).to_have_count(1)  # the org's package reaches pat
        assert await rows.count() >= 3
        for channel in ("score", "lexical", "dense", "fused"):
            await expect(rows.first.locator(f'td[data-channel="{channel}"]')).to_have_text(re.compile(r"^-?\d+\.\d{4}$"))
        await expect(page.locator("#pg-total")).to_have_text(re.compile(r"^[\d.]+ ms$"))
        await expect(page.locator('#pg-timings tr[data-phase="loadAndRank"]')).to_have_count(1)
        await expect(page.locator("#pg-caller")).to_contain_text("global, user:pat, org:parkco")
        if SCREENSHOTS:
            await page.screenshot(path=str(ROOT / SCREENSHOTS / "admin-playground.png"), full_page=True)
        shared = page.url

        await page.fill("#pg-query", "")
        await page.click("#pg-run")
        await expect(page.locator("#playground-error")).to_contain_text("query is empty")
        await expect(page.locator("#pg-results")).to_have_count(0)
        await expect(page.locator("#pg-sub")).to_have_value("pat")  # the form keeps what was typed

        small = await phone.new_page()
        await _log_in(small, base)
        await small.goto(shared)
        await expect(small.locator("#pg-results tbody tr[data-rank]").first).to_have_attribute("data-id", "capability:emailSend")
        width = await small.evaluate("document.scrollingElement.scrollWidth")
        assert width <= 390, f"/admin/playground is {width} px wide at 390 px: the page scrolls sideways"
        ARTIFACTS.mkdir(exist_ok=True)
        await small.screenshot(path=str(ARTIFACTS / "admin-playground-phone.png"), full_page=True)
    finally:
        await desktop.close()
        await phone.close()
