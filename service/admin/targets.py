"""What a job works on: its surface, tenants and target (package, MCP server, workspace, action template).

A job carries only ids (a collection and record keys, or a workspace id), so the dashboard looks
the records up: one store ``retrieve`` per collection for a page of jobs, of the first
``KEYS_LOOKED_UP`` keys of each job. Descriptions are cached per job id (a job's arguments never
change); a record deleted since leaves its job without tenant or target.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from service.admin.jobrecord import JobRow, JobTarget
from service.engine.store import StoreError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

EMBED_JOB = "embed_records"
WORKSPACE_JOBS = frozenset({"warm_workspace", "index_workspace", "embed_chunks"})
SWEEP_JOBS = frozenset({"sweep", "sweep_cron"})
KEYS_LOOKED_UP = 32
CACHE_SIZE = 4096
# Payload fields that name what a record belongs to, most specific first, with their label.
_TARGET_FIELDS = (
    ("workspace", "workspace"),
    ("template", "action template"),
    ("server", "MCP server"),
    ("package_id", "package"),
)


def surface_of_collection(engine: Engine, collection: Any) -> str | None:
    for surface, index in engine.surfaces.items():
        if index.collection == collection:
            return surface
    return None


def embed_keys(row: JobRow) -> list[str]:
    """The record keys of an ``embed_records`` job (``collection, [[key, hash], ...]``)."""
    if row.function != EMBED_JOB or len(row.args) < 2 or not isinstance(row.args[1], list):
        return []
    return [str(item[0]) for item in row.args[1] if isinstance(item, list) and item]


def target_of_payload(payload: Mapping[str, Any]) -> str:
    for name, label in _TARGET_FIELDS:
        if payload.get(name):
            return f"{label} {payload[name]}"
    if payload.get("entity"):
        return str(payload["entity"])
    return f"{payload.get('kind', 'record')} {payload.get('key', '?')}"


class JobDescriber:
    """Describes jobs for the table; one per app (its cache lives as long as the app)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._cache: OrderedDict[str, JobTarget] = OrderedDict()

    def cheap_surface(self, row: JobRow) -> str | None:
        """The surface, from the arguments alone (no store read): enough for the surface filter."""
        if row.function == EMBED_JOB and row.args:
            return surface_of_collection(self.engine, row.args[0])
        if row.function in WORKSPACE_JOBS:
            return "code" if "code" in self.engine.surfaces else None
        return None

    async def describe(self, rows: Sequence[JobRow]) -> list[JobRow]:
        """``rows`` with their targets filled in."""
        missing = [row for row in rows if row.id not in self._cache]
        if missing:
            for job_id, target in (await self._describe_uncached(missing)).items():
                self._remember(job_id, target)
        return [row.with_target(self._cache.get(row.id, JobTarget())) for row in rows]

    async def tenants_of_embed_job(self, collection: str, keys: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
        """(surface, every tenant) of an embed job's records: the worker records its last-warm times by these."""
        surface = surface_of_collection(self.engine, collection)
        if surface is None:
            return None, ()
        payloads = await self._payloads(surface, keys)
        return surface, tuple(sorted({str(p["tenant"]) for p in payloads.values() if p.get("tenant")}))

    def _remember(self, job_id: str, target: JobTarget) -> None:
        self._cache[job_id] = target
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)

    async def _describe_uncached(self, rows: Sequence[JobRow]) -> dict[str, JobTarget]:
        targets: dict[str, JobTarget] = {}
        wanted: dict[str, set[str]] = defaultdict(set)
        for row in rows:
            surface = self.cheap_surface(row)
            if row.function == EMBED_JOB and surface is not None:
                wanted[surface].update(embed_keys(row)[:KEYS_LOOKED_UP])
        payloads = {surface: await self._payloads(surface, sorted(keys)) for surface, keys in wanted.items()}
        for row in rows:
            targets[row.id] = self._target(row, payloads)
        return targets

    def _target(self, row: JobRow, payloads: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> JobTarget:
        surface = self.cheap_surface(row)
        if row.function == EMBED_JOB and surface is not None:
            keys = embed_keys(row)
            found = [payloads.get(surface, {}).get(key) for key in keys[:KEYS_LOOKED_UP]]
            known = [p for p in found if p is not None]
            tenants = tuple(sorted({str(p["tenant"]) for p in known if p.get("tenant")}))
            first = target_of_payload(known[0]) if known else (keys[0] if keys else None)
            more = f" (+{len(keys) - 1} more)" if len(keys) > 1 else ""
            return JobTarget(surface=surface, tenants=tenants, target=f"{first}{more}" if first else None)
        if row.function in WORKSPACE_JOBS and row.args:
            workspace_id = str(row.args[0])
            tenant = workspace_tenant(self.engine, workspace_id)
            return JobTarget(surface=surface, tenants=(tenant,) if tenant else (), target=f"workspace {workspace_id}")
        if row.function in SWEEP_JOBS:
            return JobTarget(target="every surface's stale records")
        return JobTarget()

    async def _payloads(self, surface: str, keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        if not keys:
            return {}
        try:
            return await self.engine.records(surface).get_many(list(keys))
        except (StoreError, KeyError) as exc:
            log.warning("job targets unavailable", extra={"surface": surface, "error": str(exc)})
            return {}


def workspace_tenant(engine: Engine, workspace_id: str) -> str | None:
    """The owner of a registered workspace (read from the code surface's registry); None if unknown."""
    if "code" not in engine.surfaces:
        return None
    try:
        from service.code.workspace import WorkspaceRegistry
    except ImportError:  # a deployment without the code surface
        return None
    workspace = WorkspaceRegistry(engine.settings.data_dir).get(workspace_id)
    return workspace.tenant if workspace is not None else None
