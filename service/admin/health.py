"""Worker health: each queue's arq health-check line, parsed, aged, remembered, and judged up or down."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from service.admin.keys import health_check_key

if TYPE_CHECKING:
    from service.admin.queues import QueueReader

_HEALTH_RE = re.compile(r"^(?P<when>\w{3}-\d{2} \d{2}:\d{2}:\d{2}) (?P<fields>.*)$")
_HEALTH_FIELDS = {"j_complete": "complete", "j_failed": "failed", "j_retried": "retried", "j_ongoing": "ongoing", "queued": "queued"}


async def worker_health(reader: QueueReader) -> list[dict[str, Any]]:
    """Each queue's worker health line, its age, and up or down (no line, or an old one)."""
    interval_s = reader.engine.settings.worker_health_check_s
    async with reader.redis.pipeline(transaction=False) as pipe:
        for full in reader.queues.values():
            pipe.get(health_check_key(full))
        pipe.hgetall(reader.keys.workers_seen)
        *lines, seen = await pipe.execute()
    now = time.time()
    workers, fresh = [], {}
    for (short, full), raw in zip(reader.queues.items(), lines, strict=True):
        line = raw.decode() if raw else None
        if line:
            fresh[full] = orjson.dumps({"line": line, "seen": now})
        else:
            remembered = seen.get(full.encode())
            line = orjson.loads(remembered)["line"] if remembered else None
        workers.append(_worker_state(short, full, line, live=raw is not None, now=now, stale_after_s=2 * interval_s + 1))
    if fresh:
        await reader.redis.hset(reader.keys.workers_seen, mapping=fresh)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    return workers


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
