"""The tabs (Busy, Queues, Retries, Scheduled, Dead) and their header counts, the bulk actions, a failed
job's stack trace, the processes table, ``/metrics`` and the access log: real jobs in the real
in-process arq worker on real Redis."""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import Any
from urllib.parse import quote, unquote

import pytest
from aiohttp.test_utils import TestClient

from service.settings import Settings
from service.state import ENGINE
from tests.admin.helpers import (
    HOLD,
    admin_client,
    enqueue_hold,
    get_json,
    get_page,
    header_counts,
    job,
    post_json,
    queue_cells,
    release,
    tab_ids,
    wait_status,
)
from tests.callers import ADMIN, token_of
from tests.helpers import wait_until, with_settings

TABS = ("busy", "queues", "retries", "scheduled", "dead")
# Which column of the queue tables each header count sums.
COLUMN_OF = {"busy": "in_progress", "queues": "queued", "retries": "retrying", "scheduled": "deferred", "processed": "complete", "failed": "failed"}


def _quiet(settings: Settings) -> Settings:
    """The sweeper cron once a minute, so that the queues hold the test's jobs alone most of the time."""
    return with_settings(settings, sweep_interval_s=60)


async def _fail_for_real(client: TestClient[Any, Any], name: str, items: int = 1) -> str:
    """A real job failing for real on the bulk queue: embed_records of a collection no surface owns."""
    engine = client.app[ENGINE]
    job_id = f"{engine.settings.queue_prefix}:test:{name}"
    pairs = [[f"key-{i}", "hash"] for i in range(items)]
    assert await engine.queue.enqueue("embed_records", "no-such-collection", pairs, job_id=job_id, bulk=True) is not None
    await wait_status(client, job_id, "failed")
    return job_id


async def test_header_counts_equal_each_tabs_rows(settings: Settings) -> None:
    async with admin_client(_quiet(settings)) as client:
        # Retries: a job that ran once and asked arq to run it again in ten minutes.
        again = await enqueue_hold(client, "x-again", "retry_later")
        await release(client, "x-again")
        assert (await wait_status(client, again, "deferred"))["tries"] == 1
        busy = await enqueue_hold(client, "x-busy")
        await wait_status(client, busy, "in_progress")
        queued = [await enqueue_hold(client, f"x-q{i}") for i in range(2)]  # behind x-busy: the embed worker runs one job
        later = await enqueue_hold(client, "x-later", defer_s=600)
        dead = [await _fail_for_real(client, "x-dead")]
        dead.append(await enqueue_hold(client, "x-fails", "fail", fast=True))
        await release(client, "x-fails")
        await wait_status(client, dead[1], "failed")

        pages = {tab: await get_page(client, f"/admin/{tab}") for tab in TABS}
        for tab, html in pages.items():
            counts = header_counts(html)
            assert set(counts) == {*TABS, "processed", "failed"}, counts
            assert counts[tab] == len(tab_ids(html)), (tab, counts, tab_ids(html))
            assert f'href="/admin/{tab}" data-tab="{tab}" aria-current="page"' in html
        assert busy in tab_ids(pages["busy"])
        assert set(queued) <= set(tab_ids(pages["queues"]))
        assert tab_ids(pages["retries"]) == [again]
        # Beside the test's own deferred job, the sweeper's next cron run may be scheduled already
        # (it is queued ahead of its minute on the fast queue): a real job of the service, not the test's.
        assert [i for i in tab_ids(pages["scheduled"]) if ":sweep_cron:" not in i] == [later]
        assert tab_ids(pages["dead"]) == [dead[1], dead[0]]  # latest failure first

        # The dashboard's tables read the same tally as its header: each count is its column's sum.
        dashboard = await get_page(client, "/admin")
        counts = header_counts(dashboard)
        queues = [queue_cells(dashboard, name) for name in ("embed", "bulk", "fast")]
        for header, column in COLUMN_OF.items():
            assert counts[header] == sum(q[column] for q in queues), (header, counts, queues)
        assert queue_cells(dashboard, "embed") == {**queue_cells(dashboard, "embed"), "in_progress": 1, "queued": 2, "deferred": 1, "retrying": 1}
        assert counts["dead"] == 2 and counts["failed"] == 2
        overview = await get_json(client, "/admin/api/overview")
        assert overview["counts"]["retries"] == 1 and overview["queues"]["embed"]["retrying"] == 1

        await release(client, "x-busy")
        await release(client, "x-q0")
        await release(client, "x-q1")


