"""Index state per surface and tenant, embed jobs by surface and tenant, workers' health, and the sampled hour."""

from __future__ import annotations

from typing import Any

from service.engine.analyzer import terms_text
from service.engine.records import IndexRecord
from service.settings import Settings
from service.state import ENGINE, WORKER_STATE
from tests.admin.helpers import HOLD, admin_client, enqueue_hold, get_json, release, wait_status
from tests.callers import ADMIN
from tests.helpers import wait_until
from workers.settings import stop_workers


def _records(tenant: str, package: str, count: int) -> list[IndexRecord]:
    return [
        IndexRecord(
            key=f"{tenant}|package|{package}-{i}",
            tenant=tenant,
            kind="package",
            embed_text=f"{package} helper number {i} parses invoices",
            terms=terms_text(package, "helper", "invoices"),
            payload={"package_id": package},
        )
        for i in range(count)
    ]


def _surface(state: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in state["surfaces"] if s["surface"] == name)
    return found


async def test_index_state_and_embed_jobs_per_surface_and_tenant(settings: Settings) -> None:
    async with admin_client(settings) as client:
        engine = client.app[ENGINE]
        surface = "catalog" if "catalog" in engine.surfaces else sorted(engine.surfaces)[0]
        index = engine.records(surface)
        await index.write(_records("user:alice", "alice-tools", 3))
        await index.write(_records("org:acme", "acme-kit", 2))

        state = await get_json(client, "/admin/api/index")
        assert state["store"] == "qdrant-edge" and state["model"] == "local/all-MiniLM-L6-v2"
        rows = {row["tenant"]: row for row in _surface(state, surface)["tenants"]}
        assert {"user:alice", "org:acme"} <= set(rows)
        assert rows["user:alice"]["records"] == 3 and rows["org:acme"]["records"] == 2
        assert rows["user:alice"]["embedded"] + rows["user:alice"]["pending"] == 3

        async def embedded() -> bool:
            # The vectors land inside the embed job; its last-warm time is noted when the job has ended.
            now = {row["tenant"]: row for row in _surface(await get_json(client, "/admin/api/index"), surface)["tenants"]}
            done = now["user:alice"]["embedded"] == 3 and now["org:acme"]["embedded"] == 2
            return done and all(now[tenant]["last_warm_ms"] for tenant in ("user:alice", "org:acme"))

        await wait_until(embedded, timeout_s=120)
        after = await get_json(client, "/admin/api/index")
        rows = {row["tenant"]: row for row in _surface(after, surface)["tenants"]}
        assert rows["user:alice"] == {**rows["user:alice"], "records": 3, "embedded": 3, "pending": 0}
        assert rows["user:alice"]["last_warm_ms"] and rows["org:acme"]["last_warm_ms"] and _surface(after, surface)["last_warm_ms"]

        # The embed jobs, by surface and tenant, with their target named from the records.
        jobs = await get_json(client, f"/admin/api/jobs?kind=embed_records&surface={surface}&tenant=user:alice")
        assert len(jobs["jobs"]) == 1, jobs
        row = jobs["jobs"][0]
        assert row["status"] == "complete" and row["surface"] == surface and row["tenants"] == ["user:alice"]
        assert row["target"] == "package alice-tools (+2 more)" and row["result"]["embedded"] == 3
        acme = await get_json(client, "/admin/api/jobs?tenant=org:acme")
        assert [r["tenants"] for r in acme["jobs"]] == [["org:acme"]]
        assert (await get_json(client, "/admin/api/jobs?tenant=user:nobody"))["jobs"] == []

        # Changing one record's text makes it pending until its new embedding lands, then warms it again.
        warmed_before = rows["user:alice"]["last_warm_ms"]
        changed = _records("user:alice", "alice-tools", 1)[0]
        await index.write([IndexRecord(**{**changed.__dict__, "embed_text": "alice-tools now also files receipts"})])

        async def rewarmed() -> bool:
            row = {r["tenant"]: r for r in _surface(await get_json(client, "/admin/api/index"), surface)["tenants"]}["user:alice"]
            return row["embedded"] == 3 and row["pending"] == 0 and row["last_warm_ms"] > warmed_before

        await wait_until(rewarmed, timeout_s=60)


async def test_workers_health_lines_then_down_when_stopped(settings: Settings) -> None:
    async with admin_client(settings) as client:

        async def all_up() -> bool:
            workers = (await get_json(client, "/admin/api/workers"))["workers"]
            return [w["status"] for w in workers] == ["up", "up", "up"]

        await wait_until(all_up, timeout_s=30)
        job_id = await enqueue_hold(client, "w1")
        await release(client, "w1")
        await wait_status(client, job_id, "complete")

        async def counted() -> bool:
            embed = (await get_json(client, "/admin/api/workers"))["workers"][0]
            return bool(embed["complete"])

        await wait_until(counted, timeout_s=settings.worker_health_check_s * 3)
        body = await get_json(client, "/admin/api/workers")
        embed, bulk, fast = body["workers"]
        assert embed["queue"] == "embed" and bulk["queue"] == "bulk" and fast["queue"] == "fast" and body["health_check_interval_s"] == settings.worker_health_check_s
        assert "j_complete=" in embed["line"] and embed["complete"] >= 1 and embed["failed"] == 0
        assert {"complete", "failed", "retried", "ongoing", "queued"} <= set(embed)
        assert 0 <= embed["age_s"] <= settings.worker_health_check_s + 1 and embed["reason"] is None

        # Stop the workers as a shutdown does: their health keys go, the dashboard shows them down.
        state = client.app[WORKER_STATE]
        stop_workers(state["workers"])
        await state["task"]
        body = await get_json(client, "/admin/api/workers")
        assert [w["status"] for w in body["workers"]] == ["down", "down", "down"]
        assert "j_complete=" in body["workers"][0]["line"]  # the last line seen stays readable
        assert "stopped" in body["workers"][0]["reason"]
        page = await client.get("/admin", headers=ADMIN)
        assert 'data-status="down"' in await page.text()


async def test_sampler_keeps_depth_and_throughput_of_the_last_hour(settings: Settings) -> None:
    async with admin_client(settings, sample_interval_s=0.3) as client:
        ids = [await enqueue_hold(client, f"s{i}") for i in range(3)]
        await wait_status(client, ids[0], "in_progress")

        async def deep() -> bool:
            samples = (await get_json(client, "/admin/api/series"))["samples"]
            return any(s["queues"]["embed"]["queued"] + s["queues"]["embed"]["in_progress"] == 3 for s in samples)

        await wait_until(deep, timeout_s=10)
        for i in range(3):
            await release(client, f"s{i}")
        for job_id in ids:
            await wait_status(client, job_id, "complete")

        async def throughput() -> bool:
            samples = (await get_json(client, "/admin/api/series"))["samples"]
            return any((s["throughput_per_min"]["embed"] or 0) > 0 for s in samples) and samples[-1]["queues"]["embed"]["complete"] == 3

        await wait_until(throughput, timeout_s=10)
        series = await get_json(client, "/admin/api/series")
        assert series["window_s"] == 3600 and series["interval_s"] == 0.3
        times = [s["t"] for s in series["samples"]]
        assert times == sorted(times) and times[-1] - times[0] < 3600_000
        svg = await client.get("/admin/chart.svg", headers=ADMIN)
        text = await svg.text()
        assert svg.content_type == "image/svg+xml" and 'data-queue="embed"' in text and "<polyline" in text
        assert HOLD not in text  # the chart draws numbers, never job text
