"""arq worker settings: a worker per queue, sharing the engine of the process.

``embed`` runs the embedding of interactive writes one job at a time (the model saturates the
CPU); ``bulk`` runs bulk embedding (workspace chunks) one job at a time beside it, so a write's
embedding waits at most for one slice of a bulk batch, never behind the bulk backlog; ``fast`` runs
warm-ups, reindex slices and the sweeper cron. With ``workspace_nodes`` set, a fourth worker,
``node``, runs the workspace jobs of this node's queue (``QueueNames.node``): only a process on
the node holding the workspace's files can index them, so a process whose node name is not in
the list (an ordinary front end or worker) runs none. JSON serializer, a 30 s health check and
short job timeouts, so a crashed worker's job re-runs soon (after its timeout + 10 s).

Every job runs behind ``own_jobs_only``: a job another deployment enqueued (its ``deployment``
argument names another id: two deployments were given one prefix) is refused and put back for its
own workers, never run here and never reported as done.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from arq import Retry, Worker, cron
from arq.typing import WorkerCoroutine
from arq.utils import to_unix_ms
from arq.worker import func
from redis.exceptions import RedisError

from service.admin.history import JobRecorder
from service.admin.processes import beat
from service.engine.queue import DEPLOYMENT_KWARG, deserialize, serialize
from service.engine.runtime import Engine, create_redis_client
from service.errors import EmbeddingUnavailable, SettingsError
from service.settings import Settings, env_name
from workers.jobs import job_table, sweep_job

log = logging.getLogger(__name__)

MAX_TRIES = 5
# Jobs that continue by asking for another try (``Retry``) until their work is done.
MAX_TRIES_BY_JOB = {"reindex": 10_000}
KEEP_RESULT_S = 3600


class RecordingWorker(Worker):
    """arq's Worker that also records every job's ending for the admin dashboard (``service.admin.history``).

    ``finish_job`` and ``finish_failed_job`` are where every ending goes through in arq 0.28
    (success, failure, abort, retry, max tries exceeded, expired job), so hooking them misses none.
    """

    def __init__(self, *args: Any, recorder: JobRecorder, job_id_prefix: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder
        self.job_id_prefix = job_id_prefix

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

    async def record_health(self) -> None:
        """arq's health check, and with it this process's heartbeat for the dashboard's processes table."""
        checked = self._last_health_check
        await super().record_health()
        if self._last_health_check != checked:
            await beat(self.pool, self.recorder.keys, self.queue_name, self.job_tasks, self.max_jobs)

    async def run_cron(self, n: datetime, delay: float, num_windows: int = 2) -> None:
        """arq names a cron run ``<name>:<ms>``; prefix it with the deployment's prefix, as every
        other job id is, so two deployments on one Redis never drop each other's runs."""
        for cron_job in self.cron_jobs:
            if cron_job.next_run is None and cron_job.run_at_startup:
                cron_job.next_run = n  # what arq's run_cron does first; the id needs the time
            if cron_job.next_run is not None and self.job_id_prefix:
                cron_job.job_id = f"{self.job_id_prefix}:{cron_job.name}:{to_unix_ms(cron_job.next_run)}"
        await super().run_cron(n, delay, num_windows)


class ForeignJob(Exception):
    """A job of another deployment, refused on its last try: it ends failed, never done."""


def own_jobs_only(name: str, coroutine: Callable[..., Awaitable[Any]]) -> WorkerCoroutine:
    """``coroutine`` behind the deployment check: a job tagged with another deployment's id is
    refused (an error in the log, a retry so its own workers may take it, a failure on the last
    try). A job without a tag (queued before jobs carried one, or arq's cron runs) runs."""

    @functools.wraps(coroutine)
    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        owner = kwargs.pop(DEPLOYMENT_KWARG, None)
        own = ctx["engine"].queue.deployment
        if owner is not None and owner != own:
            tries = int(ctx.get("job_try", 1))
            log.error(
                "refused a job of another deployment on this prefix; it is not run here",
                extra={"function": name, "job_id": ctx.get("job_id"), "job_deployment": owner, "deployment": own, "try": tries},
            )
            if tries >= MAX_TRIES:
                raise ForeignJob(f"job of deployment {owner!r} refused by a worker of deployment {own!r}: two deployments share one queue prefix")
            raise Retry(defer=_refused_backoff_s(tries))
        try:
            return await coroutine(ctx, *args, **kwargs)
        except Exception as exc:
            recorder = ctx.get("recorder")
            if isinstance(recorder, JobRecorder) and not isinstance(exc, Retry):
                await recorder.failed_with(ctx["redis"], str(ctx.get("job_id")), exc)  # arq keeps no stack trace
            raise

    return run


def _refused_backoff_s(tries: int) -> int:
    return min(5 * 2 ** (tries - 1), 60)


