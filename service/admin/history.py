"""The worker's side of the dashboard: as each job ends, index it (finished ids by status), count it
(complete, failed, retried per queue and function) and note which surfaces and tenants it warmed.

arq keeps results under ``arq:result:<id>`` with no index of them; listing them would take a
``KEYS`` or a walk of the keyspace. So the worker records each finished id in a sorted set as it
finishes it (``RecordingWorker`` in ``workers/settings.py`` calls ``finished``/``retried`` from
arq's ``finish_job``/``finish_failed_job``, the two places every ending goes through, aborted and
max-tries-exceeded ones included). Recording never fails a job: a Redis error is logged and the
counters miss one job.
"""

from __future__ import annotations

import logging
import time
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
