"""The job queue: arq on Redis with JSON (never pickle), its queues, and enqueues that never fail a caller.

``embed`` carries the embedding of interactive writes (catalog entities, actions); ``bulk`` carries
bulk embedding (workspace code chunks: warming, prewarm), so a write's embedding never waits behind
hundreds of code-warming batches; ``fast`` carries interactive work (workspace warm-ups, the
sweeper) so a large reindex never starves it. With ``workspace_nodes`` set, jobs marked
``node_local`` (their first argument is a workspace id) go instead to ``node:<name>``, the queue
of the node that holds the workspace's files (``service.routing.node_for_workspace``). An
enqueue while Redis is down is logged and dropped: the record is already written, and the
sweeper re-enqueues it later. Every job carries its deployment's id (``DEPLOYMENT_KWARG``), so a
worker of another deployment that finds it on its queue refuses it (``workers.settings``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from arq.connections import ArqRedis
from arq.constants import result_key_prefix
from arq.jobs import Job
from redis.exceptions import RedisError

from service.routing import node_for_workspace

log = logging.getLogger(__name__)

# The keyword argument every enqueued job carries: the id of the deployment that enqueued it.
DEPLOYMENT_KWARG = "deployment"


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
    """The arq queue names of one deployment (a prefix keeps deployments and test runs apart)."""

    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ValueError("a queue prefix is required: resolve it with service.engine.deployment.resolve_deployment")

    @property
    def embed(self) -> str:
        return f"{self.prefix}:queue:embed"

    @property
    def fast(self) -> str:
        return f"{self.prefix}:queue:fast"

    @property
    def bulk(self) -> str:
        return f"{self.prefix}:queue:bulk"

    @property
    def all(self) -> tuple[str, str, str]:
        return (self.embed, self.bulk, self.fast)

    def node(self, name: str) -> str:
        """The queue of workspace jobs for the workspaces held by node ``name``."""
        return f"{self.prefix}:queue:node:{name}"


_NODE_LOCAL = "__agentsearch_node_local__"


def node_local(job: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an arq job whose first argument is a workspace id: it must run on the node holding that workspace."""
    setattr(job, _NODE_LOCAL, True)
    return job


def is_node_local(job: Callable[..., Any]) -> bool:
    return bool(getattr(job, _NODE_LOCAL, False))


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


def deployment_key_patterns(prefix: str) -> tuple[str, str]:
    """SCAN patterns of every Redis key a deployment owns: its own keys, and arq's keys of its job
    ids (``arq:job:<id>``, ``arq:result:<id>``, ...; every job id starts with the prefix)."""
    return (f"{prefix}*", f"arq:*:{prefix}*")


async def forget_deployment(redis: Any, prefix: str) -> int:
    """Delete every Redis key of the deployment ``prefix`` (a test run or a benchmark cleaning up);
    returns how many. Never used on a live deployment's prefix."""
    deleted = 0
    for pattern in deployment_key_patterns(prefix):
        async for key in redis.scan_iter(match=pattern, count=1000):
            deleted += await redis.delete(key)
    return deleted


class JobQueue:
    """Enqueue helpers over one ArqRedis pool; every job carries ``deployment`` (the enqueuer's id)."""

    def __init__(
        self,
        redis: ArqRedis,
        names: QueueNames,
        *,
        deployment: str,
        workspace_nodes: Sequence[str] = (),
        node_local_jobs: frozenset[str] = frozenset(),
    ) -> None:
        self.redis = redis
        self.names = names
        self.deployment = deployment
        self.workspace_nodes = tuple(workspace_nodes)
        self.node_local_jobs = node_local_jobs

    def queue_of(self, function: str, args: Sequence[Any], *, fast: bool, bulk: bool = False) -> str:
        """The queue a job goes to: its workspace's node queue for a node-local job on several nodes."""
        if self.workspace_nodes and function in self.node_local_jobs and args:
            return self.names.node(node_for_workspace(str(args[0]), self.workspace_nodes))
        if fast:
            return self.names.fast
        return self.names.bulk if bulk else self.names.embed

    async def enqueue(
        self, function: str, *args: Any, job_id: str | None = None, fast: bool = False, bulk: bool = False, defer_s: float | None = None
    ) -> Job | None:
        """Enqueue a job (``bulk``: on the bulk queue); None when Redis is unreachable or arq dropped a duplicate id."""
        queue = self.queue_of(function, args, fast=fast, bulk=bulk)
        tag: dict[str, Any] = {DEPLOYMENT_KWARG: self.deployment}
        try:
            return await self.redis.enqueue_job(function, *args, _job_id=job_id, _queue_name=queue, _defer_by=defer_s, **tag)
        except (RedisError, OSError) as exc:
            log.warning("enqueue failed; the sweeper will repair it", extra={"function": function, "job_id": job_id, "error": str(exc)})
            return None

    async def enqueue_embed(
        self, surface: str, collection: str, items: Sequence[tuple[str, str]], *, bulk: bool = False, job: str = "embed_records", owner: str | None = None
    ) -> Job | None:
        """Queue embedding of ``items`` (record key, content hash) of ``collection`` (``bulk``: on the
        bulk queue). ``owner``: the records' texts live with this workspace; ``job`` is the node-local
        job that embeds them there, taking (owner, collection, items)."""
        if not items:
            return None
        job_id = batch_job_id(self.names.prefix, surface, items)
        # A finished job of the same id embedded this very text before (text A, then B, then A
        # again): arq would drop the enqueue while it keeps that result, and the record would stay
        # pending. The old result is stale history; a queued or running job of the id still dedupes.
        try:
            await self.redis.delete(result_key_prefix + job_id)
        except (RedisError, OSError) as exc:
            log.warning("enqueue failed; the sweeper will repair it", extra={"function": "embed_records", "job_id": job_id, "error": str(exc)})
            return None
        rows = [list(item) for item in items]
        if owner is not None:
            return await self.enqueue(job, owner, collection, rows, job_id=job_id, bulk=bulk)
        return await self.enqueue(job, collection, rows, job_id=job_id, bulk=bulk)
