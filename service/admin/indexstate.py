"""Index state per surface and tenant: records, embedded, pending, last warm, store backend and model,
the workspaces that cannot be searched (root gone, cache broken), those open on this node and those
being warmed (share embedded, measured rate, expected finish: ``service/code/warming.py``).

The store has no group-by, so the tenants of a collection are found by exclusion: scroll one
point whose tenant is none of those found so far, until none is left (one cheap call per tenant
on the tenant-indexed field), capped at ``MAX_TENANTS``. Each tenant's numbers are two exact
counts. ``pending`` is every record whose content hash differs from its embedded hash, i.e. not
``done``: waiting for an embed job, or (code) cold until a workspace is warmed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.admin.keys import AdminKeys
from service.engine.records import DONE
from service.engine.store import Filter, Match, MatchAny

if TYPE_CHECKING:
    from service.engine.runtime import Engine

MAX_TENANTS = 100


async def distinct_tenants(engine: Engine, collection: str, limit: int = MAX_TENANTS) -> tuple[list[str], bool]:
    """The tenants holding records in ``collection`` (sorted) and whether that is all of them."""
    found: list[str] = []
    while len(found) < limit:
        others = Filter(must_not=(MatchAny("tenant", tuple(found)),)) if found else Filter()
        page, _ = await engine.store.scroll(collection, others, limit=1)
        if not page or not page[0].payload.get("tenant"):
            return sorted(found), True
        found.append(str(page[0].payload["tenant"]))
    return sorted(found), False


async def _counts(engine: Engine, collection: str, base: Filter) -> dict[str, int]:
    records = await engine.store.count(collection, base)
    embedded = await engine.store.count(collection, base.and_(Match("embed_state", DONE)))
    return {"records": records, "embedded": embedded, "pending": records - embedded}


async def index_state(engine: Engine) -> dict[str, Any]:
    """Every surface's totals and per-tenant rows, with the store backend and the default model."""
    raw_warm = await engine.redis.hgetall(AdminKeys(engine.settings.queue_prefix).last_warm)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
    last_warm = {name.decode(): int(value) for name, value in raw_warm.items()}
    default = engine.embedders.default
    model = default.model if default is not None else None
    surfaces = []
    for surface, index in sorted(engine.surfaces.items()):
        tenants, complete = await distinct_tenants(engine, index.collection)
        rows = []
        for tenant in tenants:
            counts = await _counts(engine, index.collection, Filter(must=(Match("tenant", tenant),)))
            rows.append({"tenant": tenant, **counts, "last_warm_ms": last_warm.get(f"{surface}|{tenant}")})
        surfaces.append(
            {
                "surface": surface,
                "collection": index.collection,
                **(await _counts(engine, index.collection, Filter())),
                "last_warm_ms": last_warm.get(surface),
                "tenants": rows,
                "tenants_complete": complete,
            }
        )
    return {
        "store": engine.store.backend,
        "model": model,
        "surfaces": surfaces,
        "workspaces": unusable_workspaces(engine),
        "open_workspaces": open_workspaces(engine),
        "warming_workspaces": await warming_workspaces(engine),
    }


def open_workspaces(engine: Engine) -> list[dict[str, Any]]:
    """This node's workspaces open now (chunk cache, trigram index, watch), with when each was last
    used, when it closes if unused, and how edits reach its index (``watch`` or ``revalidate``)."""
    from service.code.state import workspaces_of

    workspaces = workspaces_of(engine)
    rows = []
    for workspace in workspaces.registry.all():
        resident = workspaces.resident(workspace)
        if not resident["open"]:
            continue
        freshness, reason = workspaces.freshness(workspace)
        last_used = resident["last_used"]
        rows.append(
            {
                "id": workspace.id,
                "tenant": workspace.tenant,
                "root": str(workspace.root),
                "last_used_ms": int(last_used * 1000) if last_used is not None else None,
                "closes_after_s": resident["closes_after_s"],
                "freshness": freshness,
                "freshness_reason": reason,
            }
        )
    return rows


async def warming_workspaces(engine: Engine) -> list[dict[str, Any]]:
    """This node's workspaces being warmed, each with its ``warming_progress`` (as its status shows it):
    embedded of total, share, rate, seconds left, expected finish and the note on going faster."""
    from service.code.state import workspaces_of
    from service.code.warming import warming_progress_of

    workspaces = workspaces_of(engine)
    rows = []
    for workspace in workspaces.registry.all():
        if not workspace.warm or workspaces.problem(workspace) is not None:
            continue
        progress = await warming_progress_of(workspaces, workspace, await workspaces.counts(workspace))
        if progress is not None:
            rows.append({"id": workspace.id, "tenant": workspace.tenant, "root": str(workspace.root), **progress})
    return rows


def unusable_workspaces(engine: Engine) -> list[dict[str, Any]]:
    """This node's workspaces that cannot be searched: a root that is gone (``missing``) or a cache
    that failed to open (``broken``), each with what its owner should do."""
    from service.code.state import workspaces_of

    workspaces = workspaces_of(engine)
    rows = []
    for workspace in workspaces.registry.all():
        problem = workspaces.problem(workspace)
        if problem is not None:
            state, message = problem
            rows.append({"id": workspace.id, "tenant": workspace.tenant, "root": str(workspace.root), "state": state, "problem": message})
    return rows
