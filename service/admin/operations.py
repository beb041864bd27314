"""The dashboard's actions: retry a failed job, abort a waiting or running one, warm a workspace, sweep now,
and the bulk actions of the Retries and Dead tabs (retry now or delete jobs waiting to retry; retry
or delete dead jobs).

Retry enqueues the same function and arguments under a new id (arq refuses an id whose result it
still keeps) and links the two both ways. Abort is arq's own mechanism: the id goes into
``arq:abort``, and the worker (``allow_abort_jobs``) cancels it if running or fails it as
aborted when it picks it up; a deferred job is made due at once so that this happens now.

A bulk action acts on each id it is given and says, per id, what it did or why it refused; one
refusal never stops the others. Deleting a job waiting to retry removes it from its queue with its
``arq:job`` and ``arq:retry`` keys (a running job is refused); deleting a dead job removes its
result, its stack trace and its id from the failed set (the workers' totals keep counting it).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from service.admin.jobrecord import JobRow, JobStatus, finished_row
from service.admin.keys import ABORT_SET, AdminKeys, in_progress_key, job_key, result_key, retry_key
from service.admin.queues import QueueReader, now_ms
from service.admin.targets import workspace_tenant
from service.errors import AgentSearchError, Conflict, NotFound, Unavailable

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

WARM_JOB = "warm_workspace"
SWEEP_JOB = "sweep"
# The link between a failed job and its retry outlives the failed job's result (kept an hour).
LINK_TTL_S = 2 * 3600
# Jobs one bulk action (or one press of "retry all"/"delete all") acts on at most.
BULK_LIMIT = 1000


@dataclass
class BulkOutcome:
    """What a bulk action did: the ids it acted on (with the new id of each retry) and the refusals."""

    action: str
    done: list[str] = field(default_factory=list)
    retried_as: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    left: int = 0

    def summary(self) -> str:
        text = f"{self.action}: {len(self.done)} job{'' if len(self.done) == 1 else 's'}"
        if self.refused:
            first_id, reason = next(iter(self.refused.items()))
            text += f"; {len(self.refused)} refused (first: {first_id}: {reason})"
        if self.left:
            text += f"; {self.left} more not done in this press (at most {BULK_LIMIT} at once), press again"
        return text + "."

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "done": self.done, "retried_as": self.retried_as, "refused": self.refused, "left": self.left}


# The bulk actions and how they are named to the admin.
BULK_ACTIONS = {"retry_now": "Retried now", "delete_waiting": "Deleted", "retry_dead": "Retried", "delete_dead": "Deleted"}


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

    # ---- bulk: the Retries and Dead tabs ---------------------------------------------------------------

    async def bulk(self, action: str, ids: Sequence[str], *, admin: str, left: int = 0) -> BulkOutcome:
        """Run ``action`` (``retry_now``, ``delete_waiting``, ``retry_dead`` or ``delete_dead``) on each id."""
        one: dict[str, Callable[[str], Awaitable[str | None]]] = {
            "retry_now": self._retry_now,
            "delete_waiting": self._delete_waiting,
            "retry_dead": lambda job_id: self._retry_dead(job_id, admin),
            "delete_dead": self._delete_dead,
        }
        outcome = BulkOutcome(action=BULK_ACTIONS[action], left=left)
        for job_id in dict.fromkeys(ids):
            try:
                new_id = await one[action](job_id)
            except AgentSearchError as exc:
                outcome.refused[job_id] = exc.message
                continue
            except (RedisError, OSError) as exc:
                raise Unavailable(f"Redis refused the {BULK_ACTIONS[action].lower()} after {len(outcome.done)} jobs ({exc}); try again") from None
            outcome.done.append(job_id)
            if new_id is not None:
                outcome.retried_as[job_id] = new_id
        log.info("admin bulk action", extra={"action": action, "done": len(outcome.done), "refused": len(outcome.refused), "admin": admin})
        return outcome

    async def _waiting(self, job_id: str) -> str:
        """The full queue name of a job waiting to run again; refused when it runs or never ran."""
        queued = [full for full in self.reader.queues.values() if await self.redis.zscore(full, job_id) is not None]
        if not queued:
            raise NotFound(f"job {job_id} is not waiting in any queue of this deployment")
        if await self.redis.exists(in_progress_key(job_id)):
            raise Conflict(f"job {job_id} is running; abort it instead")
        if not await self.redis.exists(retry_key(job_id)):
            raise Conflict(f"job {job_id} never ran: it is not waiting to retry")
        return queued[0]

    async def _retry_now(self, job_id: str) -> None:
        queue = await self._waiting(job_id)
        await self.redis.zadd(queue, {job_id: now_ms()}, xx=True)
        return None

    async def _delete_waiting(self, job_id: str) -> None:
        queue = await self._waiting(job_id)
        async with self.redis.pipeline(transaction=True) as tr:
            tr.zrem(queue, job_id)
            tr.delete(job_key(job_id), retry_key(job_id))
            await tr.execute()
        return None

    async def _retry_dead(self, job_id: str, admin: str) -> str:
        return (await self.retry(job_id, admin=admin)).id

    async def _delete_dead(self, job_id: str) -> None:
        row = finished_row(job_id, await self.redis.get(result_key(job_id)), queue_short=self.reader.short)
        if row is None or row.queue not in self.reader.queues:
            raise NotFound(f"no dead job {job_id!r}: its result expired, it was deleted, or it is another deployment's")
        if row.status is not JobStatus.FAILED:
            raise Conflict(f"job {job_id} is {row.status.value}; only a failed job is dead")
        async with self.redis.pipeline(transaction=True) as tr:
            tr.delete(result_key(job_id), self.keys.traceback(job_id), self.keys.retried_as(job_id))
            tr.zrem(self.keys.done(JobStatus.FAILED.value), job_id)
            await tr.execute()
        return None

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
