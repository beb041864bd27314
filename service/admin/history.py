"""The worker's side of the dashboard: as each job ends, index it (finished ids by status), count it
(complete, failed, retried per queue and function) and note which surfaces and tenants it warmed.

arq keeps results under ``arq:result:<id>`` with no index of them; listing them would take a
``KEYS`` or a walk of the keyspace. So the worker records each finished id in a sorted set as it
finishes it (``RecordingWorker`` in ``workers/settings.py`` calls ``finished``/``retried`` from
arq's ``finish_job``/``finish_failed_job``, the two places every ending goes through, aborted and
max-tries-exceeded ones included). Recording never fails a job: a Redis error is logged and the
counters miss one job.

It also keeps what arq does not: the stack trace of a job that fails (``failed_with``, called by the
job's wrapper while the exception is at hand; arq's result keeps ``Type: message`` only) and the
jobs' durations per bucket of ``DURATION_BUCKETS_S`` (exported to ``/metrics`` by the front end).
"""

from __future__ import annotations

import bisect
import logging
import time
import traceback
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.admin.jobrecord import FUNCTION_PEEK_BYTES, JobStatus, function_of_peek
from service.admin.keys import AdminKeys, job_key, stats_field
from service.admin.targets import EMBED_JOB, JobDescriber
from service.engine.queue import deserialize
from service.engine.store import StoreError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# Finished ids kept per status beyond the retention trim: bounds memory after a burst of jobs.
MAX_FINISHED_IDS = 100_000
# Upper bounds (seconds) of the job-duration histogram's buckets; the last bucket is +Inf.
DURATION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# A stack trace is cut to its last this many characters (the innermost frames and the error).
MAX_TRACEBACK_CHARS = 20_000


def duration_bucket(seconds: float) -> str:
    """The ``le`` label of the histogram bucket a job of ``seconds`` falls in."""
    index = bisect.bisect_left(DURATION_BUCKETS_S, seconds)
    return "+Inf" if index == len(DURATION_BUCKETS_S) else repr(DURATION_BUCKETS_S[index])


class JobRecorder:
    """Records job endings for the dashboard; one per worker process."""

    def __init__(self, engine: Engine, *, keep_s: float) -> None:
        self.keys = AdminKeys(engine.settings.queue_prefix)
        self.keep_ms = int(keep_s * 1000)
        self.describer = JobDescriber(engine)

    async def finished(self, redis: Redis, queue: str, job_id: str, result_data: bytes | None) -> None:
        """A job ended (complete, failed or aborted) and arq stored ``result_data`` for it."""
        if result_data is None:
            return  # arq keeps no result (keep_result=0) or could not serialize it: nothing to link to
        try:
            result = deserialize(result_data)
        except ValueError:
            return
        status = JobStatus.COMPLETE if result.get("s") else JobStatus.FAILED
        function = str(result.get("f"))
        finished_ms = int(result.get("ft") or time.time() * 1000)
        try:
            async with redis.pipeline(transaction=False) as pipe:
                done = self.keys.done(status.value)
                pipe.zadd(done, {job_id: finished_ms})
                pipe.zremrangebyscore(done, "-inf", finished_ms - self.keep_ms)
                pipe.zremrangebyrank(done, 0, -(MAX_FINISHED_IDS + 1))
                pipe.hincrby(self.keys.stats, stats_field(status.value, queue, function), 1)
                started_ms = result.get("st")
                if isinstance(started_ms, (int, float)):
                    series = f"{queue}|{function}|{status.value}"
                    pipe.hincrby(self.keys.durations, f"{series}|{duration_bucket((finished_ms - started_ms) / 1000)}", 1)
                    pipe.hincrby(self.keys.durations, f"{series}|sum_ms", max(0, int(finished_ms - started_ms)))
                await pipe.execute()
            if status is JobStatus.COMPLETE and function == EMBED_JOB:
                await self._note_warm(redis, result, finished_ms)
        except (RedisError, OSError) as exc:
            log.warning("job ending not recorded for the dashboard", extra={"job_id": job_id, "error": str(exc)})

    async def retried(self, redis: Redis, queue: str, job_id: str) -> None:
        """A job asked to run again (``Retry``, or cancelled by a shutdown): it stays in the queue."""
        try:
            head = await redis.getrange(job_key(job_id), 0, FUNCTION_PEEK_BYTES - 1)
            function = function_of_peek(head) or "<unknown>"
            await redis.hincrby(self.keys.stats, stats_field("retried", queue, function), 1)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
        except (RedisError, OSError) as exc:
            log.warning("job retry not recorded for the dashboard", extra={"job_id": job_id, "error": str(exc)})

    async def failed_with(self, redis: Redis, job_id: str, exc: BaseException) -> None:
        """Keep the stack trace of job ``job_id``, which fails with ``exc``, as long as its result."""
        text = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
        try:
            await redis.set(self.keys.traceback(job_id), text.encode(), px=self.keep_ms)
        except (RedisError, OSError) as err:
            log.warning("stack trace not recorded for the dashboard", extra={"job_id": job_id, "error": str(err)})

    async def _note_warm(self, redis: Redis, result: dict[str, Any], finished_ms: int) -> None:
        """Last-warm times of the surface and tenants whose records an embed job embedded."""
        outcome, args = result.get("r"), result.get("a") or []
        if not isinstance(outcome, dict) or not outcome.get("embedded") or len(args) < 2:
            return
        keys = [str(item[0]) for item in args[1] if isinstance(item, list) and item]
        try:
            surface, tenants = await self.describer.tenants_of_embed_job(str(args[0]), keys)
        except StoreError as exc:
            log.warning("last warm not recorded", extra={"error": str(exc)})
            return
        if surface is None:
            return
        fields = {surface: finished_ms, **{f"{surface}|{tenant}": finished_ms for tenant in tenants}}
        await redis.hset(self.keys.last_warm, mapping=fields)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
