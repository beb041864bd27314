"""The page's tally: every count the dashboard shows, read from Redis once per page, and the job ids behind them.

The header's counts (Busy, Enqueued, Retries, Scheduled, Dead, and the Processed/Failed totals),
the queue and kind tables, the processes table and each tab's rows all come from one
:class:`Tally`, so a page never disagrees with itself. Sidekiq's words, arq's states:

- **Busy**: jobs a worker runs now (``arq:in-progress:<id>`` of a queued id);
- **Enqueued**: jobs due and waiting that never ran (the Queues tab);
- **Retries**: jobs waiting to run again after a try (arq keeps ``arq:retry:<id>`` once a job
  started: a ``Retry``, a cancellation by a shutdown);
- **Scheduled**: jobs deferred to a later time that never ran;
- **Dead**: failed jobs whose result arq still keeps and that nobody retried yet;
- **Processed** and **Failed**: totals the workers count as jobs end (the stats hash).

A queue is classified job by job (one ``MULTI`` per 1000 ids: the retry key, the in-progress key
and the first bytes of the job, which name its kind) up to ``SCAN_LIMIT`` jobs; past it, the
counts of that queue's remainder come from ``ZCOUNT`` and the tally says it is not ``exact``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from service.admin.jobrecord import FUNCTION_PEEK_BYTES, JobRow, function_of_peek
from service.admin.keys import in_progress_key, job_key, result_key, retry_key
from service.admin.processes import Process, read_processes
from service.admin.queues import Overview, QueueCounts, QueueReader, add_done_counts, now_ms

# Jobs per queue (and dead jobs) classified one by one; past it the tally is not exact.
SCAN_LIMIT = 20_000
CHUNK = 1000
# Reads finished jobs by id: (rows, ids whose result expired).
FinishedReader = Callable[[Sequence[str]], Awaitable[tuple[list[JobRow], list[str]]]]


class Tab(StrEnum):
    """The dashboard's tabs that list jobs, in the header's order."""

    BUSY = "busy"
    QUEUES = "queues"
    RETRIES = "retries"
    SCHEDULED = "scheduled"
    DEAD = "dead"

    @property
    def label(self) -> str:
        """The tab's name in the header (the Queues tab counts the enqueued jobs)."""
        return self.value.capitalize()


@dataclass(frozen=True)
class Entry:
    """A job id of a tab: its queue's short name (None for a dead job) and its score (due or finish ms)."""

    id: str
    queue: str | None
    score: float


@dataclass
class Tally:
    """Every count of one page, and the ids of each tab (its first ``SCAN_LIMIT`` per queue)."""

    at_ms: int
    overview: Overview
    entries: dict[Tab, list[Entry]]
    beyond: dict[Tab, int]
    processed: int
    failed: int
    processes: list[Process] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not any(self.beyond.values())

    def count(self, tab: Tab) -> int:
        return len(self.entries[tab]) + self.beyond[tab]

    def counts(self) -> dict[str, int]:
        """The header bar: each tab's count, then the workers' totals."""
        return {**{tab.value: self.count(tab) for tab in Tab}, "processed": self.processed, "failed": self.failed}

    @property
    def running(self) -> dict[str, str]:
        return {e.id: e.queue for e in self.entries[Tab.BUSY] if e.queue is not None}

    @property
    def unreported(self) -> int:
        """Running jobs no heartbeat names yet (started since their process's last heartbeat)."""
        return self.count(Tab.BUSY) - sum(len(p.running) for p in self.processes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms,
            "counts": self.counts(),
            "exact": self.exact,
            "processes": [p.as_dict(self.at_ms) for p in self.processes],
            "unreported_running": self.unreported,
        }


async def tally(reader: QueueReader, *, interval_s: float) -> Tally:
    """Read every count of the page from Redis: the queues job by job, the dead jobs, the workers' counters and heartbeats."""
    now = now_ms()
    entries: dict[Tab, list[Entry]] = {tab: [] for tab in Tab}
    beyond = dict.fromkeys(Tab, 0)
    queues: dict[str, QueueCounts] = {}
    kinds: dict[str, QueueCounts] = {}
    for short, full in reader.queues.items():
        queues[short] = await _classify_queue(reader, short, full, now, entries, beyond, kinds)
    stats = await reader.redis.hgetall(reader.keys.stats)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    add_done_counts(stats, reader.short, queues, kinds)
    await _dead(reader, entries, beyond)
    busy = {e.id for e in entries[Tab.BUSY]}
    processes = await read_processes(reader.redis, reader.keys, reader.short, busy, now_ms=now, interval_s=interval_s)
    for tab in (Tab.QUEUES, Tab.RETRIES, Tab.SCHEDULED):
        entries[tab].sort(key=lambda e: e.score)  # next due first, as the workers take them
    overview = Overview(queues=queues, kinds=dict(sorted(kinds.items())), kinds_exact=not any(beyond.values()), at_ms=now)
    return Tally(
        at_ms=now,
        overview=overview,
        entries=entries,
        beyond=beyond,
        processed=sum(c.complete for c in queues.values()),
        failed=sum(c.failed for c in queues.values()),
        processes=processes,
    )


