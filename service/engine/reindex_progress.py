"""The progress of a reindex: where it stands, and its publication through Redis for ``agentsearch reindex``.

A reindex calls a ``ProgressListener`` with a ``ReindexProgress`` at each step and batch. The
``reindex`` job of a running service listens with a ``ProgressPublisher``, which writes the latest
progress (and, at the end, the report) to ``{prefix}:reindex:progress``; the command that queued the
job reads that key until the job is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReindexProgress:
    """Where a reindex stands: ``step`` (teams | records | fill | switch | reconcile | retire | done), per collection."""

    step: str
    collection: str = ""
    done: int = 0
    total: int = 0


ProgressListener = Callable[[ReindexProgress], None]


def progress_key(prefix: str) -> str:
    return f"{prefix}:reindex:progress"


class ProgressPublisher:
    """Publishes a running reindex's progress, at most once a second, for ``agentsearch reindex``."""

    def __init__(self, engine: Engine, job_id: str) -> None:
        self._engine = engine
        self._job_id = job_id
        self._last = 0.0
        self._pending: ReindexProgress | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, update: ReindexProgress) -> None:
        self._pending = update
        if time.monotonic() - self._last >= 1.0:
            self._last = time.monotonic()
            task = asyncio.get_running_loop().create_task(self._write(state="running"))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def publish(self, *, state: str, report: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        """Write the state, the latest progress and, when given, the reindex's report (``ReindexReport.as_dict``).

        The writes of earlier progress still in flight finish first, so none of them overwrites this one."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._write(state=state, report=report, error=error)

    async def _write(self, *, state: str, report: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        body: dict[str, Any] = {"job_id": self._job_id, "state": state, "at": time.time()}
        if self._pending is not None:
            body["progress"] = asdict(self._pending)
        if report is not None:
            body["report"] = dict(report)
        if error is not None:
            body["error"] = error
        try:
            await self._engine.redis.set(
                progress_key(self._engine.settings.queue_prefix), orjson.dumps(body), ex=24 * 3600
            )
        except (RedisError, OSError) as exc:
            log.warning("reindex progress not published", extra={"error": str(exc)})


__all__ = ["ProgressListener", "ProgressPublisher", "ReindexProgress", "progress_key"]
