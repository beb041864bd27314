"""The dashboard's job table: one page of jobs under filters, newest first, read within a bounded budget.

Table pages walk the queue and finished-id sorted sets newest first with
``ZREVRANGEBYSCORE``/``ZREVRANGE`` in chunks, hydrating each chunk with one pipeline of ``GET``s.
Filters that need a job's body (kind, surface, tenant) stop after ``ROW_SCAN_LIMIT`` entries and
say so (``truncated``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from service.admin.jobrecord import ACTIVE_STATUSES, FINISHED_STATUSES, JobRow, JobStatus, finished_row
from service.admin.keys import result_key
from service.admin.queues import QueueReader, linked_row, now_ms

CHUNK = 100
# Entries a filtered table page may read before it stops and says ``truncated``.
ROW_SCAN_LIMIT = 2_000
MAX_OFFSET = 10_000
MAX_LIMIT = 200


@dataclass(frozen=True)
class JobQuery:
    """A page of the job table: filters (all optional) and the window."""

    status: JobStatus | None = None
    function: str | None = None
    surface: str | None = None
    tenant: str | None = None
    queue: str | None = None
    offset: int = 0
    limit: int = 50

    @property
    def reads_bodies(self) -> bool:
        """Whether matching needs each job's body: then the walk is bounded and the total unknown.

        Finished ids are kept per status, not per queue: a queue filter reads their results too."""
        finished = self.status is None or not self.status.active
        return bool(self.function or self.surface or self.tenant or (self.queue and finished))

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value if self.status else None,
            "function": self.function,
            "surface": self.surface,
            "tenant": self.tenant,
            "queue": self.queue,
            "offset": self.offset,
            "limit": self.limit,
        }


@dataclass
class JobPage:
    rows: list[JobRow]
    query: JobQuery
    has_more: bool
    total: int | None
    scanned: int
    truncated: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": [row.as_dict() for row in self.rows],
            "query": self.query.as_dict(),
            "has_more": self.has_more,
            "total": self.total,
            "scanned": self.scanned,
            "truncated": self.truncated,
        }


@dataclass
class _Budget:
    """Entries read by one table page across its sources."""

    left: int
    spent: int = 0

    def spend(self, count: int) -> None:
        self.left -= count
        self.spent += count

    @property
    def exhausted(self) -> bool:
        return self.left <= 0



class JobTable:
    """Pages of the job table over the queues of one :class:`QueueReader` and the finished-id sets."""

    def __init__(self, reader: QueueReader) -> None:
        self.reader = reader
        self.redis = reader.redis
        self.keys = reader.keys
        self.queues = reader.queues
        self.short = reader.short
        self.describer = reader.describer

    async def list_jobs(self, query: JobQuery) -> JobPage:
        now = now_ms()
        running = await self.reader.running()
        if not query.reads_bodies:
            rows, has_more, scanned = await self._page_by_scores(query, now, running)
            total = await self._total(query, now, running)
            return JobPage(rows=rows, query=query, has_more=has_more, total=total, scanned=scanned, truncated=False)
        budget = _Budget(ROW_SCAN_LIMIT)
        sources = [self._active_rows(short, query, now, running, budget) for short in self._queues_of(query) if _wants_active(query)]
        sources += [self._finished_rows(status, query, budget) for status in FINISHED_STATUSES if query.status in (None, status)]
        matched: list[JobRow] = []
        wanted = query.offset + query.limit + 1
        async with contextlib.aclosing(_batched(_newest_first(sources), 50)) as batches:
            async for batch in batches:
                described = await self.describer.describe(batch)
                matched.extend(row for row in described if query.tenant is None or query.tenant in row.target.tenants)
                if len(matched) >= wanted:
                    break
        return JobPage(
            rows=matched[query.offset : query.offset + query.limit],
            query=query,
            has_more=len(matched) > query.offset + query.limit,
            total=None,
            scanned=budget.spent,
            truncated=budget.exhausted and len(matched) < wanted,
        )

    async def _page_by_scores(self, query: JobQuery, now: int, running: dict[str, str]) -> tuple[list[JobRow], bool, int]:
        """A page of a query that filters by status (and queue of waiting jobs) only: merge the ids by
        score, then read the page's jobs alone. Returns (rows, has_more, entries read)."""
        need = query.offset + query.limit + 1
        candidates: list[tuple[float, str | None, str]] = []  # (score, short queue or None when finished, id)
        for short in self._queues_of(query) if _wants_active(query) else []:
            candidates += await self._active_scores(short, query, now, running, need)
        for status in FINISHED_STATUSES:
            if query.status in (None, status):
                entries = await self.redis.zrevrange(self.keys.done(status.value), 0, need - 1, withscores=True)
                candidates += [(score, None, member.decode()) for member, score in entries]
        candidates.sort(key=lambda c: -c[0])
        window = candidates[query.offset : need]
        found: dict[str, JobRow] = {}
        for short in {queue for _, queue, _ in window if queue is not None}:
            entries = [(job_id.encode(), score) for score, queue, job_id in window if queue == short]
            found.update((row.id, row) for row in await self.reader.hydrate_active(short, entries, now, running))
        finished, expired = await self.hydrate_finished([job_id for _, queue, job_id in window if queue is None])
        found.update((row.id, row) for row in finished)
        if expired:  # results expire an hour after the job ended; drop their ids from either set
            for status in FINISHED_STATUSES:
                await self.redis.zrem(self.keys.done(status.value), *expired)
        rows = await self.describer.describe([found[job_id] for _, _, job_id in window if job_id in found])
        return rows[: query.limit], len(window) > query.limit, len(candidates)

    async def _active_scores(self, short: str, query: JobQuery, now: int, running: dict[str, str], need: int) -> list[tuple[float, str | None, str]]:
        full = self.queues[short]
        if query.status is JobStatus.IN_PROGRESS:
            ids = [job_id for job_id, queue in running.items() if queue == short]
            scores = [await self.redis.zscore(full, job_id) for job_id in ids]
            return [(score, short, job_id) for job_id, score in zip(ids, scores, strict=True) if score is not None]
        high: Any = now if query.status is JobStatus.QUEUED else "+inf"
        low: Any = f"({now}" if query.status is JobStatus.DEFERRED else "-inf"
        # Running jobs sit among the queued ones (same score range): read enough to skip them.
        entries = await self.redis.zrevrangebyscore(full, high, low, start=0, num=need + len(running), withscores=True)
        skip_running = query.status is JobStatus.QUEUED
        return [(score, short, member.decode()) for member, score in entries if not (skip_running and member.decode() in running)]

    def _queues_of(self, query: JobQuery) -> list[str]:
        return [query.queue] if query.queue else list(self.queues)

    async def _active_rows(self, short: str, query: JobQuery, now: int, running: dict[str, str], budget: _Budget) -> AsyncGenerator[JobRow, None]:
        """Waiting and running jobs of one queue, highest score (latest due) first."""
        full = self.queues[short]
        if query.status is JobStatus.IN_PROGRESS:
            ids = [job_id for job_id, queue in running.items() if queue == short]
            scores = [await self.redis.zscore(full, job_id) for job_id in ids]
            entries = sorted(((i.encode(), s) for i, s in zip(ids, scores, strict=True) if s is not None), key=lambda e: -e[1])
            budget.spend(len(entries))
            for row in await self.reader.hydrate_active(short, entries, now, running):
                if self._matches(row, query):
                    yield row
            return
        high: Any = now if query.status is JobStatus.QUEUED else "+inf"
        low: Any = f"({now}" if query.status is JobStatus.DEFERRED else "-inf"
        start = 0
        while not budget.exhausted:
            entries = await self.redis.zrevrangebyscore(full, high, low, start=start, num=CHUNK, withscores=True)
            if not entries:
                return
            start += len(entries)
            budget.spend(len(entries))
            for row in await self.reader.hydrate_active(short, entries, now, running):
                if self._matches(row, query):
                    yield row

    async def _finished_rows(self, status: JobStatus, query: JobQuery, budget: _Budget) -> AsyncGenerator[JobRow, None]:
        """Finished jobs of one status, latest finish first; ids whose result expired are dropped."""
        done = self.keys.done(status.value)
        start = 0
        while not budget.exhausted:
            entries = await self.redis.zrevrange(done, start, start + CHUNK - 1)
            if not entries:
                return
            start += len(entries)
            budget.spend(len(entries))
            rows, expired = await self.hydrate_finished([member.decode() for member in entries])
            if expired:
                await self.redis.zrem(done, *expired)
                start -= len(expired)
            for row in rows:
                if self._matches(row, query):
                    yield row

    async def hydrate_finished(self, ids: Sequence[str]) -> tuple[list[JobRow], list[str]]:
        """Finished jobs by id with their retry links, and the ids whose result expired."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.get(result_key(job_id))
                pipe.get(self.keys.retried_as(job_id))
                pipe.get(self.keys.retry_of(job_id))
            replies = await pipe.execute()
        rows, expired = [], []
        for i, job_id in enumerate(ids):
            data, retried_as, retry_of = replies[3 * i : 3 * i + 3]
            row = finished_row(job_id, data, queue_short=self.short)
            if row is None:
                expired.append(job_id)
                continue
            rows.append(linked_row(row, retried_as, retry_of))
        return rows, expired

    def _matches(self, row: JobRow, query: JobQuery) -> bool:
        if query.status is not None and row.status is not query.status:
            return False
        if query.queue is not None and row.queue != query.queue:
            return False
        if query.function is not None and row.function != query.function:
            return False
        return query.surface is None or self.describer.cheap_surface(row) == query.surface

    async def _total(self, query: JobQuery, now: int, running: dict[str, str]) -> int:
        """Exact count of the rows an unfiltered (by body) query matches."""
        total = 0
        for short in self._queues_of(query):
            full = self.queues[short]
            in_progress = sum(1 for q in running.values() if q == short)
            if query.status is None:
                total += await self.redis.zcard(full)
            elif query.status is JobStatus.QUEUED:
                total += max(0, await self.redis.zcount(full, "-inf", now) - in_progress)
            elif query.status is JobStatus.DEFERRED:
                total += await self.redis.zcount(full, f"({now}", "+inf")
            elif query.status is JobStatus.IN_PROGRESS:
                total += in_progress
        if query.queue is None:  # (with a queue filter, finished rows are counted by reading them)
            for status in FINISHED_STATUSES:
                if query.status in (None, status):
                    total += await self.redis.zcard(self.keys.done(status.value))
        return total


def _wants_active(query: JobQuery) -> bool:
    return query.status is None or query.status in ACTIVE_STATUSES


async def _newest_first(sources: list[AsyncGenerator[JobRow, None]]) -> AsyncGenerator[JobRow, None]:
    """Merge sources that each yield newest first into one newest-first stream."""
    heads: list[tuple[JobRow, AsyncGenerator[JobRow, None]]] = []
    try:
        for source in sources:
            row = await anext(source, None)
            if row is not None:
                heads.append((row, source))
        while heads:
            best = max(range(len(heads)), key=lambda i: heads[i][0].sort_ms)
            row, source = heads[best]
            yield row
            following = await anext(source, None)
            if following is None:
                heads.pop(best)
            else:
                heads[best] = (following, source)
    finally:
        for source in sources:
            await source.aclose()


async def _batched(rows: AsyncGenerator[JobRow, None], size: int) -> AsyncGenerator[list[JobRow], None]:
    batch: list[JobRow] = []
    try:
        async for row in rows:
            batch.append(row)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        await rows.aclose()
