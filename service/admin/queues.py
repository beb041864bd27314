"""Reading arq's state from Redis the cheap way: counts, the job table, one job, the workers' health.

Never ``KEYS`` (nor arq's ``all_job_results``, which uses it). Counts come from ``ZCOUNT`` on the
queue sorted sets, a ``SCAN`` of ``arq:in-progress:*`` (few keys: one per running job) and the
worker-kept counters; per-kind counts peek at the first bytes of each waiting job with a pipelined
``GETRANGE``; table pages walk the queue and finished-id sorted sets newest first with
``ZREVRANGEBYSCORE``/``ZREVRANGE`` in chunks, hydrating each chunk with one pipeline of ``GET``s.
Filters that need a job's body (kind, surface, tenant) stop after ``ROW_SCAN_LIMIT`` entries and
say so (``truncated``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from service.admin.keys import (
    ABORT_SET,
    IN_PROGRESS_PATTERN,
    IN_PROGRESS_PREFIX,
    AdminKeys,
    health_check_key,
    in_progress_key,
    job_key,
    parse_stats_field,
    result_key,
    retry_key,
)
from service.admin.model import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    FUNCTION_PEEK_BYTES,
    JobRow,
    JobStatus,
    active_row,
    finished_row,
    function_of_peek,
)
from service.admin.targets import JobDescriber

if TYPE_CHECKING:
    from service.engine.runtime import Engine

SCAN_COUNT = 1000
CHUNK = 100
# Waiting jobs whose kind is counted; past it the per-kind counts are marked inexact.
KIND_SCAN_LIMIT = 20_000
# Entries a filtered table page may read before it stops and says ``truncated``.
ROW_SCAN_LIMIT = 2_000
MAX_OFFSET = 10_000
MAX_LIMIT = 200
_HEALTH_RE = re.compile(r"^(?P<when>\w{3}-\d{2} \d{2}:\d{2}:\d{2}) (?P<fields>.*)$")
_HEALTH_FIELDS = {"j_complete": "complete", "j_failed": "failed", "j_retried": "retried", "j_ongoing": "ongoing", "queued": "queued"}


def now_ms() -> int:
    return int(time.time() * 1000)


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


@dataclass
class QueueCounts:
    queued: int = 0
    deferred: int = 0
    in_progress: int = 0
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

    async def overview(self, *, kinds: bool = True) -> Overview:
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
        by_kind: dict[str, QueueCounts] = defaultdict(QueueCounts)
        for raw_field, raw_value in stats.items():
            parsed = parse_stats_field(raw_field.decode())
            if parsed is None or parsed[1] not in self.short:
                continue
            status, queue, function = parsed
            if status in {"complete", "failed", "retried"}:
                setattr(queues[self.short[queue]], status, getattr(queues[self.short[queue]], status) + int(raw_value))
                setattr(by_kind[function], status, getattr(by_kind[function], status) + int(raw_value))
        exact = True
        if kinds:
            exact = await self._count_waiting_kinds(by_kind, now, running)
        return Overview(queues=queues, kinds=dict(by_kind) if kinds else {}, kinds_exact=exact, at_ms=now)

    async def _count_waiting_kinds(self, by_kind: dict[str, QueueCounts], now: int, running: dict[str, str]) -> bool:
        """Add queued/deferred/in-progress per function; False when a queue was longer than the limit."""
        exact = True
        for full in self.queues.values():
            entries = await self.redis.zrange(full, 0, KIND_SCAN_LIMIT - 1, withscores=True)
            exact = exact and len(entries) < KIND_SCAN_LIMIT
            for start in range(0, len(entries), 1000):
                chunk = entries[start : start + 1000]
                async with self.redis.pipeline(transaction=False) as pipe:
                    for member, _ in chunk:
                        pipe.getrange(job_key(member.decode()), 0, FUNCTION_PEEK_BYTES - 1)
                    heads = await pipe.execute()
                for (member, score), head in zip(chunk, heads, strict=True):
                    if not head:
                        continue  # finished between the two reads
                    counts = by_kind[function_of_peek(head) or "<unknown>"]
                    job_id = member.decode()
                    if job_id in running:
                        counts.in_progress += 1
                    elif score > now:
                        counts.deferred += 1
                    else:
                        counts.queued += 1
        return exact

    # ---- the job table ---------------------------------------------------------------------------

    async def list_jobs(self, query: JobQuery) -> JobPage:
        now = now_ms()
        running = await self.running()
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
            found.update((row.id, row) for row in await self._hydrate_active(short, entries, now, running))
        finished, expired = await self._hydrate_finished([job_id for _, queue, job_id in window if queue is None])
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
            for row in await self._hydrate_active(short, entries, now, running):
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
            for row in await self._hydrate_active(short, entries, now, running):
                if self._matches(row, query):
                    yield row

    async def _hydrate_active(self, short: str, entries: Sequence[tuple[bytes, float]], now: int, running: dict[str, str]) -> list[JobRow]:
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
            rows, expired = await self._hydrate_finished([member.decode() for member in entries])
            if expired:
                await self.redis.zrem(done, *expired)
                start -= len(expired)
            for row in rows:
                if self._matches(row, query):
                    yield row

    async def _hydrate_finished(self, ids: Sequence[str]) -> tuple[list[JobRow], list[str]]:
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
            rows.append(_linked(row, retried_as, retry_of))
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

    # ---- one job ----------------------------------------------------------------------------------

    async def job(self, job_id: str) -> JobRow | None:
        """One job by id, finished or not, with its arguments; None when arq knows nothing of it."""
        now = now_ms()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(result_key(job_id))
            pipe.get(self.keys.retried_as(job_id))
            pipe.get(self.keys.retry_of(job_id))
            for full in self.queues.values():
                pipe.zscore(full, job_id)
            pipe.exists(in_progress_key(job_id))
            result, retried_as, retry_of, *scores, running = await pipe.execute()
        if result is not None:
            row = finished_row(job_id, result, queue_short=self.short)
            if row is not None and row.queue not in self.queues:
                return None  # another deployment's job on the same Redis: not ours to show or act on
        else:
            queued = [(short, score) for short, score in zip(self.queues, scores, strict=True) if score is not None]
            if not queued:
                return None
            short, score = queued[0]
            rows = await self._hydrate_active(short, [(job_id.encode(), score)], now, {job_id: short} if running else {})
            row = rows[0] if rows else None
        if row is None:
            return None
        return (await self.describer.describe([_linked(row, retried_as, retry_of)]))[0]

    # ---- workers ----------------------------------------------------------------------------------

    async def workers(self) -> list[dict[str, Any]]:
        """Each queue's worker health line, its age, and up or down (no line, or an old one)."""
        interval_s = self.engine.settings.worker_health_check_s
        async with self.redis.pipeline(transaction=False) as pipe:
            for full in self.queues.values():
                pipe.get(health_check_key(full))
            pipe.hgetall(self.keys.workers_seen)
            *lines, seen = await pipe.execute()
        now = time.time()
        workers, fresh = [], {}
        for (short, full), raw in zip(self.queues.items(), lines, strict=True):
            line = raw.decode() if raw else None
            if line:
                fresh[full] = orjson.dumps({"line": line, "seen": now})
            else:
                remembered = seen.get(full.encode())
                line = orjson.loads(remembered)["line"] if remembered else None
            workers.append(_worker_state(short, full, line, live=raw is not None, now=now, stale_after_s=2 * interval_s + 1))
        if fresh:
            await self.redis.hset(self.keys.workers_seen, mapping=fresh)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
        return workers


