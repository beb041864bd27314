"""The deployment's queues as arq keeps them in Redis, read the cheap way: counts, what runs now, one job.

Never ``KEYS`` (nor arq's ``all_job_results``, which uses it). Counts come from ``ZCOUNT`` on the
queue sorted sets, a ``SCAN`` of ``arq:in-progress:*`` (few keys: one per running job) and the
worker-kept counters. The page's tally (``tally``), the job table (``jobtable``) and the workers'
health (``health``) read through a :class:`QueueReader`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from service.admin.jobrecord import (
    JobRow,
    JobStatus,
    active_row,
    finished_row,
)
from service.admin.keys import (
    ABORT_SET,
    IN_PROGRESS_PATTERN,
    IN_PROGRESS_PREFIX,
    AdminKeys,
    in_progress_key,
    job_key,
    parse_stats_field,
    result_key,
    retry_key,
)
from service.admin.targets import JobDescriber

if TYPE_CHECKING:
    from service.engine.runtime import Engine

SCAN_COUNT = 1000


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class QueueCounts:
    """One queue's (or job kind's) jobs by state. The page's tally (``tally``) counts jobs waiting to
    run again after a try (``retrying``) apart from ``queued``/``deferred``; the sampler's cheap
    ``overview`` leaves ``retrying`` at 0 and counts them as queued or deferred."""

    queued: int = 0
    deferred: int = 0
    in_progress: int = 0
    retrying: int = 0
    complete: int = 0
    failed: int = 0
    retried: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Overview:
    """Counts per queue and per job kind. ``complete``/``failed``/``retried`` are totals since the
    counters began (the workers keep them); the others are the queues as they are now."""

    queues: dict[str, QueueCounts]
    kinds: dict[str, QueueCounts] = field(default_factory=dict)
    kinds_exact: bool = True
    at_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms,
            "queues": {name: counts.as_dict() for name, counts in self.queues.items()},
            "kinds": {name: counts.as_dict() for name, counts in sorted(self.kinds.items())},
            "kinds_exact": self.kinds_exact,
        }


class QueueReader:
    """Reads the state of this deployment's queues: ``embed``, ``bulk``, ``fast`` and, with workspace
    nodes, each node's ``node:<name>``."""

    def __init__(self, engine: Engine, describer: JobDescriber) -> None:
        self.engine = engine
        self.redis = engine.redis
        self.describer = describer
        self.keys = AdminKeys(engine.settings.queue_prefix)
        names = engine.queue.names
        self.queues: dict[str, str] = {"embed": names.embed, "bulk": names.bulk, "fast": names.fast}
        self.queues.update({f"node:{node}": names.node(node) for node in engine.settings.workspace_nodes})
        self.short: dict[str, str] = {full: short for short, full in self.queues.items()}
        # arq marks a running job for (max job timeout + 10 s): its remaining TTL dates the start.
        self.in_progress_ttl_ms = int((engine.settings.job_timeout_s + 10) * 1000)

    # ---- counts --------------------------------------------------------------------------------

    async def running(self) -> dict[str, str]:
        """Job id -> queue of every job a worker of this deployment runs now."""
        ids = [key.decode()[len(IN_PROGRESS_PREFIX) :] async for key in self.redis.scan_iter(match=IN_PROGRESS_PATTERN, count=SCAN_COUNT)]
        if not ids:
            return {}
        queues = list(self.queues.items())
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                for _, full in queues:
                    pipe.zscore(full, job_id)
            scores = await pipe.execute()
        running: dict[str, str] = {}
        for i, job_id in enumerate(ids):
            for j, (short, _) in enumerate(queues):
                # A cron job keeps its in-progress key a minute after it ends; only queued ids count.
                if scores[i * len(queues) + j] is not None:
                    running[job_id] = short
        return running

    async def overview(self) -> Overview:
        """Counts per queue, cheaply (no job is read): what the sampler records each interval. The
        page's counts, per kind and with jobs waiting to retry apart, come from ``tally``."""
        now = now_ms()
        running = await self.running()
        async with self.redis.pipeline(transaction=False) as pipe:
            for full in self.queues.values():
                pipe.zcount(full, "-inf", now)
                pipe.zcount(full, f"({now}", "+inf")
            pipe.hgetall(self.keys.stats)
            *zcounts, stats = await pipe.execute()
        queues: dict[str, QueueCounts] = {}
        for i, short in enumerate(self.queues):
            in_progress = sum(1 for q in running.values() if q == short)
            queues[short] = QueueCounts(queued=max(0, zcounts[2 * i] - in_progress), deferred=zcounts[2 * i + 1], in_progress=in_progress)
        add_done_counts(stats, self.short, queues, None)
        return Overview(queues=queues, at_ms=now)

    async def hydrate_active(self, short: str, entries: Sequence[tuple[bytes, float]], now: int, running: dict[str, str]) -> list[JobRow]:
        """The rows of waiting or running jobs of one queue, given as (id, score); jobs gone meanwhile are left out."""
        ids = [member.decode() for member, _ in entries]
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.get(job_key(job_id))
                pipe.get(retry_key(job_id))
                pipe.zscore(ABORT_SET, job_id)
                pipe.pttl(in_progress_key(job_id))
            replies = await pipe.execute()
        rows = []
        for i, (job_id, (_, score)) in enumerate(zip(ids, entries, strict=True)):
            data, tries, abort_score, ttl = replies[4 * i : 4 * i + 4]
            is_running = job_id in running
            since = now - (self.in_progress_ttl_ms - ttl) if is_running and ttl and ttl > 0 else None
            row = active_row(
                job_id, short, data, score=int(score), now_ms=now, running=is_running,
                tries=int(tries or 0), abort_requested=abort_score is not None, running_since_ms=since,
            )  # fmt: skip
            if row is not None:
                rows.append(row)
        return rows

    # ---- one job ----------------------------------------------------------------------------------

    async def job(self, job_id: str) -> JobRow | None:
        """One job by id, finished or not, with its arguments; None when arq knows nothing of it."""
        now = now_ms()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(result_key(job_id))
            pipe.get(self.keys.retried_as(job_id))
            pipe.get(self.keys.retry_of(job_id))
            pipe.get(self.keys.traceback(job_id))
            for full in self.queues.values():
                pipe.zscore(full, job_id)
            pipe.exists(in_progress_key(job_id))
            result, retried_as, retry_of, trace, *scores, running = await pipe.execute()
        if result is not None:
            row = finished_row(job_id, result, queue_short=self.short)
            if row is not None and row.queue not in self.queues:
                return None  # another deployment's job on the same Redis: not ours to show or act on
        else:
            queued = [(short, score) for short, score in zip(self.queues, scores, strict=True) if score is not None]
            if not queued:
                return None
            short, score = queued[0]
            rows = await self.hydrate_active(short, [(job_id.encode(), score)], now, {job_id: short} if running else {})
            row = rows[0] if rows else None
        if row is None:
            return None
        if trace is not None and row.status is JobStatus.FAILED:
            row = replace(row, traceback=trace.decode(errors="replace"))
        return (await self.describer.describe([linked_row(row, retried_as, retry_of)]))[0]


def add_done_counts(stats: dict[bytes, bytes], short: dict[str, str], queues: dict[str, QueueCounts], kinds: dict[str, QueueCounts] | None) -> None:
    """Add the workers' complete/failed/retried counters (the stats hash) to ``queues`` and ``kinds``."""
    for raw_field, raw_value in stats.items():
        parsed = parse_stats_field(raw_field.decode())
        if parsed is None or parsed[1] not in short:
            continue
        status, queue, function = parsed
        if status in {"complete", "failed", "retried"}:
            counts = queues[short[queue]]
            setattr(counts, status, getattr(counts, status) + int(raw_value))
            if kinds is not None:
                kind = kinds.setdefault(function, QueueCounts())
                setattr(kind, status, getattr(kind, status) + int(raw_value))


def linked_row(row: JobRow, retried_as: bytes | None, retry_of: bytes | None) -> JobRow:
    """``row`` with the ids of its retry and of the job it retries, as read from their keys."""
    return replace(row, retried_as=retried_as.decode() if retried_as else None, retry_of=retry_of.decode() if retry_of else None)

