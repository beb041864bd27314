"""The job queue: arq on Redis with JSON (never pickle), two queues, and enqueues that never fail a caller.

``embed`` carries batch embedding work; ``fast`` carries interactive work (workspace warm-ups,
the sweeper) so a large reindex never starves it. An enqueue while Redis is down is logged and
dropped: the record is already written, and the sweeper re-enqueues it later.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from arq.connections import ArqRedis
from arq.jobs import Job
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def _json_fallback(value: Any) -> Any:
    """Job results may hold an exception (a failed job) or a tuple: keep their text, never pickle."""
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def serialize(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj, default=_json_fallback)


def deserialize(data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(data)
    return result


@dataclass(frozen=True)
class QueueNames:
    """The arq queue names of one deployment (a prefix keeps test runs apart)."""

    prefix: str

    @property
    def embed(self) -> str:
        return f"{self.prefix}:queue:embed"

    @property
    def fast(self) -> str:
        return f"{self.prefix}:queue:fast"

    @property
    def all(self) -> tuple[str, str]:
        return (self.embed, self.fast)


def batch_job_id(prefix: str, surface: str, items: Sequence[tuple[str, str]]) -> str:
    """``{prefix}:embed:{surface}:{key}:{hash}`` for one record, or a digest of every (key, hash) for a batch.

    arq keeps job keys outside any queue (``arq:job:<id>``), so the deployment's prefix is part of the
    id: two deployments (or test runs) on one Redis never drop each other's jobs as duplicates.
    """
    if len(items) == 1:
        key, content_hash = items[0]
        return f"{prefix}:embed:{surface}:{key}:{content_hash}"
    digest = hashlib.sha256("\n".join(f"{k}\x00{h}" for k, h in sorted(items)).encode()).hexdigest()[:32]
    return f"{prefix}:embed:{surface}:batch:{digest}"


class JobQueue:
    """Enqueue helpers over one ArqRedis pool."""

    def __init__(self, redis: ArqRedis, names: QueueNames) -> None:
        self.redis = redis
        self.names = names

    async def enqueue(self, function: str, *args: Any, job_id: str | None = None, fast: bool = False, defer_s: float | None = None) -> Job | None:
        """Enqueue a job; None when Redis is unreachable or arq dropped a duplicate id."""
        queue = self.names.fast if fast else self.names.embed
        try:
            return await self.redis.enqueue_job(function, *args, _job_id=job_id, _queue_name=queue, _defer_by=defer_s)
        except (RedisError, OSError) as exc:
            log.warning("enqueue failed; the sweeper will repair it", extra={"function": function, "job_id": job_id, "error": str(exc)})
            return None

    async def enqueue_embed(self, surface: str, collection: str, items: Sequence[tuple[str, str]]) -> Job | None:
        """Queue embedding of ``items`` (record key, content hash) of ``collection``."""
        if not items:
            return None
        return await self.enqueue("embed_records", collection, [list(item) for item in items], job_id=batch_job_id(self.names.prefix, surface, items))
