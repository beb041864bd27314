"""Opening the engine of a process: its deployment, store, Redis and queue, then the surfaces handed in.

The caller (the app, the command line, the workers' process, a test) hands in the surfaces as
``SurfaceDef``s (``service.surfaces.surfaces()``); the engine registers each one's collection and
runs its start-up hook without importing any surface.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from service.auth import load_or_create_secret
from service.engine.deployment import Deployment, resolve_deployment
from service.engine.embeddings import EmbedderRegistry
from service.engine.queue import JobQueue, QueueNames, is_node_local
from service.engine.runtime import Engine, create_redis_client
from service.engine.serving import load_serving
from service.engine.store import Store, open_store
from service.engine.surface import SurfaceDef, surface_jobs
from service.engine.teams import report_legacy_team_records
from service.ratelimit import RateLimiter
from service.settings import Settings

log = logging.getLogger(__name__)


async def open_engine(settings: Settings, surfaces: Sequence[SurfaceDef], *, store: Store | None = None) -> Engine:
    """Open the store (taking the data-directory lock for the embedded default) and the rest, then
    register ``surfaces``.

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
            node_local_jobs=node_local_job_names(surfaces),
        ),
        jwt_secret=secret,
        rate_limiter=RateLimiter.from_settings(redis, settings),
    )
    try:
        await load_serving(engine.store, engine.embedders)
        await register_surfaces(engine, surfaces)
        await report_legacy_team_records(engine)  # old team keys are visible to nobody: say how many
    except BaseException:
        await engine.close()
        raise
    engine.follow_serving_model()
    _log_deployment(deployment)
    return engine


async def register_surfaces(engine: Engine, surfaces: Sequence[SurfaceDef]) -> None:
    """Create (or open) every surface's collection on ``engine`` and run its start-up hook."""
    for surface in surfaces:
        await engine.register(surface.name, surface.spec, surface.analyzed_fields, bulk=surface.bulk_embedding, texts=surface.record_texts)
        engine.other_tenant_collections.extend(surface.tenant_collections)
        if surface.search is not None:
            engine.searches[surface.name] = surface.search
        if surface.on_open is not None:
            await surface.on_open(engine)
        if surface.on_close is not None:
            engine.closers.append(surface.on_close)


def node_local_job_names(surfaces: Sequence[SurfaceDef]) -> frozenset[str]:
    """The surfaces' jobs that must run on the node holding their workspace."""
    return frozenset(name for name, job in surface_jobs(surfaces).items() if is_node_local(job.function))


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
