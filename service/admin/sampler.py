"""The dashboard's history of the last hour: every ``interval`` a sample of queue depth and done counters.

A background task of the app (``admin_context``) writes one JSON sample per interval
into a sorted set scored by time and trims it to an hour, and refreshes what ``/metrics`` reports
of the queues (``metrics``). Every front end runs the task; a short
``SET NX`` lock lets one of them sample per interval. Throughput is derived when read: the
change of each queue's complete + failed counters between two samples, per minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from service.admin.health import worker_health
from service.admin.jobtable import JobTable
from service.admin.keys import AdminKeys
from service.admin.metrics import refresh_metrics
from service.admin.operations import JobOperations
from service.admin.queues import QueueReader, now_ms
from service.admin.targets import JobDescriber
from service.engine.runtime import Engine
from service.state import ENGINE, JOB_NAMES

log = logging.getLogger(__name__)

WINDOW_MS = 3600 * 1000
DEFAULT_INTERVAL_S = 10.0


@dataclass
class AdminState:
    """What the dashboard's handlers share: the reader, the job table, the actions and the sampling interval."""

    engine: Engine
    reader: QueueReader
    table: JobTable
    operations: JobOperations
    keys: AdminKeys
    interval_s: float


ADMIN = web.AppKey("admin", AdminState)
# Tests shorten the interval by setting this key before the app starts.
SAMPLE_INTERVAL = web.AppKey("admin_sample_interval_s", float)


def admin_state(engine: Engine, interval_s: float, job_names: frozenset[str]) -> AdminState:
    reader = QueueReader(engine, JobDescriber(engine))
    return AdminState(engine=engine, reader=reader, table=JobTable(reader), operations=JobOperations(engine, reader, job_names), keys=AdminKeys(engine.settings.queue_prefix), interval_s=interval_s)


async def record_sample(state: AdminState) -> bool:
    """Take one sample unless another front end took this interval's; True when this one did."""
    redis = state.engine.redis
    lock_ms = max(50, int(state.interval_s * 900))
    if not await redis.set(state.keys.sampler_lock, b"1", nx=True, px=lock_ms):
        return False
    overview = await state.reader.overview()
    await worker_health(state.reader)  # remembers each live health line, so a worker that dies shows its last one
    sample = {
        "t": overview.at_ms,
        "queues": {
            name: {"queued": c.queued, "deferred": c.deferred, "in_progress": c.in_progress, "complete": c.complete, "failed": c.failed}
            for name, c in overview.queues.items()
        },
    }
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zadd(state.keys.samples, {orjson.dumps(sample): overview.at_ms})
        pipe.zremrangebyscore(state.keys.samples, "-inf", overview.at_ms - WINDOW_MS)
        await pipe.execute()
    return True


async def series(state: AdminState) -> dict[str, Any]:
    """The last hour's samples, oldest first, each with its throughput (jobs per minute) per queue."""
    members = await state.engine.redis.zrangebyscore(state.keys.samples, now_ms() - WINDOW_MS, "+inf")
    samples: list[dict[str, Any]] = [orjson.loads(member) for member in members]
    previous: dict[str, Any] | None = None
    for sample in samples:
        sample["throughput_per_min"] = {name: _rate(previous, sample, name) for name in sample["queues"]}
        previous = sample
    return {"window_s": WINDOW_MS // 1000, "interval_s": state.interval_s, "samples": samples}


def _rate(previous: dict[str, Any] | None, sample: dict[str, Any], queue: str) -> float | None:
    if previous is None or queue not in previous["queues"]:
        return None
    minutes = (sample["t"] - previous["t"]) / 60_000
    before, after = previous["queues"][queue], sample["queues"][queue]
    done = (after["complete"] + after["failed"]) - (before["complete"] + before["failed"])
    # Counters only grow; a drop means they were reset: no rate for that step rather than a negative one.
    return round(done / minutes, 2) if minutes > 0 and done >= 0 else None


async def _sample_until(state: AdminState, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await record_sample(state)
            await refresh_metrics(state.reader)
        except (RedisError, OSError) as exc:
            log.warning("dashboard sample skipped", extra={"error": str(exc)})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=state.interval_s)


async def admin_context(app: web.Application) -> AsyncIterator[None]:
    """The dashboard's state and its sampler task, for the app's lifetime."""
    state = admin_state(app[ENGINE], app.get(SAMPLE_INTERVAL, DEFAULT_INTERVAL_S), app[JOB_NAMES])
    app[ADMIN] = state
    stop = asyncio.Event()
    task = asyncio.create_task(_sample_until(state, stop))
    yield
    # Stop cooperatively: a cancellation landing inside a Redis call can surface as a RedisError,
    # which the loop would log and carry on from. Cancel only if it does not end in time.
    stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=5)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
