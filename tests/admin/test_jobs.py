"""Counts, the job table, job detail and the actions, against real Redis and the real in-process arq worker."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp.test_utils import TestClient

from service.settings import Settings
from service.state import ENGINE
from tests.admin.helpers import (
    HOLD,
    admin_client,
    enqueue_hold,
    get_json,
    job,
    kind_counts,
    post_json,
    release,
    wait_status,
)
from tests.callers import ADMIN, auth
from tests.helpers import wait_until

ZERO = {"queued": 0, "deferred": 0, "in_progress": 0, "retrying": 0, "complete": 0, "failed": 0, "retried": 0}


async def _embed_queue(client: TestClient[Any, Any]) -> dict[str, int]:
    counts: dict[str, int] = (await get_json(client, "/admin/api/overview"))["queues"]["embed"]
    return counts


async def test_counts_follow_jobs_through_every_state(settings: Settings) -> None:
    async with admin_client(settings) as client:
        assert await kind_counts(client, HOLD) == {}
        # The embed worker runs one job at a time: the first holds it, the next two wait behind it.
        ids = [await enqueue_hold(client, name, outcome) for name, outcome in (("c1", "ok"), ("c2", "fail"), ("c3", "retry"))]
        deferred = await enqueue_hold(client, "c4", defer_s=600)
        await wait_status(client, ids[0], "in_progress")
        assert await kind_counts(client, HOLD) == {**ZERO, "queued": 2, "deferred": 1, "in_progress": 1}
        assert await _embed_queue(client) == {**ZERO, "queued": 2, "deferred": 1, "in_progress": 1}

        await release(client, "c1")
        await wait_status(client, ids[0], "complete")
        await wait_status(client, ids[1], "in_progress")
        assert await kind_counts(client, HOLD) == {**ZERO, "queued": 1, "deferred": 1, "in_progress": 1, "complete": 1}

        await release(client, "c2")
        failed = await wait_status(client, ids[1], "failed")
        assert failed["error"] == "ValueError: c2 failed on purpose" and failed["tries"] == 1

        await release(client, "c3")  # fails its first try with Retry, completes its second
        retried = await wait_status(client, ids[2], "complete")
        assert retried["tries"] == 2 and retried["result"] == {"held": "c3"}
        assert await kind_counts(client, HOLD) == {**ZERO, "deferred": 1, "complete": 2, "failed": 1, "retried": 1}
        assert await _embed_queue(client) == {**ZERO, "deferred": 1, "complete": 2, "failed": 1, "retried": 1}
        assert (await job(client, deferred))["status"] == "deferred"


async def test_job_table_pages_newest_first_with_filters(settings: Settings) -> None:
    async with admin_client(settings) as client:
        names = [f"t{i}" for i in range(5)]
        ids = [await enqueue_hold(client, name, "fail" if name == "t1" else "ok") for name in names]
        for name in names:
            await release(client, name)
        for job_id in ids:
            await wait_status(client, job_id, "complete", "failed")
        waiting = await enqueue_hold(client, "t5", defer_s=600)

        page = await get_json(client, f"/admin/api/jobs?kind={HOLD}&limit=3")
        assert [row["id"] for row in page["jobs"]] == [waiting, ids[4], ids[3]]  # due time, then finish time, newest first
        assert page["has_more"] and page["total"] is None
        second = await get_json(client, f"/admin/api/jobs?kind={HOLD}&limit=3&offset=3")
        assert [row["id"] for row in second["jobs"]] == [ids[2], ids[1], ids[0]] and not second["has_more"]

        row = second["jobs"][1]
        assert row["function"] == HOLD and row["queue"] == "embed" and row["status"] == "failed"
        assert row["error"] == "ValueError: t1 failed on purpose" and row["tries"] == 1
        assert row["enqueued_ms"] <= row["started_ms"] <= row["finished_ms"]
        assert row["duration_ms"] == row["finished_ms"] - row["started_ms"]
        done = second["jobs"][0]
        assert done["status"] == "complete" and done["result"] == {"held": "t2"} and done["error"] is None

        failed = await get_json(client, "/admin/api/jobs?status=failed")
        assert [r["id"] for r in failed["jobs"]] == [ids[1]] and failed["total"] == 1
        in_queue = await get_json(client, "/admin/api/jobs?status=failed&queue=embed")
        assert [r["id"] for r in in_queue["jobs"]] == [ids[1]] and in_queue["total"] is None
        assert (await get_json(client, "/admin/api/jobs?status=failed&queue=fast"))["jobs"] == []
        deferred = await get_json(client, "/admin/api/jobs?status=deferred&queue=embed")  # the fast queue holds the next sweep_cron
        assert [r["id"] for r in deferred["jobs"]] == [waiting] and deferred["total"] == 1
        assert deferred["jobs"][0]["due_ms"] > deferred["jobs"][0]["enqueued_ms"] + 500_000

        for bad, message in (("status=lost", "status must be one of"), ("surface=nope", "surface must be one of"), ("limit=0", "limit must be between"), ("offset=x", "offset must be an integer"), ("colour=red", "unknown query parameter")):
            response = await client.get(f"/admin/api/jobs?{bad}", headers=ADMIN)
            body = await response.json()
            assert response.status == 400 and message in body["error"]["message"], (bad, body)


async def test_retry_of_a_failed_job_runs_it_again_and_links_both(settings: Settings) -> None:
    async with admin_client(settings) as client:
        engine = client.app[ENGINE]
        # A real job failing for real: embed_records of a collection no surface owns.
        failing = f"{settings.queue_prefix}:test:embed:user:alice|package|@acme/tools"  # ids hold | and /
        assert await engine.queue.enqueue("embed_records", "no-such-collection", [["k", "h"]], job_id=failing) is not None
        failed = await wait_status(client, failing, "failed")
        assert "LookupError" in failed["error"] and failed["args"] == ["no-such-collection", [["k", "h"]]]

        retried = await post_json(client, f"/admin/api/jobs/{quote(failing, safe='')}/retry", status=201)
        new_id = retried["job"]["id"]
        assert new_id != failing and new_id.startswith(settings.queue_prefix) and retried["retry_of"] == failing
        assert retried["job"]["function"] == "embed_records" and retried["job"]["args"] == failed["args"]
        again = await wait_status(client, new_id, "failed")
        assert again["retry_of"] == failing and "LookupError" in again["error"]
        assert (await job(client, failing))["retried_as"] == new_id

        # Once is enough: a second click, a job that did not fail, and an unknown job are refused.
        twice = await post_json(client, f"/admin/api/jobs/{quote(failing, safe='')}/retry", status=409)
        assert new_id in twice["error"]["message"]
        ok = await enqueue_hold(client, "r-ok")
        await release(client, "r-ok")
        await wait_status(client, ok, "complete")
        refused = await post_json(client, f"/admin/api/jobs/{quote(ok, safe='')}/retry", status=409)
        assert "only a failed job" in refused["error"]["message"]
        await post_json(client, "/admin/api/jobs/no-such-job/retry", status=404)


async def test_abort_a_running_a_queued_and_a_deferred_job(settings: Settings) -> None:
    async with admin_client(settings) as client:
        # One at a time: jobs enqueued in the same millisecond share a score in arq's sorted set,
        # which then orders them by id ("a-queued" before "a-run").
        running = await enqueue_hold(client, "a-run")
        await wait_status(client, running, "in_progress")
        queued = await enqueue_hold(client, "a-queued")
        later = await enqueue_hold(client, "a-later", defer_s=600)
        assert (await job(client, queued))["status"] == "queued"

        asked = await post_json(client, f"/admin/api/jobs/{quote(queued, safe='')}/abort")
        assert asked == {"id": queued, "status": "queued", "abort_requested": True}
        assert (await job(client, queued))["abort_requested"] is True

        await post_json(client, f"/admin/api/jobs/{quote(running, safe='')}/abort")
        cancelled = await wait_status(client, running, "failed")
        assert cancelled["aborted"] and cancelled["error"] == "aborted (CancelledError)"
        # The worker is free again: it picks the queued job, sees the abort and fails it unrun.
        skipped = await wait_status(client, queued, "failed")
        assert skipped["aborted"] and skipped["started_ms"] is not None

        await post_json(client, f"/admin/api/jobs/{quote(later, safe='')}/abort")
        assert (await wait_status(client, later, "failed"))["aborted"]

        finished = await post_json(client, f"/admin/api/jobs/{quote(running, safe='')}/abort", status=409)
        assert "only a queued, deferred or running job" in finished["error"]["message"]
        await post_json(client, "/admin/api/jobs/no-such-job/abort", status=404)
        counts = await kind_counts(client, HOLD)
        assert counts["failed"] == 3 and counts["complete"] == 0 and counts["in_progress"] == 0


async def test_sweep_now_and_warm_a_workspace(settings: Settings) -> None:
    async with admin_client(settings) as client:
        swept = await post_json(client, "/admin/api/sweep")
        assert swept["function"] == "sweep" and swept["queue"] == "fast"
        done = await wait_status(client, swept["id"], "complete")
        assert isinstance(done["result"], dict) and done["target"] == "every surface's stale records"

        root = settings.allowed_roots[0] / "repo"
        root.mkdir()
        (root / "app.py").write_text("def greet(name):\n    return f'hello {name}'\n")
        response = await client.post("/v1/workspaces", json={"root": str(root)}, headers=auth("alice"))
        assert response.status in (200, 201), await response.text()
        workspace = (await response.json())["id"]

        warmed = await post_json(client, "/admin/api/warm", {"workspace": workspace})
        assert warmed["function"] == "warm_workspace" and warmed["args"] == [workspace]
        done = await wait_status(client, warmed["id"], "complete", "failed", timeout_s=60)
        assert done["status"] == "complete", done
        assert done["target"] == f"workspace {workspace}" and done["tenants"] == ["user:alice"] and done["surface"] == "code"
        listed = await get_json(client, "/admin/api/jobs?kind=warm_workspace&tenant=user:alice&surface=code")
        assert warmed["id"] in [row["id"] for row in listed["jobs"]]

        missing = await post_json(client, "/admin/api/warm", {"workspace": "ws_00000000000000000000"}, status=404)
        assert "no workspace" in missing["error"]["message"]
        await post_json(client, "/admin/api/warm", {}, status=400)
        await post_json(client, "/admin/api/warm", {"workspace": workspace, "extra": 1}, status=400)

        await wait_until(lambda: _kind_complete(client, "sweep"), timeout_s=10)


async def _kind_complete(client: TestClient[Any, Any], kind: str) -> bool:
    return (await kind_counts(client, kind)).get("complete", 0) >= 1