async def _classify_queue(
    reader: QueueReader, short: str, full: str, now: int, entries: dict[Tab, list[Entry]], beyond: dict[Tab, int], kinds: dict[str, QueueCounts]
) -> QueueCounts:
    """Sort one queue's first ``SCAN_LIMIT`` jobs into the tabs (and kinds); count the rest by score."""
    redis = reader.redis
    members = await redis.zrange(full, 0, SCAN_LIMIT - 1, withscores=True)
    counts = QueueCounts()
    for start in range(0, len(members), CHUNK):
        chunk = members[start : start + CHUNK]
        # One MULTI per chunk: a job's retry key, in-progress key and head are read together.
        async with redis.pipeline(transaction=True) as pipe:
            for member, _ in chunk:
                job_id = member.decode()
                pipe.exists(retry_key(job_id))
                pipe.exists(in_progress_key(job_id))
                pipe.getrange(job_key(job_id), 0, FUNCTION_PEEK_BYTES - 1)
            replies = await pipe.execute()
        for i, (member, score) in enumerate(chunk):
            tried, running, head = replies[3 * i : 3 * i + 3]
            if not head and not running:
                continue  # finished between the two reads
            if running:
                tab, state = Tab.BUSY, "in_progress"
            elif tried:
                tab, state = Tab.RETRIES, "retrying"
            elif score > now:
                tab, state = Tab.SCHEDULED, "deferred"
            else:
                tab, state = Tab.QUEUES, "queued"
            entries[tab].append(Entry(member.decode(), short, score))
            setattr(counts, state, getattr(counts, state) + 1)
            kind = kinds.setdefault(function_of_peek(head) or "<unknown>", QueueCounts())
            setattr(kind, state, getattr(kind, state) + 1)
    if len(members) == SCAN_LIMIT:
        await _count_rest(reader, short, full, now, members[-1][1], counts, entries, beyond)
    return counts


async def _count_rest(reader: QueueReader, short: str, full: str, now: int, last: float, counts: QueueCounts, entries: dict[Tab, list[Entry]], beyond: dict[Tab, int]) -> None:
    """The jobs of a long queue past the classified ones: due ones as enqueued (or busy), later ones as scheduled."""
    seen = {e.id for tab in Tab for e in entries[tab] if e.queue == short}
    running = {job_id for job_id, queue in (await reader.running()).items() if queue == short and job_id not in seen}
    for job_id in running:
        score = await reader.redis.zscore(full, job_id)
        if score is not None:
            entries[Tab.BUSY].append(Entry(job_id, short, score))
            counts.in_progress += 1
    rest = await reader.redis.zcard(full) - SCAN_LIMIT - len(running)
    later = await reader.redis.zcount(full, f"({max(now, last)}", "+inf")
    due = max(0, rest - later)
    counts.queued += due
    counts.deferred += later
    beyond[Tab.QUEUES] += due
    beyond[Tab.SCHEDULED] += later


async def _dead(reader: QueueReader, entries: dict[Tab, list[Entry]], beyond: dict[Tab, int]) -> None:
    """Failed jobs whose result is kept and that were not retried, latest first; expired ids are dropped."""
    redis, done = reader.redis, reader.keys.done("failed")
    members = await redis.zrevrange(done, 0, SCAN_LIMIT - 1, withscores=True)
    expired: list[bytes] = []
    for start in range(0, len(members), CHUNK):
        chunk = members[start : start + CHUNK]
        async with redis.pipeline(transaction=False) as pipe:
            for member, _ in chunk:
                pipe.exists(result_key(member.decode()))
                pipe.exists(reader.keys.retried_as(member.decode()))
            replies = await pipe.execute()
        for i, (member, score) in enumerate(chunk):
            kept, retried = replies[2 * i : 2 * i + 2]
            if not kept:
                expired.append(member)
            elif not retried:
                entries[Tab.DEAD].append(Entry(member.decode(), None, score))
    if expired:
        await redis.zrem(done, *expired)
    if len(members) == SCAN_LIMIT:
        beyond[Tab.DEAD] = max(0, await redis.zcard(done) - SCAN_LIMIT)


async def tab_rows(reader: QueueReader, finished: FinishedReader, the_tally: Tally, tab: Tab, *, offset: int, limit: int) -> list[JobRow]:
    """The rows of one tab's page, in the tab's order; jobs that ended meanwhile are left out.

    ``finished`` reads finished jobs by id (``JobTable.hydrate_finished``)."""
    window = the_tally.entries[tab][offset : offset + limit]
    if tab is Tab.DEAD:
        rows, _ = await finished([e.id for e in window])
    else:
        found: dict[str, JobRow] = {}
        running = the_tally.running
        for short in {e.queue for e in window if e.queue is not None}:
            ids = [(e.id.encode(), e.score) for e in window if e.queue == short]
            found.update((row.id, row) for row in await reader.hydrate_active(short, ids, the_tally.at_ms, running))
        rows = [found[e.id] for e in window if e.id in found]
    described: list[JobRow] = await reader.describer.describe(rows)
    return described