async def test_bulk_retry_and_delete_on_dead_and_retries(settings: Settings) -> None:
    async with admin_client(_quiet(settings)) as client:
        failed = [await _fail_for_real(client, name) for name in ("d-a", "d-b", "d-c")]
        assert set(tab_ids(await get_page(client, "/admin/dead"))) == set(failed)

        # Retry two of them: they go back to the queue under new ids, run and fail again (for the same reason).
        retried = await post_json(client, "/admin/api/dead/retry", {"ids": failed[:2]}, status=200)
        assert retried["done"] == failed[:2] and retried["refused"] == {} and set(retried["retried_as"]) == set(failed[:2])
        for old, new in retried["retried_as"].items():
            again = await wait_status(client, new, "failed")
            assert again["retry_of"] == old and again["queue"] == "bulk" and "LookupError" in again["error"]
        dead = tab_ids(await get_page(client, "/admin/dead"))
        assert set(dead) == {failed[2], *retried["retried_as"].values()}, "a retried job leaves Dead; its retry is there if it fails"
        twice = await post_json(client, "/admin/api/dead/retry", {"ids": [failed[0]]}, status=200)
        assert twice["done"] == [] and "already retried" in twice["refused"][failed[0]]

        # A plain form (JavaScript off) asks first: the confirmation page deletes nothing.
        form = {"id": failed[2]}
        asked = await client.post("/admin/api/dead/delete", data=form, headers=ADMIN, allow_redirects=False)
        page = await asked.text()
        assert asked.status == 200 and 'id="confirm-form"' in page and "Delete 1 job from Dead?" in page
        assert (await job(client, failed[2]))["status"] == "failed"
        deleted = await client.post("/admin/api/dead/delete", data={**form, "confirmed": "1"}, headers=ADMIN, allow_redirects=False)
        assert deleted.status == 303 and deleted.headers["Location"] == "/admin/dead"
        assert unquote(deleted.cookies["agentsearch_admin_notice"].value) == "Deleted: 1 job."
        await get_json(client, f"/admin/api/jobs/{quote(failed[2], safe='')}", status=404)

        everything = await post_json(client, "/admin/api/dead/delete", {"all": True}, status=200)
        assert sorted(everything["done"]) == sorted(retried["retried_as"].values())
        assert header_counts(await get_page(client, "/admin/dead"))["dead"] == 0

        # Retries: "retry now" makes a waiting job due at once; it runs its second try and completes.
        waiting = await enqueue_hold(client, "w-now", "retry_later", fast=True)
        doomed = await enqueue_hold(client, "w-gone", "retry_later", fast=True)
        await release(client, "w-now")
        await release(client, "w-gone")
        for job_id in (waiting, doomed):
            await wait_status(client, job_id, "deferred")
        assert set(tab_ids(await get_page(client, "/admin/retries"))) == {waiting, doomed}
        now = await post_json(client, "/admin/api/retries/retry", {"ids": [waiting]}, status=200)
        assert now["done"] == [waiting]
        done = await wait_status(client, waiting, "complete")
        assert done["tries"] == 2 and done["result"] == {"held": "w-now"}
        gone = await post_json(client, "/admin/api/retries/delete", {"ids": [doomed, failed[0]]}, status=200)
        assert gone["done"] == [doomed] and "not waiting" in gone["refused"][failed[0]]
        await get_json(client, f"/admin/api/jobs/{quote(doomed, safe='')}", status=404)
        assert tab_ids(await get_page(client, "/admin/retries")) == []

        # Bad input says what to send; a cookie session needs the page's CSRF token.
        for body, message in (({}, "select at least one job"), ({"ids": [waiting], "all": True}, "either ids or all"), ({"ids": "x"}, "list of strings")):
            refused = await post_json(client, "/admin/api/dead/retry", body, status=400)
            assert message in refused["error"]["message"], (body, refused)
        cookie = {"agentsearch_admin": token_of(ADMIN)}
        forged = await client.post("/admin/api/dead/delete", json={"all": True}, cookies=cookie)
        assert forged.status == 403 and "CSRF" in (await forged.json())["error"]["message"]