def _wants_active(query: JobQuery) -> bool:
    return query.status is None or query.status in ACTIVE_STATUSES


def _linked(row: JobRow, retried_as: bytes | None, retry_of: bytes | None) -> JobRow:
    return replace(row, retried_as=retried_as.decode() if retried_as else None, retry_of=retry_of.decode() if retry_of else None)


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


def parse_health_line(line: str, now: float) -> tuple[dict[str, int], float | None]:
    """The counters of an arq health line and its age in seconds (None when its time does not parse).

    arq writes the time as ``%b-%d %H:%M:%S`` in the worker's local time, without a year.
    """
    counts: dict[str, int] = {}
    match = _HEALTH_RE.match(line)
    fields = match.group("fields") if match else line
    for part in fields.split():
        name, _, value = part.partition("=")
        if name in _HEALTH_FIELDS and value.isdigit():
            counts[_HEALTH_FIELDS[name]] = int(value)
    if match is None:
        return counts, None
    current = datetime.fromtimestamp(now)
    try:
        when = datetime.strptime(f"{current.year} {match.group('when')}", "%Y %b-%d %H:%M:%S")
        if when > current.replace(microsecond=0) and (when - current).days >= 1:
            when = when.replace(year=current.year - 1)  # written last December, read in January
    except ValueError:
        return counts, None
    return counts, max(0.0, (current - when).total_seconds())


def _worker_state(short: str, full: str, line: str | None, *, live: bool, now: float, stale_after_s: float) -> dict[str, Any]:
    counts, age = parse_health_line(line, now) if line else ({}, None)
    up = live and (age is None or age <= stale_after_s)
    if not line:
        reason = "no health check recorded: the worker is stopped or never started"
    elif not live:
        reason = "health check expired: the worker stopped refreshing it"
    elif not up:
        reason = f"health check is {age:.0f}s old (stale after {stale_after_s:.0f}s)"
    else:
        reason = None
    return {
        "queue": short,
        "queue_name": full,
        "status": "up" if up else "down",
        "line": line,
        "age_s": None if age is None else round(age, 1),
        "reason": reason,
        **{name: counts.get(name) for name in _HEALTH_FIELDS.values()},
    }
