"""The arq jobs: thin wrappers that call the engine and turn transient failures into retries."""

from __future__ import annotations

import logging
import time
from typing import Any

from arq import Retry

from service.engine.refresh import embed_job, sweep
from service.engine.reindex import ReindexNotFinished, reindex
from service.engine.reindex_progress import ProgressPublisher
from service.engine.runtime import Engine
from service.engine.store import StoreError
from service.engine.surface import JobDef
from service.errors import EmbeddingUnavailable

log = logging.getLogger(__name__)

REINDEX_JOB = "reindex"
# A reindex slice stops this long before arq's timeout, so its last batch is written and kept.
REINDEX_MARGIN_S = 15.0


def _engine(ctx: dict[str, Any]) -> Engine:
    engine: Engine = ctx["engine"]
    return engine


def _backoff_s(ctx: dict[str, Any]) -> int:
    return min(5 * 2 ** (int(ctx.get("job_try", 1)) - 1), 120)


async def embed_records_job(ctx: dict[str, Any], collection: str, items: list[list[str]]) -> dict[str, int]:
    """Embed the records (key, content hash) of ``collection`` whose hash is still current. With
    embeddings off they stay pending (lexical search serves them) until a model is configured and
    `agentsearch reindex` or the sweeper queues them again."""
    return await embed_job(_engine(ctx), collection, items, int(ctx.get("job_try", 1)))


async def sweep_job(ctx: dict[str, Any]) -> dict[str, int]:
    """Re-enqueue every record whose embedding is missing or stale."""
    return await sweep(_engine(ctx))


async def reindex_job(ctx: dict[str, Any]) -> dict[str, Any]:
    """``agentsearch reindex`` handed to a running service: rebuild, fill and switch, a slice per try."""
    engine = _engine(ctx)
    progress = ProgressPublisher(engine, str(ctx.get("job_id", "")))
    deadline = time.monotonic() + max(engine.settings.job_timeout_s - REINDEX_MARGIN_S, 5.0)
    try:
        report = await reindex(engine, progress=progress, deadline=deadline)
    except ReindexNotFinished as exc:
        await progress.publish(state="running")
        log.info("reindex continues in the next try", extra={"reason": str(exc)})
        raise Retry(defer=1) from exc
    except (EmbeddingUnavailable, StoreError) as exc:
        await progress.publish(state="retrying", error=str(exc))
        raise Retry(defer=_backoff_s(ctx)) from exc
    await progress.publish(state="done", report=report.as_dict())
    return report.as_dict()


def registered_job_names() -> frozenset[str]:
    """Every job name a worker of this deployment runs, the cron sweeper's included."""
    return frozenset({*job_table(), "sweep_cron"})


def job_table() -> dict[str, JobDef]:
    """Every job by name. Surfaces contribute theirs."""
    from service.surfaces import surface_jobs

    table: dict[str, JobDef] = {
        "embed_records": JobDef(embed_records_job, fast=False),
        "sweep": JobDef(sweep_job, fast=True),
        REINDEX_JOB: JobDef(reindex_job, fast=True),
    }
    table.update(surface_jobs())
    return table
