"""The worker processes as their heartbeats describe them: host, pid, uptime, memory RSS and the jobs they run.

Each worker writes a heartbeat with its arq health check (``RecordingWorker.record_health``): one
hash field per process and queue (``AdminKeys.processes``) with the ids of the jobs it runs. The
dashboard groups the fields by process and counts as running only the ids that are running now
(the page's one tally), so the processes table never disagrees with the Busy count; jobs started
since a process's last heartbeat show as "not reported yet". A heartbeat older than
``GONE_AFTER_BEATS`` health-check intervals is a process that stopped: it is dropped.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.admin.keys import AdminKeys

log = logging.getLogger(__name__)

GONE_AFTER_BEATS = 3


def _process_started_ms() -> int:
    """When this process started (Linux ``/proc``); the time this module loaded elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        boot_s = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return int((boot_s + ticks / os.sysconf("SC_CLK_TCK")) * 1000)
    except (OSError, ValueError, IndexError, StopIteration):
        return int(time.time() * 1000)


STARTED_MS = _process_started_ms()


def rss_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc/self/statm``); None where it cannot be read."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


async def beat(redis: Redis, keys: AdminKeys, queue: str, running: Iterable[str], slots: int) -> None:
    """Record this process's heartbeat for one queue's worker; a Redis error is logged, never raised."""
    host, pid = socket.gethostname(), os.getpid()
    record = {
        "host": host,
        "pid": pid,
        "queue": queue,
        "started_ms": STARTED_MS,
        "seen_ms": int(time.time() * 1000),
        "rss_bytes": rss_bytes(),
        "running": sorted(running),
        "slots": slots,
    }
    try:
        await redis.hset(keys.processes, f"{host}|{pid}|{queue}", orjson.dumps(record).decode())  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    except (RedisError, OSError) as exc:
        log.warning("worker heartbeat not recorded", extra={"queue": queue, "error": str(exc)})


@dataclass(frozen=True)
class Process:
    """One worker process: its queues (short names), slots and the jobs of the page's Busy list it runs."""

    host: str
    pid: int
    queues: tuple[str, ...]
    started_ms: int
    seen_ms: int
    rss_bytes: int | None
    running: tuple[str, ...]
    slots: int

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "started_ms": self.started_ms,
            "uptime_s": max(0, (now_ms - self.started_ms) // 1000),
            "seen_ms": self.seen_ms,
            "rss_bytes": self.rss_bytes,
            "running": len(self.running),
            "running_ids": list(self.running),
            "slots": self.slots,
        }


async def read_processes(redis: Redis, keys: AdminKeys, short: dict[str, str], busy: set[str], *, now_ms: int, interval_s: float) -> list[Process]:
    """The processes whose heartbeat is recent, by host and pid; ``busy`` (the running job ids) bounds
    what each counts as running. Heartbeats of this deployment's queues only (``short``: full -> short)."""
    raw: dict[bytes, bytes] = await redis.hgetall(keys.processes)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    gone_before = now_ms - int(GONE_AFTER_BEATS * interval_s * 1000) - 1000
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    stale: list[str] = []
    for field, value in raw.items():
        try:
            record = orjson.loads(value)
        except orjson.JSONDecodeError:
            stale.append(field.decode())
            continue
        if record.get("seen_ms", 0) < gone_before:
            stale.append(field.decode())
        elif record.get("queue") in short:
            grouped.setdefault((str(record["host"]), int(record["pid"])), []).append(record)
    if stale:
        await redis.hdel(keys.processes, *stale)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    processes = [
        Process(
            host=host,
            pid=pid,
            queues=tuple(sorted(short[r["queue"]] for r in records)),
            started_ms=min(int(r["started_ms"]) for r in records),
            seen_ms=max(int(r["seen_ms"]) for r in records),
            rss_bytes=max((int(r["rss_bytes"]) for r in records if r.get("rss_bytes") is not None), default=None),
            running=tuple(sorted(job_id for r in records for job_id in r.get("running", ()) if job_id in busy)),
            slots=sum(int(r.get("slots", 0)) for r in records),
        )
        for (host, pid), records in grouped.items()
    ]
    return sorted(processes, key=lambda p: (p.host, p.pid))
