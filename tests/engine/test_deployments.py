"""Deployments sharing one Redis: each embedded data directory gets a queue prefix of its own, a
worker never runs another deployment's job, and a second live instance on a held prefix refuses to
start.

The first test runs real services (``python -m service serve``), as two ``make run`` on one Redis
would: no explicit prefix, different data directories, the same ``REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from arq.jobs import Job, JobStatus

from service.engine.deployment import DEPLOYMENT_ID_FILE, claim_key, resolve_deployment
from service.engine.queue import forget_deployment
from service.engine.records import DONE, PENDING
from service.engine.startup import open_engine
from service.errors import SettingsError
from service.settings import Settings
from service.surfaces import surfaces
from tests.callers import ALICE_PRO, TEST_SECRET
from tests.helpers import REDIS_URL, running_app, serve_until_exit, serving, wait_until
from workers.settings import build_workers, run_workers, stop_workers

# Several writes per service, each its own embed job: on a shared queue some would surely be taken
# by the other service.
WRITES = 8
PACKAGES_PER_WRITE = 4


def packages(tag: str) -> list[dict[str, Any]]:
    topics = ["refund a card payment", "send an email with an attachment", "resize an image", "parse a CSV file", "schedule a meeting"]
    return [
        {"type": "package", "id": f"{tag}-{n}", "name": f"@acme/{tag}-{n}", "summary": f"{topics[n % len(topics)]}, variant {n} of {tag}."}
        for n in range(PACKAGES_PER_WRITE)
    ]


def service_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A service as `make run` starts one: no queue prefix given (one inherited is dropped)."""
    env = {key: value for key, value in os.environ.items() if key != "AGENTSEARCH_QUEUE_PREFIX"}
    env.update(
        HF_HUB_OFFLINE="1",
        AGENTSEARCH_DATA_DIR=str(data_dir),
        REDIS_URL=REDIS_URL,
        AGENTSEARCH_JWT_SECRET=TEST_SECRET,
        AGENTSEARCH_RATE_LIMITS_ENABLED="false",
        AGENTSEARCH_LOG_LEVEL="INFO",
    )
    env.update(extra)
    return env


@dataclass
class Service:
    base: str
    session: aiohttp.ClientSession
    data_dir: Path
    log_path: Path

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, f"{self.base}{path}", json=body, headers=ALICE_PRO) as response:
            data = await response.json()
            assert response.status < 300, (response.status, data)
            return data

    async def catalog_pending(self) -> int:
        status = await self.call("GET", "/v1/index/status")
        pending: int = status["surfaces"]["catalog"]["pending"]
        return pending


@asynccontextmanager
async def running_service(data_dir: Path) -> AsyncIterator[Service]:
    """``python -m service serve`` on ``data_dir``, ready (model loaded); stopped with SIGTERM on exit."""
    log_path = data_dir.parent / f"{data_dir.name}.log"
    async with serving(service_env(data_dir), log_path=log_path, ready_timeout_s=180, stop_timeout_s=90) as served:
        yield Service(served.base, served.session, data_dir, log_path)


async def ingest_until_embedded(services: list[Service], tag: str) -> float:
    """``WRITES`` package writes into every service at once; seconds until each has none pending."""

    async def write(service: Service, name: str) -> None:
        for n in range(WRITES):
            await service.call("PUT", "/v1/catalog/entities", {"entities": packages(f"{name}-{n}")})

    started = time.monotonic()
    await asyncio.gather(*(write(s, f"{tag}-{i}") for i, s in enumerate(services)))

    async def all_embedded() -> bool:
        return all(pending == 0 for pending in await asyncio.gather(*(s.catalog_pending() for s in services)))

    # One alone takes seconds; a job taken by the other deployment would leave records pending until
    # the sweeper's grace (twice the job timeout, 4 minutes by default) has passed.
    await wait_until(all_embedded, timeout_s=150, interval_s=0.1)
    return time.monotonic() - started


