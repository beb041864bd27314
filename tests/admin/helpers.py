"""Admin test helpers: an app whose worker also runs a job the test holds and releases, and API calls.

``admin_test_hold`` is the one job the service does not have: it waits until the test releases
it (a Redis key), so a test can keep a job queued or running for as long as it needs; then it
returns, fails or asks to be retried (soon, or in ten minutes). It runs in the real in-process arq worker, next to the
service's own jobs, which the tests use wherever they can (a failing ``embed_records``, ``sweep``,
``warm_workspace``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.test_utils import TestClient
from arq import Retry
from arq.worker import func

from service.admin.sampler import SAMPLE_INTERVAL
from service.settings import Settings
from service.state import ENGINE, WORKER_STATE
from tests.callers import ADMIN
from tests.helpers import running_app, wait_until
from workers.settings import own_jobs_only

HOLD = "admin_test_hold"


async def hold_job(ctx: dict[str, Any], name: str, outcome: str = "ok") -> dict[str, str]:
    """Wait for the test's release key; then succeed, fail, or retry once soon or in ten minutes (``outcome``)."""
    prefix = ctx["engine"].settings.queue_prefix
    while not await ctx["redis"].exists(release_key(prefix, name), release_key(prefix, "*all*")):
        await asyncio.sleep(0.05)
    if outcome == "fail":
        raise ValueError(f"{name} failed on purpose")
    if outcome == "retry" and ctx["job_try"] == 1:
        raise Retry(defer=0.05)
    if outcome == "retry_later" and ctx["job_try"] == 1:
        raise Retry(defer=600)  # waits in the Retries tab until someone retries it now
    return {"held": name}


def release_key(prefix: str, name: str) -> str:
    return f"{prefix}:test:release:{name}"


@asynccontextmanager
async def admin_client(settings: Settings, *, sample_interval_s: float = 0.5) -> AsyncIterator[TestClient[Any, Any]]:
    """The service app (own engine, in-process worker) with the hold job registered and fast sampling."""

    def fast_sampling(app: web.Application) -> None:
        app[SAMPLE_INTERVAL] = sample_interval_s

    async with running_app(settings, setup=fast_sampling) as client:
        try:
            for worker in client.app[WORKER_STATE]["workers"]:
                worker.functions[HOLD] = func(own_jobs_only(HOLD, hold_job), name=HOLD, timeout=settings.job_timeout_s, max_tries=3)
            # The embed worker takes jobs once it has loaded the model (the first app of a process waits
            # for it); its health check starts after that, so "up" means ready.
            await wait_until(lambda: _workers_up(client), timeout_s=180, interval_s=0.2)
            yield client
        finally:
            # Whatever a failed test left held finishes now, so the worker stops at once.
            await client.app[ENGINE].redis.set(release_key(settings.queue_prefix, "*all*"), b"1", ex=600)


async def _workers_up(client: TestClient[Any, Any]) -> bool:
    response = await client.get("/admin/api/workers", headers=ADMIN)
    workers = (await response.json())["workers"]
    return all(worker["status"] == "up" for worker in workers)


def prefix_of(client: TestClient[Any, Any]) -> str:
    prefix: str = client.app[ENGINE].settings.queue_prefix
    return prefix


async def enqueue_hold(client: TestClient[Any, Any], name: str, outcome: str = "ok", *, defer_s: float | None = None, fast: bool = False, bulk: bool = False) -> str:
    """Enqueue a hold job (embed queue unless ``fast`` or ``bulk``); returns its id."""
    engine = client.app[ENGINE]
    job_id = f"{engine.settings.queue_prefix}:test:{name}"
    job = await engine.queue.enqueue(HOLD, name, outcome, job_id=job_id, fast=fast, bulk=bulk, defer_s=defer_s)
    assert job is not None
    return job_id


async def release(client: TestClient[Any, Any], name: str) -> None:
    await client.app[ENGINE].redis.set(release_key(prefix_of(client), name), b"1", ex=600)


async def get_json(client: TestClient[Any, Any], path: str, headers: dict[str, str] = ADMIN, status: int = 200) -> Any:
    response = await client.get(path, headers=headers)
    body = await response.json()
    assert response.status == status, (path, response.status, body)
    return body


async def post_json(client: TestClient[Any, Any], path: str, body: Any = None, headers: dict[str, str] = ADMIN, status: int = 202) -> Any:
    response = await client.post(path, json=body, headers=headers)
    data = await response.json()
    assert response.status == status, (path, response.status, data)
    return data


async def job(client: TestClient[Any, Any], job_id: str) -> dict[str, Any]:
    data: dict[str, Any] = await get_json(client, f"/admin/api/jobs/{quote(job_id, safe='')}")
    return data


async def wait_status(client: TestClient[Any, Any], job_id: str, *statuses: str, timeout_s: float = 30) -> dict[str, Any]:
    """Poll the API until the job is in one of ``statuses``; returns it."""
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        response = await client.get(f"/admin/api/jobs/{quote(job_id, safe='')}", headers=ADMIN)
        if response.status == 200:
            seen.update(await response.json())
        return seen.get("status") in statuses

    await wait_until(reached, timeout_s=timeout_s, interval_s=0.1)
    return dict(seen)


async def kind_counts(client: TestClient[Any, Any], kind: str) -> dict[str, int]:
    overview = await get_json(client, "/admin/api/overview")
    counts: dict[str, int] = overview["kinds"].get(kind, {})
    return counts


def csrf_of(html: str) -> str:
    match = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', html)
    assert match, "the page carries its CSRF token"
    return match.group(1)


async def get_page(client: TestClient[Any, Any], path: str, headers: dict[str, str] = ADMIN, status: int = 200) -> str:
    response = await client.get(path, headers=headers)
    html = await response.text()
    assert response.status == status, (path, response.status, html[:500])
    return html


def header_counts(html: str) -> dict[str, int]:
    """The header bar's counts of a page: busy, queues, retries, scheduled, dead, processed, failed."""
    return {name: int(value) for name, value in re.findall(r'<span class="count" id="count-(\w+)">(\d+)</span>', html)}


def tab_ids(html: str) -> list[str]:
    """The job ids listed by a tab page's table, in order."""
    body = re.search(r'<tbody id="tab-rows">(.*?)</tbody>', html, re.S)
    assert body, "the page is a tab"
    return re.findall(r'<tr data-job-id="([^"]+)"', body.group(1))


def queue_cells(html: str, queue: str) -> dict[str, int]:
    """The counts of one queue's row of a page's queue table."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row, f"the page has a row for queue {queue}"
    return {name: int(value) for name, value in re.findall(r'data-count="(\w+)">(\d+)<', row.group(1))}