async def test_failed_job_page_shows_its_stack_trace_and_folds_long_arguments(settings: Settings) -> None:
    async with admin_client(_quiet(settings)) as client:
        failing = await _fail_for_real(client, "t-long", items=512)
        detail = await job(client, failing)
        assert detail["traceback"].startswith("Traceback (most recent call last)") and "LookupError" in detail["traceback"]
        html = await get_page(client, f"/admin/jobs/{quote(failing, safe='')}")
        assert 'id="job-traceback"' in html and "Traceback (most recent call last)" in html
        assert "<summary>argument 2: 512 items</summary>" in html
        assert html.index('class="retry"') < html.index('id="job-args"'), "the Retry button comes before the arguments"
        # A job that completed has no stack trace; its short arguments are shown unfolded.
        ok = await enqueue_hold(client, "t-ok", fast=True)
        await release(client, "t-ok")
        await wait_status(client, ok, "complete")
        assert (await job(client, ok))["traceback"] is None
        page = await get_page(client, f"/admin/jobs/{quote(ok, safe='')}")
        assert "job-traceback" not in page and "<details" not in page


async def test_processes_metrics_and_access_log(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    async with admin_client(_quiet(settings)) as client:
        running = await enqueue_hold(client, "p-run")
        await wait_status(client, running, "in_progress")

        async def reported() -> bool:
            body = await get_json(client, "/admin/api/overview")
            return any(running in p["running_ids"] for p in body["processes"])

        await wait_until(reported, timeout_s=30)  # the next heartbeat (every health check, 5 s here) names it
        html = await get_page(client, "/admin/busy")
        row = re.search(rf'<tr data-host="{re.escape(socket.gethostname())}" data-pid="{os.getpid()}">(.*?)</tr>', html, re.S)
        assert row, "the in-process worker is a process of the table"
        assert "embed" in row.group(1) and "bulk" in row.group(1) and "fast" in row.group(1)
        assert re.search(r'<td class="num">(\d+ MiB|\d+\.\d GiB)</td>', row.group(1)), "the process's memory, in MiB or GiB"
        assert 'data-running="1">1 / ' in row.group(1) and header_counts(html)["busy"] == 1
        process = next(p for p in (await get_json(client, "/admin/api/overview"))["processes"] if p["pid"] == os.getpid())
        assert process["rss_bytes"] > 10 * 2**20 and process["uptime_s"] >= 0 and process["slots"] >= 6

        await release(client, "p-run")
        await wait_status(client, running, "complete")

        async def exported() -> bool:
            text = await (await client.get("/metrics")).text()
            return re.search(rf'agentsearch_job_seconds_count\{{function="{HOLD}",queue="embed",status="complete"\}} 1\.0', text) is not None

        await wait_until(exported, timeout_s=20)  # the sampler refreshes what /metrics reports every interval
        text = await (await client.get("/metrics")).text()
        assert re.search(r'agentsearch_queue_depth\{queue="embed"\} 0\.0', text)
        assert re.search(r'agentsearch_queue_jobs\{queue="fast",state="deferred"\} \d', text)
        assert re.search(r'agentsearch_jobs_total\{queue="embed",status="complete"\} 1\.0', text)
        assert re.search(rf'agentsearch_job_seconds_bucket\{{function="{HOLD}",le="\+Inf",queue="embed",status="complete"\}} 1\.0', text)

        with caplog.at_level(logging.INFO, logger="service.admin.handlers"):
            await get_page(client, "/admin/dead")
            await client.get("/admin/queues")  # no session: to the login form
        lines = [r.getMessage() for r in caplog.records if r.name == "service.admin.handlers"]
        assert any(re.fullmatch(r"admin GET /admin/dead 200 [\d.]+ms user=root", line) for line in lines), lines
        assert any(re.fullmatch(r"admin GET /admin/queues 303 [\d.]+ms user=-", line) for line in lines), lines
