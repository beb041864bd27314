"""The ``agentsearch reindex`` command: rebuild every index from its records, switch the default model.

The work is ``service.engine.reindex.reindex``. The command runs it in its own process when it can
open the store (a Qdrant server, or an embedded data directory no service holds); when a service
holds the embedded data directory, it queues the ``reindex`` job for that service's in-process
worker, so searches go on during the fill, and follows its progress through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from arq.jobs import Job, JobStatus
from redis.exceptions import RedisError

from service.engine.deployment import resolve_deployment
from service.engine.queue import JobQueue, QueueNames, deserialize
from service.engine.reindex import reindex
from service.engine.reindex_progress import ReindexProgress, progress_key
from service.engine.runtime import create_redis_client
from service.engine.startup import open_engine
from service.engine.store import StoreLockedError
from service.engine.teams import parse_team_orgs, queue_team_orgs
from service.errors import EmbeddingUnavailable
from service.logs import configure_logging
from service.redact import mask_text, mask_url
from service.settings import Settings
from service.surfaces import surfaces


def run_reindex(settings: Settings, *, as_json: bool, wait: bool, team_orgs: Sequence[str] = ()) -> int:
    """Run the reindex here when this process can open the store; else hand it to the service holding it.

    ``team_orgs`` (``TEAM=ORG`` items) re-keys records under old team keys to their org's (``service.engine.teams``)."""
    configure_logging("WARNING" if settings.log_level.upper() == "INFO" else settings.log_level)
    try:
        mapping = parse_team_orgs(team_orgs)
    except ValueError as exc:
        print(f"agentsearch: {exc}", file=sys.stderr)
        return 2

    async def run() -> int:
        try:
            engine = await open_engine(settings, surfaces())
        except StoreLockedError as exc:
            print(f"agentsearch: {exc}; the running service does the reindex", file=sys.stderr)
            return await _reindex_in_service(settings, as_json=as_json, wait=wait, team_orgs=mapping)
        try:
            report = await reindex(engine, progress=_ReindexPrinter(), team_orgs=mapping)
        except EmbeddingUnavailable as exc:
            print(f"agentsearch: the embeddings model cannot embed: {exc}", file=sys.stderr)
            return 2
        finally:
            await engine.close()
        _print_reindex(report.as_dict(), as_json=as_json)
        return 0

    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run())
    return 130


async def _reindex_in_service(settings: Settings, *, as_json: bool, wait: bool, team_orgs: Mapping[str, str]) -> int:
    """Queue the ``reindex`` job for the service's in-process worker and follow its progress in Redis."""
    deployment = resolve_deployment(settings)  # the service's prefix and id: the same data directory
    prefix = deployment.prefix
    redis = create_redis_client(settings.redis_url)
    job_id = f"{prefix}:reindex:{uuid.uuid4().hex}"
    try:
        if team_orgs:
            await queue_team_orgs(redis, prefix, team_orgs)  # the job takes it from there
        job = await JobQueue(redis, QueueNames(prefix), deployment=deployment.id).enqueue("reindex", job_id=job_id, fast=True)
        if job is None:
            print(f"agentsearch: could not queue the reindex job in Redis at {mask_url(settings.redis_url)}", file=sys.stderr)
            return 2
        print(f"agentsearch: queued reindex job {job_id}", file=sys.stderr)
        if not wait:
            return 0
        printer = _ReindexPrinter()
        while True:
            await asyncio.sleep(0.5)
            raw = await redis.get(progress_key(prefix))
            body = orjson.loads(raw) if raw else {}
            if body.get("job_id") == job_id:
                if body.get("progress"):
                    printer(ReindexProgress(**body["progress"]))
                if body.get("state") == "done":
                    _print_reindex(body.get("report") or {}, as_json=as_json)
                    return 0
            job_state = Job(job_id, redis, _deserializer=deserialize)  # results are JSON (service.engine.queue)
            if await job_state.status() is JobStatus.complete:
                info = await job_state.result_info()
                if info is not None and not info.success:
                    print(f"agentsearch: the reindex job failed: {info.result}", file=sys.stderr)
                    return 1
                if info is not None and isinstance(info.result, dict):  # done, its last progress unseen
                    _print_reindex(info.result, as_json=as_json)
                    return 0
    except (RedisError, OSError) as exc:
        print(f"agentsearch: Redis at {mask_url(settings.redis_url)} is unreachable: {mask_text(str(exc))}", file=sys.stderr)
        return 2
    finally:
        await redis.aclose(close_connection_pool=True)


class _ReindexPrinter:
    """Progress lines on stderr: one per step and collection, and at most one a second in between."""

    def __init__(self) -> None:
        self._last: tuple[str, str] | None = None
        self._at = 0.0

    def __call__(self, update: ReindexProgress) -> None:
        where = (update.step, update.collection)
        if where == self._last and time.monotonic() - self._at < 1.0 and update.done != update.total:
            return
        self._last, self._at = where, time.monotonic()
        counts = f" {update.done}/{update.total}" if update.total else ""
        print(f"reindex: {update.step} {update.collection}{counts}".rstrip(), file=sys.stderr, flush=True)


def _print_reindex(report: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    switched = f"; switched to {report.get('target_model')}" if report.get("switched") else ""
    if report.get("retired"):
        switched += f"; dropped the old vector from {', '.join(sorted(report['retired']))}"
    print(
        f"reindexed {report.get('records', 0)} records ({report.get('repaired', 0)} repaired, {report.get('reanalyzed', 0)} reanalyzed, "
        f"{report.get('filled', 0)} filled, {report.get('reconciled', 0)} reconciled){switched}; "
        f"serving {report.get('serving_model') or 'no model (lexical)'}"
    )
    _print_teams(report.get("teams") or {})


def _print_teams(teams: dict[str, Any]) -> None:
    """What happened to old team keys, and which still wait for a ``--team-org``."""
    if teams.get("by_team"):
        print(
            f"re-keyed {teams.get('migrated', 0)} team records ({teams.get('superseded', 0)} old copies dropped for a newer one): "
            + ", ".join(f"{old} -> {new}" for old, new in sorted(teams["by_team"].items()))
        )
    unmapped = teams.get("unmapped") or {}
    if unmapped:
        named = ", ".join(f"{key} ({count})" for key, count in sorted(unmapped.items()))
        print(
            f"{sum(unmapped.values())} records under old team keys are visible to nobody: {named}; "
            "map each team to its org with --team-org TEAM=ORG"
        )
