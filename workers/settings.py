"""arq worker settings: two workers per process, one per queue, sharing the engine.

``embed`` runs batch embedding one job at a time (the model saturates the CPU); ``fast`` runs
warm-ups and the sweeper cron. JSON serializer, a 30 s health check and short job timeouts, so a
crashed worker's job re-runs soon (after its timeout + 10 s).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from arq import Worker, cron
from arq.worker import func

from service.admin.history import JobRecorder
from service.engine.embeddings import EmbeddingUnavailable
from service.engine.queue import deserialize, serialize
from service.engine.runtime import Engine, create_redis_client
from workers.jobs import job_table

log = logging.getLogger(__name__)

MAX_TRIES = 5
KEEP_RESULT_S = 3600


class RecordingWorker(Worker):
    """arq's Worker that also records every job's ending for the admin dashboard (``service.admin.history``).

    ``finish_job`` and ``finish_failed_job`` are where every ending goes through in arq 0.28
    (success, failure, abort, retry, max tries exceeded, expired job), so hooking them misses none.
    """

    def __init__(self, *args: Any, recorder: JobRecorder, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder

    async def finish_job(
        self,
        job_id: str,
        finish: bool,
        result_data: bytes | None,
        result_timeout_s: float | None,
        keep_result_forever: bool,
        incr_score: int | None,
        keep_in_progress: float | None,
    ) -> None:
        await super().finish_job(job_id, finish, result_data, result_timeout_s, keep_result_forever, incr_score, keep_in_progress)
        if finish:
            await self.recorder.finished(self.pool, self.queue_name, job_id, result_data)
        else:
            await self.recorder.retried(self.pool, self.queue_name, job_id)

    async def finish_failed_job(self, job_id: str, result_data: bytes | None) -> None:
        await super().finish_failed_job(job_id, result_data)
        await self.recorder.finished(self.pool, self.queue_name, job_id, result_data)


def _functions(fast: bool, timeout_s: float) -> list[Any]:
    return [
        func(coroutine, name=name, timeout=timeout_s, max_tries=MAX_TRIES)
        for name, (coroutine, on_fast_queue) in sorted(job_table().items())
        if on_fast_queue is fast
    ]


async def _load_default_model(ctx: dict[str, Any]) -> None:
    """Load the model before taking jobs: a first job must not spend its timeout loading it."""
    engine: Engine = ctx["engine"]
    load = getattr(engine.embedders.default, "load", None)
    if load is not None:
        try:
            await load()
        except EmbeddingUnavailable as exc:
            log.warning("worker starts without the default model", extra={"error": str(exc)})


def build_workers(engine: Engine, *, burst: bool = False, handle_signals: bool = False) -> list[Worker]:
    """The embed and fast workers over ``engine``'s Redis, with the sweeper cron on the fast one."""
    settings = engine.settings
    common: dict[str, Any] = {
        "job_serializer": serialize,
        "job_deserializer": deserialize,
        "health_check_interval": settings.worker_health_check_s,
        "keep_result": KEEP_RESULT_S,
        "ctx": {"engine": engine},
        "handle_signals": handle_signals,
        "burst": burst,
        "poll_delay": 0.2,
        "max_tries": MAX_TRIES,
        "retry_jobs": True,
        # The dashboard's abort action adds the id to arq:abort; only then does a worker cancel it.
        "allow_abort_jobs": True,
        "recorder": JobRecorder(engine, keep_s=KEEP_RESULT_S),
    }
    interval = settings.sweep_interval_s
    # arq's cron takes calendar sets: every `interval` seconds below a minute, else every N minutes.
    seconds = set(range(0, 60, interval)) if interval < 60 else {0}
    minutes = None if interval < 60 else set(range(0, 60, max(1, min(59, interval // 60))))
    sweeper = cron(
        job_table()["sweep"][0],
        name="sweep_cron",
        second=seconds,
        minute=minutes,
        run_at_startup=True,
        unique=True,
        timeout=settings.job_timeout_s,
    )
    # Each worker owns its pool: Worker.close() closes the pool it was given.
    embed_worker = RecordingWorker(
        redis_pool=create_redis_client(settings.redis_url),
        functions=_functions(False, settings.job_timeout_s),
        queue_name=engine.queue.names.embed,
        on_startup=_load_default_model,
        max_jobs=1,
        **common,
    )
    fast_worker = RecordingWorker(
        redis_pool=create_redis_client(settings.redis_url),
        functions=_functions(True, settings.job_timeout_s),
        queue_name=engine.queue.names.fast,
        cron_jobs=[] if burst else [sweeper],
        max_jobs=4,
        **common,
    )
    return [embed_worker, fast_worker]


async def run_workers(workers: list[Worker]) -> None:
    """Run workers until they stop (``stop_workers``) or the task is cancelled; close them on the way out."""
    try:
        await asyncio.gather(*(worker.async_run() for worker in workers))
    finally:
        for worker in workers:
            await worker.close()


def stop_workers(workers: list[Worker]) -> None:
    """Ask each worker to leave its poll loop after the running jobs finish.

    arq's poll loop can swallow a CancelledError that lands inside a Redis call and go on polling,
    so stopping is cooperative: burst mode with a zero job budget makes ``main()`` return at its
    next iteration (one poll delay).
    """
    for worker in workers:
        worker.burst = True
        worker.max_burst_jobs = 0