def _functions(fast: bool, timeout_s: float, *, only: frozenset[str] | None = None) -> list[Any]:
    return [
        func(own_jobs_only(name, job.function), name=name, timeout=timeout_s, max_tries=MAX_TRIES_BY_JOB.get(name, MAX_TRIES))
        for name, job in sorted(job_table().items())
        if (job.fast is fast if only is None else name in only)
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


def _common(engine: Engine, *, burst: bool, handle_signals: bool) -> dict[str, Any]:
    """The arq options every worker of a process shares."""
    recorder = JobRecorder(engine, keep_s=KEEP_RESULT_S)
    return {
        "job_serializer": serialize,
        "job_deserializer": deserialize,
        "health_check_interval": engine.settings.worker_health_check_s,
        "keep_result": KEEP_RESULT_S,
        "ctx": {"engine": engine, "recorder": recorder},
        "handle_signals": handle_signals,
        "burst": burst,
        "poll_delay": 0.2,
        "max_tries": MAX_TRIES,
        "retry_jobs": True,
        # The dashboard's abort action adds the id to arq:abort; only then does a worker cancel it.
        "allow_abort_jobs": True,
        "recorder": recorder,
    }


def build_workers(engine: Engine, *, burst: bool = False, handle_signals: bool = False, node_only: bool = False) -> list[Worker]:
    """The embed, bulk and fast workers over ``engine``'s Redis, with the sweeper cron on the fast one,
    and the node worker when this process is one of the workspace nodes (``node_only``: that one alone)."""
    settings = engine.settings
    node_worker = _node_worker(engine, burst=burst, handle_signals=handle_signals)
    if node_only:
        if node_worker is None:
            raise SettingsError(
                f"node_id ({env_name('node_id')}): a node-only worker runs the queue of a workspace node, and "
                f"{settings.node_name!r} is not among workspace_nodes ({env_name('workspace_nodes')}: "
                f"{','.join(settings.workspace_nodes) or 'unset'})"
            )
        return [node_worker]
    common = _common(engine, burst=burst, handle_signals=handle_signals)
    interval = settings.sweep_interval_s
    # arq's cron takes calendar sets: every `interval` seconds below a minute, else every N minutes.
    seconds = set(range(0, 60, interval)) if interval < 60 else {0}
    minutes = None if interval < 60 else set(range(0, 60, max(1, min(59, interval // 60))))
    sweeper = cron(
        sweep_job,
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
    # Bulk embedding has a worker of its own: interactive embed jobs never queue behind its backlog.
    bulk_worker = RecordingWorker(
        redis_pool=create_redis_client(settings.redis_url),
        functions=_functions(False, settings.job_timeout_s),
        queue_name=engine.queue.names.bulk,
        on_startup=_load_default_model,
        max_jobs=1,
        **common,
    )
    fast_worker = RecordingWorker(
        job_id_prefix=settings.queue_prefix,
        redis_pool=create_redis_client(settings.redis_url),
        functions=_functions(True, settings.job_timeout_s),
        queue_name=engine.queue.names.fast,
        cron_jobs=[] if burst else [sweeper],
        max_jobs=4,
        **common,
    )
    workers: list[Worker] = [embed_worker, bulk_worker, fast_worker]
    return workers + ([node_worker] if node_worker is not None else [])


def holds_workspaces(settings: Settings) -> bool:
    """Whether this process is a workspace node: its node name (``node_id``, else the host name) is
    among ``workspace_nodes``. Only such a process runs a node queue's worker."""
    return settings.routes_workspace_jobs_to_nodes and settings.node_name in settings.workspace_nodes


def _node_worker(engine: Engine, *, burst: bool, handle_signals: bool) -> RecordingWorker | None:
    """The worker of this node's workspace queue; None on one machine (no ``workspace_nodes``) and on
    a process that is not one of the nodes (it still enqueues workspace jobs to their nodes' queues)."""
    settings = engine.settings
    if not settings.routes_workspace_jobs_to_nodes:
        return None
    if not holds_workspaces(settings):
        log.info(
            "this process is not among workspace_nodes: it runs no node queue; workspace jobs go to their nodes' queues",
            extra={"node": settings.node_name, "nodes": list(settings.workspace_nodes)},
        )
        return None
    worker = RecordingWorker(
        redis_pool=create_redis_client(settings.redis_url),
        functions=_functions(True, settings.job_timeout_s, only=engine.queue.node_local_jobs),
        queue_name=engine.queue.names.node(settings.node_name),
        max_jobs=2,
        **_common(engine, burst=burst, handle_signals=handle_signals),
    )
    return worker


async def run_workers(workers: list[Worker]) -> None:
    """Run workers until they stop (``stop_workers``) or the task is cancelled; close them on the way out."""
    try:
        await asyncio.gather(*(_run_through_outages(worker) for worker in workers))
    finally:
        for worker in workers:
            try:
                await worker.close()
            except (RedisError, OSError) as exc:  # Redis down at shutdown: nothing left to tidy there
                log.warning("worker closed without Redis", extra={"queue": worker.queue_name, "error": str(exc)})


async def _run_through_outages(worker: Worker) -> None:
    """Run one worker; start it again once Redis answers when an outage ends arq's poll loop.

    arq 0.28 lets a connection error out of ``main()``, which would end the worker for good. A
    failed ``start_jobs`` can also leave a job slot taken, so the slots are reset before the restart,
    once the jobs still running have finished.
    """
    delay_s = 0.5
    while True:
        try:
            await worker.async_run()
            return
        except (RedisError, OSError) as exc:
            log.warning("worker lost Redis; restarting it", extra={"queue": worker.queue_name, "error": str(exc), "retry_in_s": delay_s})
        running = [task for task in worker.tasks.values() if not task.done()]
        if running:
            await asyncio.wait(running)
        worker.tasks.clear()
        worker.job_counter = 0
        worker.sem = asyncio.BoundedSemaphore(worker.max_jobs + 1)
        if worker.burst and worker.max_burst_jobs == 0:
            return  # stop_workers() asked it to stop while Redis was down
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 5.0)


def stop_workers(workers: list[Worker]) -> None:
    """Ask each worker to leave its poll loop after the running jobs finish.

    arq's poll loop can swallow a CancelledError that lands inside a Redis call and go on polling,
    so stopping is cooperative: burst mode with a zero job budget makes ``main()`` return at its
    next iteration (one poll delay).
    """
    for worker in workers:
        worker.burst = True
        worker.max_burst_jobs = 0
