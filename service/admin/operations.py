"""The dashboard's actions: retry a failed job, abort a waiting or running one, warm a workspace, sweep now.

Retry enqueues the same function and arguments under a new id (arq refuses an id whose result it
still keeps) and links the two both ways. Abort is arq's own mechanism: the id goes into
``arq:abort``, and the worker (``allow_abort_jobs``) cancels it if running or fails it as
aborted when it picks it up; a deferred job is made due at once so that this happens now.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from service.admin.jobrecord import JobRow, JobStatus
from service.admin.keys import ABORT_SET, AdminKeys
from service.admin.queues import QueueReader
from service.admin.targets import workspace_tenant
from service.errors import Conflict, NotFound, Unavailable

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

WARM_JOB = "warm_workspace"
SWEEP_JOB = "sweep"
# The link between a failed job and its retry outlives the failed job's result (kept an hour).
LINK_TTL_S = 2 * 3600


class JobOperations:
    """The actions of one app; every one is logged with the admin who asked."""

    def __init__(self, engine: Engine, reader: QueueReader, job_names: frozenset[str]) -> None:
        self.job_names = job_names
        self.engine = engine
        self.reader = reader
        self.redis = engine.redis
        self.keys = AdminKeys(engine.settings.queue_prefix)

    async def _existing(self, job_id: str) -> JobRow:
        row = await self.reader.job(job_id)
        if row is None:
            raise NotFound(f"no job {job_id!r}: it never existed, or it finished over an hour ago and its result expired")
        return row

    async def retry(self, job_id: str, *, admin: str) -> JobRow:
        """Enqueue a failed job again under a new id; 409 unless it failed, or when it was retried already."""
        row = await self._existing(job_id)
        if row.status is not JobStatus.FAILED:
            raise Conflict(f"job {job_id} is {row.status.value}; only a failed job can be retried")
        if row.function not in self.job_names:
            raise Conflict(f"job {job_id} ran {row.function!r}, which no worker runs; it cannot be retried")
        new_id = f"{self.keys.prefix}:retry:{uuid.uuid4().hex[:16]}"
        try:
            # Claim the link first: two clicks on Retry enqueue one job, not two.
            if not await self.redis.set(self.keys.retried_as(job_id), new_id, nx=True, ex=LINK_TTL_S):
                existing = await self.redis.get(self.keys.retried_as(job_id))
                retried_as = existing.decode() if existing else "another job"
                raise Conflict(f"job {job_id} was already retried as {retried_as}", details={"retried_as": retried_as})
            job = await self.redis.enqueue_job(row.function, *row.args, _job_id=new_id, _queue_name=self.reader.queues[row.queue], **row.kwargs)
            if job is None:
                await self.redis.delete(self.keys.retried_as(job_id))
                raise Conflict(f"arq refused job id {new_id}; try again")
            await self.redis.set(self.keys.retry_of(new_id), job_id, ex=LINK_TTL_S)
        except (RedisError, OSError) as exc:
            raise Unavailable(f"Redis refused the retry ({exc}); try again") from None
        log.info("admin retried a job", extra={"job_id": job_id, "new_job_id": new_id, "admin": admin})
        return await self._existing(new_id)

    async def abort(self, job_id: str, *, admin: str) -> dict[str, Any]:
        """Ask arq to abort a queued, deferred or running job; 409 once it finished."""
        row = await self._existing(job_id)
        if not row.status.active:
            raise Conflict(f"job {job_id} is {row.status.value}; only a queued, deferred or running job can be aborted")
        queue = self.reader.queues[row.queue]
        try:
            async with self.redis.pipeline(transaction=True) as tr:
                if row.status is JobStatus.DEFERRED:
                    tr.zadd(queue, {job_id: 1}, xx=True)  # due now: the worker then fails it as aborted (arq's Job.abort does the same)
                tr.zadd(ABORT_SET, {job_id: int(time.time() * 1000)})
                await tr.execute()
        except (RedisError, OSError) as exc:
            raise Unavailable(f"Redis refused the abort ({exc}); try again") from None
        log.info("admin aborted a job", extra={"job_id": job_id, "status": row.status.value, "admin": admin})
        return {"id": job_id, "status": row.status.value, "abort_requested": True}

    async def warm_workspace(self, workspace_id: str, *, admin: str) -> dict[str, Any]:
        """Enqueue the warm-up of a registered workspace on the fast queue."""
        if WARM_JOB not in self.job_names:
            raise NotFound(f"job {WARM_JOB} is not registered in this deployment (no code surface)")
        if workspace_tenant(self.engine, workspace_id) is None:
            raise NotFound(f"no workspace {workspace_id!r}; a workspace id is ws_ followed by 20 hex digits, as POST /v1/workspaces returned it")
        job_id = f"{self.keys.prefix}:{WARM_JOB}:{workspace_id}:{uuid.uuid4().hex[:8]}"
        return await self._enqueue_interactive(WARM_JOB, job_id, workspace_id, admin=admin)

    async def sweep_now(self, *, admin: str) -> dict[str, Any]:
        """Run the sweeper now (it also runs on its cron)."""
        job_id = f"{self.keys.prefix}:{SWEEP_JOB}:admin:{uuid.uuid4().hex[:8]}"
        return await self._enqueue_interactive(SWEEP_JOB, job_id, admin=admin)

    async def _enqueue_interactive(self, function: str, job_id: str, *args: Any, admin: str) -> dict[str, Any]:
        """Enqueue on the fast queue, or a workspace job on its node's queue when workspaces live on several nodes."""
        job = await self.engine.queue.enqueue(function, *args, job_id=job_id, fast=True)
        if job is None:
            raise Unavailable(f"Redis refused to enqueue {function}; try again")
        log.info("admin enqueued a job", extra={"job_id": job_id, "function": function, "admin": admin})
        queue = self.reader.short[self.engine.queue.queue_of(function, args, fast=True)]
        return {"id": job_id, "function": function, "queue": queue, "args": list(args)}
