"""Every job id of a deployment starts with its queue prefix, the sweeper's cron runs included, so two
deployments (or test runs) sharing one Redis never drop each other's jobs as duplicates."""

from __future__ import annotations

from datetime import UTC, datetime

from arq.jobs import Job

from service.engine.runtime import Engine
from service.settings import Settings
from workers.settings import build_workers


async def test_the_sweeper_cron_run_carries_the_deployment_prefix(engine: Engine, settings: Settings) -> None:
    workers = build_workers(engine, handle_signals=False)
    fast = next(worker for worker in workers if worker.queue_name == engine.queue.names.fast)
    try:
        now = datetime.now(tz=UTC)
        await fast.run_cron(now, 0.5)  # what the worker's poll loop calls: run_at_startup enqueues a run now
        queued = [raw.decode() for raw in await engine.redis.zrange(engine.queue.names.fast, 0, -1)]
        assert len(queued) == 1
        assert queued[0].startswith(f"{settings.queue_prefix}:sweep_cron:"), queued
        info = await Job(queued[0], engine.redis, _queue_name=engine.queue.names.fast, _deserializer=engine.redis.job_deserializer).info()
        assert info is not None and info.function == "sweep_cron"
        # The same run asked for again (another worker of the deployment) is dropped as a duplicate.
        fast.cron_jobs[0].next_run = now
        await fast.run_cron(now, 0.5)
        assert await engine.redis.zcard(engine.queue.names.fast) == 1
    finally:
        for worker in workers:
            await worker.close()