async def test_two_services_on_one_redis_each_embed_their_own_writes(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    prefixes: list[str] = []
    try:
        async with running_service(first_dir) as first:
            prefixes.append(f"agentsearch-{(first_dir / DEPLOYMENT_ID_FILE).read_text().strip()}")
            alone_s = await ingest_until_embedded([first], "alone")
            async with running_service(second_dir) as second:
                prefixes.append(f"agentsearch-{(second_dir / DEPLOYMENT_ID_FILE).read_text().strip()}")
                together_s = await ingest_until_embedded([first, second], "together")
                for service in (first, second):
                    counts = (await service.call("GET", "/v1/index/status"))["surfaces"]["catalog"]
                    assert counts["pending"] == 0 and counts["embedded"] == counts["records"] > 0, counts
                await _a_third_on_the_first_ones_prefix_refuses_to_start(tmp_path / "third", prefixes[0])
        assert prefixes[0] != prefixes[1], "each data directory derives a prefix of its own"
        assert f"queue prefix {prefixes[0]} (from data_dir)" in first.log_path.read_text(), "the prefix is logged at start"
        packages_each = WRITES * PACKAGES_PER_WRITE
        print(f"\n{WRITES} writes of {PACKAGES_PER_WRITE} packages per service embedded: one service alone {alone_s:.1f} s, two at once {together_s:.1f} s ({packages_each} packages each)")
    finally:
        client = aioredis.from_url(REDIS_URL)
        try:
            for prefix in prefixes:
                await forget_deployment(client, prefix)
        finally:
            await client.aclose()


async def _a_third_on_the_first_ones_prefix_refuses_to_start(data_dir: Path, held_prefix: str) -> None:
    """A service of another data directory forced onto a live instance's prefix exits at start with
    a message naming the holder and what to change."""
    env = service_env(data_dir, AGENTSEARCH_QUEUE_PREFIX=held_prefix)
    returncode, output = await serve_until_exit(env, data_dir.parent / "third.log", timeout_s=120)
    assert returncode == 2, output[-3000:]
    assert f"the prefix {held_prefix!r} is held by a live agentsearch instance" in output, output[-3000:]
    assert "AGENTSEARCH_QUEUE_PREFIX" in output


async def test_a_worker_refuses_a_job_of_another_deployment_on_its_prefix(settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two data directories given one prefix (both started while Redis was down, so neither saw the
    other's claim): the one whose worker takes the other's embed job neither runs it nor reports
    it done (its store has no such record); the job goes back for its own deployment's worker."""
    owner = await open_engine(settings, surfaces())
    other = await open_engine(replace(settings, data_dir=tmp_path / "other-data"), surfaces())
    assert owner.queue.deployment != other.queue.deployment
    assert owner.settings.queue_prefix == other.settings.queue_prefix
    try:
        written = await owner.records("catalog").write(_records(owner))
        assert written.enqueued
        job_id = await _the_one_queued_job(owner)
        other_workers = build_workers(other)
        task = asyncio.create_task(run_workers(other_workers))
        job = Job(job_id, owner.redis, _queue_name=owner.queue.names.embed)

        def refused() -> bool:
            return any("refused a job of another deployment" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)

        try:
            await wait_until(refused, timeout_s=120, interval_s=0.1)
            await wait_until(lambda: _put_back(job), timeout_s=30, interval_s=0.1)
        finally:
            stop_workers(other_workers)
            await asyncio.wait_for(task, timeout=60)
        assert await job.result_info() is None, "not completed: no result, neither success nor 'missing'"
        assert {r["embed_state"] for r in (await owner.records("catalog").get_many(["acme-refunds"])).values()} == {PENDING}

        owner_workers = build_workers(owner)
        task = asyncio.create_task(run_workers(owner_workers))
        try:

            async def embedded() -> bool:
                return (await owner.records("catalog").counts())["pending"] == 0

            await wait_until(embedded, timeout_s=120, interval_s=0.2)
        finally:
            stop_workers(owner_workers)
            await asyncio.wait_for(task, timeout=60)
        assert {r["embed_state"] for r in (await owner.records("catalog").get_many(["acme-refunds"])).values()} == {DONE}
    finally:
        await other.close()
        await owner.close()


async def _put_back(job: Job) -> bool:
    return await job.status() in (JobStatus.deferred, JobStatus.queued)


def _records(engine: Any) -> list[Any]:
    from service.engine.analyzer import terms_text
    from service.engine.records import IndexRecord

    text = "Refund a card payment and send the money back to the customer."
    return [IndexRecord(key="acme-refunds", tenant="org:acme", kind="package", embed_text=text, terms=terms_text(text))]


async def _the_one_queued_job(engine: Any) -> str:
    queued = [raw.decode() for raw in await engine.redis.zrange(engine.queue.names.embed, 0, -1)]
    assert len(queued) == 1, queued
    return queued[0]


async def test_an_embedded_instance_derives_its_prefix_from_its_data_directory(settings: Settings, tmp_path: Path) -> None:
    """Unset, the prefix comes from the id kept in the data directory (the same after a restart,
    another for another directory); set, it is used as given; a cluster shares the setting."""
    unset = replace(settings, queue_prefix="")
    first = resolve_deployment(unset)
    assert first.prefix == f"agentsearch-{first.id}" and first.prefix_source == "data_dir"
    assert resolve_deployment(unset) == first
    assert (settings.data_dir / DEPLOYMENT_ID_FILE).read_text().strip() == first.id
    elsewhere = resolve_deployment(replace(unset, data_dir=tmp_path / "elsewhere"))
    assert elsewhere.prefix != first.prefix
    assert resolve_deployment(settings).prefix == settings.queue_prefix
    cluster = replace(unset, qdrant_url="http://qdrant:6333")
    assert resolve_deployment(cluster).prefix == "agentsearch"
    assert resolve_deployment(replace(cluster, queue_prefix="team-a")).prefix == "team-a"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / DEPLOYMENT_ID_FILE).write_text("\n")
    with pytest.raises(SettingsError, match="holds no valid deployment id; delete the file"):
        resolve_deployment(replace(unset, data_dir=broken))


async def test_the_prefix_claim_refuses_another_data_directory_and_expires_with_its_holder(settings: Settings, tmp_path: Path) -> None:
    """In process: the in-process workers' claim (``claim_for_workers``) on the test's prefix."""
    from service.engine.deployment import claim_for_workers

    holder = await open_engine(settings, surfaces())
    second = await open_engine(replace(settings, data_dir=tmp_path / "second"), surfaces())
    try:
        claim = await claim_for_workers(holder)
        assert claim is not None
        with pytest.raises(SettingsError, match="is held by a live agentsearch instance"):
            await claim_for_workers(second)
        again = await claim_for_workers(holder)  # the same data directory restarting: allowed
        assert again is not None
        await again.release()
        await claim.release()
        assert not await holder.redis.exists(claim_key(settings.queue_prefix)), "a stopped instance frees its prefix"
        taken = await claim_for_workers(second)
        assert taken is not None
        await taken.release()
    finally:
        await second.close()
        await holder.close()


async def test_redis_down_at_start_does_not_stop_the_claim_or_the_service(settings: Settings) -> None:
    """Nothing listens on port 1 (a real refused connection): the service with its in-process
    workers starts and answers; the claim is taken once Redis answers."""


    down = replace(settings, redis_url="redis://127.0.0.1:1/0", embeddings_model=None)
    async with running_app(down) as client:
        assert (await client.get("/healthz")).status == 200
