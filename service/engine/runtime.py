"""The engine runtime: one object holding the store, embedders, job queue and Redis of a process.

Opened by the service's cleanup context, by ``agentsearch worker`` and by the one-shot CLI
commands; surfaces register their collections on it so the sweeper and status pages find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from service.auth import load_or_create_secret
from service.engine.deployment import Deployment, resolve_deployment
from service.engine.embeddings import EmbedderRegistry
from service.engine.queue import JobQueue, QueueNames, deserialize, is_node_local, serialize
from service.engine.records import RecordIndex
from service.engine.store import CollectionSpec, Store, StoreError, VectorSpec, open_store
from service.ratelimit import RateLimiter
from service.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Engine:
    """Everything a request handler or a job needs; built once per process."""

    settings: Settings
    store: Store
    embedders: EmbedderRegistry
    redis: ArqRedis
    queue: JobQueue
    jwt_secret: str
    rate_limiter: RateLimiter
    surfaces: dict[str, RecordIndex] = field(default_factory=dict)
    _vectors: set[tuple[str, str]] = field(default_factory=set)
    _serving_refresh: asyncio.Task[None] | None = None

    async def register(self, surface: str, spec: CollectionSpec, analyzed_fields: Sequence[str] = (), *, bulk: bool = False) -> RecordIndex:
        """Create the surface's collection if missing and remember it (sweeper, index status);
        ``bulk``: its records' embed jobs go to the bulk queue."""
        await self.store.ensure_collection(spec)
        default = self.embedders.default
        if default is not None and default.dimensions:
            # Create the default model's vector up front so dense search works before the first embed.
            await self.ensure_vector(spec.name, VectorSpec(default.vector_name, default.dimensions))
        index = RecordIndex(self, surface, spec, analyzed_fields, bulk=bulk)
        self.surfaces[surface] = index
        return index

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        """Add a named vector to a collection once per process (the store call takes its write lock)."""
        if (collection, vector.name) not in self._vectors:
            await self.store.ensure_vector(collection, vector)
            self._vectors.add((collection, vector.name))

    async def drop_vector(self, collection: str, name: str) -> None:
        """Drop a named vector from a collection (a retired model's); adding it again works."""
        await self.store.drop_vector(collection, name)
        self._vectors.discard((collection, name))

    def forget_vector(self, collection: str, name: str) -> None:
        """Another process may have dropped the vector: the next ``ensure_vector`` asks the store."""
        self._vectors.discard((collection, name))

    def records(self, surface: str) -> RecordIndex:
        return self.surfaces[surface]

    def follow_serving_model(self) -> None:
        """Re-read the serving model marker every few seconds: a reindex elsewhere may switch it."""
        from service.engine.migrate import SERVING_REFRESH_S, refresh_serving

        async def follow() -> None:
            while True:
                await asyncio.sleep(SERVING_REFRESH_S)
                try:
                    await refresh_serving(self)
                except StoreError as exc:
                    log.warning("could not read the serving model marker", extra={"error": str(exc)})

        self._serving_refresh = asyncio.create_task(follow())

    async def close(self) -> None:
        if self._serving_refresh is not None:
            self._serving_refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving_refresh
        await self.embedders.close()
        await self.store.close()
        await self.redis.aclose(close_connection_pool=True)


def create_redis_client(url: str) -> ArqRedis:
    """An ArqRedis that connects lazily: the service starts (and answers searches) with Redis down."""
    pool = ConnectionPool.from_url(url, socket_connect_timeout=2, socket_timeout=5, retry_on_timeout=False)
    return ArqRedis(connection_pool=pool, job_serializer=serialize, job_deserializer=deserialize)


async def open_engine(settings: Settings, *, store: Store | None = None) -> Engine:
    """Open the store (taking the data-directory lock for the embedded default) and the rest.

    The engine's settings carry the deployment's resolved ``queue_prefix`` (``resolve_deployment``)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    deployment = resolve_deployment(settings)
    settings = replace(settings, queue_prefix=deployment.prefix)
    secret = settings.jwt_secret or load_or_create_secret(settings.data_dir)
    if store is None:
        store = await open_store(
            settings.store_kind,
            data_dir=settings.data_dir / "index",
            qdrant_url=settings.qdrant_url,
            api_key=settings.qdrant_api_key,
            shard_number=settings.qdrant_shard_number,
            replication_factor=settings.qdrant_replication_factor,
            write_consistency_factor=settings.qdrant_write_consistency_factor,
            local_path=settings.qdrant_path,
        )
    redis = create_redis_client(settings.redis_url)
    engine = Engine(
        settings=settings,
        store=store,
        embedders=EmbedderRegistry(settings),
        redis=redis,
        queue=JobQueue(
            redis,
            QueueNames(settings.queue_prefix),
            deployment=deployment.id,
            workspace_nodes=settings.workspace_nodes,
            node_local_jobs=node_local_job_names(),
        ),
        jwt_secret=secret,
        rate_limiter=RateLimiter.from_settings(redis, settings),
    )
    from service.engine.migrate import load_serving
    from service.surfaces import register_surfaces

    try:
        await load_serving(engine)
        await register_surfaces(engine)
        from service.engine.teams import report_legacy_team_records

        await report_legacy_team_records(engine)  # old team keys are visible to nobody: say how many
    except BaseException:
        await engine.close()
        raise
    engine.follow_serving_model()
    _log_deployment(deployment)
    return engine


def _log_deployment(deployment: Deployment) -> None:
    """Say at start which prefix this process's queues and keys use, and where it came from: two
    deployments on one prefix would take each other's jobs."""
    log.info(
        "queue prefix %s (from %s), deployment %s",
        deployment.prefix,
        deployment.prefix_source,
        deployment.id,
        extra={"prefix": deployment.prefix, "prefix_source": deployment.prefix_source, "deployment": deployment.id},
    )


def node_local_job_names() -> frozenset[str]:
    """The surfaces' jobs that must run on the node holding their workspace."""
    from service.surfaces import surface_jobs

    return frozenset(name for name, (job, _) in surface_jobs().items() if is_node_local(job))
