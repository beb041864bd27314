"""Team tenant keys in storage: records still under the old key ``team:<team>``, counted at open, and
their re-keying to ``team:<org>/<team>`` (``agentsearch reindex --team-org TEAM=ORG``).

A team belongs to its org (``service.auth.team_tenant``). Records written before that rule are
keyed ``team:<team>``, and nothing stored says which org wrote them (no payload holds the writer's
org), so they cannot be attributed from the key alone. They fail closed: no caller's tenants
include an old-form key, so they are visible to nobody until the operator maps each team to its
org. Every open counts them (once the store holds none, a marker skips the count) and logs a
warning naming the teams; ``reindex`` lists the unmapped ones too.

Re-keying: a record's key holds its tenant right after a fixed prefix (catalog
``{tenant}|{kind}|{id}``, action instances ``instance:{tenant}:{name}``) and its point id derives
from the key, so each record is written again as a new point (payload and vectors copied, tenant
and key rewritten) and the old point deleted. A record already present under the new key (written
by the team after the upgrade) is newer and wins, as a re-PUT would; the old copy is dropped. A
pending record's embed job is queued again under its new key. The dashboard's last-warm times move
with their tenants.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

from service.auth import TEAM_PREFIX, is_legacy_team_tenant, team_tenant
from service.engine.records import PENDING
from service.engine.serving import read_marker, write_marker
from service.engine.store import Filter, MatchAny, PointRecord, StoreError, point_id

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

CHECK_MARKER = "team_tenants"
# Distinct tenants read per collection when counting old-form keys at open (one scroll finds several).
MAX_TENANTS = 5_000
PAGE = 256
QUEUED_TTL_S = 24 * 3600


@dataclass
class TeamMigrationReport:
    """What re-keying did: records moved per old key, old copies dropped for a newer one, old keys left unmapped."""

    migrated: int = 0
    superseded: int = 0
    by_team: dict[str, str] = field(default_factory=dict)
    """Old key -> new key, for the teams mapped."""
    unmapped: dict[str, int] = field(default_factory=dict)
    """Old key -> records still under it (no mapping given for its team)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_team_orgs(items: Iterable[str]) -> dict[str, str]:
    """``["eng=acme", "ops=acme"]`` -> ``{"eng": "acme", "ops": "acme"}``; ValueError saying what is wrong."""
    mapping: dict[str, str] = {}
    for item in items:
        team, equals, org = item.partition("=")
        team, org = team.strip(), org.strip()
        if not equals or not team or not org:
            raise ValueError(f"--team-org {item!r}: expected TEAM=ORG, e.g. --team-org eng=acme")
        if team in mapping and mapping[team] != org:
            raise ValueError(f"--team-org: team {team!r} is mapped to two orgs ({mapping[team]!r} and {org!r}); a team's old records go to one")
        mapping[team] = org
    return mapping


def tenant_collections(engine: Engine) -> list[str]:
    """Every collection whose records carry a tenant a team may hold: the surfaces' own, then the
    others they declare (``SurfaceDef.tenant_collections``: the action instances')."""
    return [*(index.collection for index in engine.surfaces.values()), *engine.other_tenant_collections]


def last_warm_key(prefix: str) -> str:
    """The hash of last-warm times, ``<surface>`` and ``<surface>|<tenant>`` -> ms (written by the
    workers' job recorder, shown by the admin dashboard); re-keying moves its tenants' fields."""
    return f"{prefix}:admin:last-warm"


def rekey(key: str, old_tenant: str, new_tenant: str) -> str | None:
    """``key`` with its tenant replaced; None when ``old_tenant`` is not where every key scheme puts it."""
    for prefix in ("", "instance:"):
        head = prefix + old_tenant
        if key.startswith(head) and key[len(head) : len(head) + 1] in ("|", ":"):
            return prefix + new_tenant + key[len(head) :]
    return None


# ---- counting old-form keys ---------------------------------------------------------------------


async def distinct_tenants(engine: Engine, collection: str, cap: int = MAX_TENANTS) -> tuple[list[str], bool]:
    """The tenants holding records in ``collection`` and whether that is all of them (False past ``cap``)."""
    found: list[str] = []
    while len(found) < cap:
        flt = Filter(must_not=(MatchAny("tenant", tuple(found)),)) if found else None
        page, _ = await engine.store.scroll(collection, flt, limit=64)
        tenants = [str(p.payload["tenant"]) for p in page if p.payload.get("tenant")]
        if not tenants:
            return found, True
        found.extend(dict.fromkeys(t for t in tenants if t not in found))
    return found, False


async def legacy_team_counts(engine: Engine) -> tuple[dict[str, int], bool]:
    """Records under each old-form team key, over every tenant collection; and whether every tenant was read."""
    counts: dict[str, int] = {}
    complete = True
    for collection in tenant_collections(engine):
        tenants, whole = await distinct_tenants(engine, collection)
        complete = complete and whole
        for tenant in tenants:
            if is_legacy_team_tenant(tenant):
                counts[tenant] = counts.get(tenant, 0) + await engine.store.count(collection, Filter(must=(MatchAny("tenant", (tenant,)),)))
    return counts, complete


async def report_legacy_team_records(engine: Engine) -> dict[str, int]:
    """At open: log how many records sit under old-form team keys (visible to nobody until migrated).

    Once a full check finds none, a marker in ``engine_meta`` makes later opens skip it.
    """
    try:
        if (await read_marker(engine.store, CHECK_MARKER) or {}).get("state") == "qualified":
            return {}
        counts, complete = await legacy_team_counts(engine)
        if counts:
            log.warning(
                "%d records under old team keys (team:<team>, no org) are visible to nobody until migrated: "
                "run `agentsearch reindex --team-org TEAM=ORG` for %s",
                sum(counts.values()),
                ", ".join(sorted(k[len(TEAM_PREFIX) :] for k in counts)[:20]),
                extra={"records": sum(counts.values()), "team_keys": sorted(counts)[:100]},
            )
        elif complete:
            await write_marker(engine.store, CHECK_MARKER, {"state": "qualified"})
        return counts
    except StoreError as exc:
        log.warning("old team keys not counted", extra={"error": str(exc)})
        return {}


# ---- re-keying ------------------------------------------------------------------------------------


def queued_key(prefix: str) -> str:
    """Where ``agentsearch reindex --team-org`` leaves its mapping for the reindex job of a running service."""
    return f"{prefix}:reindex:team-orgs"


async def queue_team_orgs(redis: Any, prefix: str, team_orgs: Mapping[str, str]) -> None:
    """Leave ``team_orgs`` for the next reindex job of the deployment (merged with any already left)."""
    raw = await redis.get(queued_key(prefix))
    merged = {**(orjson.loads(raw) if raw else {}), **team_orgs}
    await redis.set(queued_key(prefix), orjson.dumps(merged), ex=QUEUED_TTL_S)


async def take_queued_team_orgs(engine: Engine) -> dict[str, str]:
    """The mapping a ``reindex --team-org`` command left in Redis for this deployment ({} when none)."""
    try:
        raw = await engine.redis.get(queued_key(engine.settings.queue_prefix))
    except (RedisError, OSError) as exc:
        log.warning("queued team mapping not read", extra={"error": str(exc)})
        return {}
    loaded = orjson.loads(raw) if raw else {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


async def migrate_team_tenants(engine: Engine, team_orgs: Mapping[str, str]) -> TeamMigrationReport:
    """Re-key every record under ``team:<team>`` to ``team:<org>/<team>`` for each mapped team."""
    report = TeamMigrationReport(by_team={f"{TEAM_PREFIX}{team}": team_tenant(org, team) for team, org in team_orgs.items()})
    if report.by_team:
        for collection in tenant_collections(engine):
            await _rekey_collection(engine, collection, report)
        await engine.store.flush()
        await _move_last_warm(engine, report.by_team)
        log.info("team records re-keyed to their org", extra={"migrated": report.migrated, "superseded": report.superseded, "teams": sorted(report.by_team)})
    counts, complete = await legacy_team_counts(engine)
    report.unmapped = counts
    if not counts and complete:
        await write_marker(engine.store, CHECK_MARKER, {"state": "qualified"})
    with _suppress_redis("queued team mapping not cleared"):
        await engine.redis.delete(queued_key(engine.settings.queue_prefix))
    return report


async def _rekey_collection(engine: Engine, collection: str, report: TeamMigrationReport) -> None:
    indexes = {index.collection: index for index in engine.surfaces.values()}
    flt = Filter(must=(MatchAny("tenant", tuple(report.by_team)),))
    offset: str | None = None
    while True:
        page, offset = await engine.store.scroll(collection, flt, limit=PAGE, offset=offset, with_vectors=True)
        fresh, done, to_embed = await _rekeyed(engine, collection, page, report)
        if fresh:
            await engine.store.upsert(collection, fresh)
        if done:
            await engine.store.delete(collection, done)
        index = indexes.get(collection)
        if index is not None and to_embed:
            await index.enqueue_embedding(to_embed)
        if offset is None:
            return


async def _rekeyed(
    engine: Engine, collection: str, page: Sequence[PointRecord], report: TeamMigrationReport
) -> tuple[list[PointRecord], list[str], list[tuple[str, str]]]:
    """(new points to write, old point ids to delete, pending records to embed) for one page."""
    planned: list[tuple[PointRecord, str, PointRecord]] = []
    for point in page:
        old_tenant = str(point.payload.get("tenant"))
        new_tenant = report.by_team[old_tenant]
        new_key = rekey(str(point.payload.get("key", "")), old_tenant, new_tenant)
        if new_key is None:
            log.warning("team record left under its old key: its key does not start with its tenant", extra={"collection": collection, "point": point.id})
            continue
        payload = {**point.payload, "tenant": new_tenant, "key": new_key}
        planned.append((point, new_key, PointRecord(id=point_id(collection, new_key), payload=payload, vectors=point.vectors)))
    present = {p.id for p in await engine.store.retrieve(collection, [new.id for _, _, new in planned])} if planned else set()
    fresh: list[PointRecord] = []
    to_embed: list[tuple[str, str]] = []
    for _, new_key, new in planned:
        if new.id in present:
            report.superseded += 1  # written under the new key since the upgrade: the newer copy stays
            continue
        fresh.append(new)
        report.migrated += 1
        if new.payload.get("embed_state") == PENDING and new.payload.get("content_hash"):
            to_embed.append((new_key, str(new.payload["content_hash"])))
    return fresh, [old.id for old, _, _ in planned], to_embed


async def _move_last_warm(engine: Engine, by_team: Mapping[str, str]) -> None:
    """The dashboard's ``<surface>|<tenant>`` last-warm fields follow their tenant's new key."""
    key = last_warm_key(engine.settings.queue_prefix)
    with _suppress_redis("last-warm times not moved"):
        stored = await engine.redis.hgetall(key)  # type: ignore[misc]  # redis-py types hash commands as sync-or-async
        fields = {str(f, "utf-8") if isinstance(f, bytes) else str(f): v for f, v in stored.items()}
        for name, value in fields.items():
            surface, _, tenant = name.partition("|")
            if tenant in by_team:
                await engine.redis.hsetnx(key, f"{surface}|{by_team[tenant]}", value)  # type: ignore[misc]
                await engine.redis.hdel(key, name)  # type: ignore[misc]


class _suppress_redis:
    """Log and go on when Redis fails: the records moved; only bookkeeping is lost."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, RedisError | OSError):
            log.warning(self._what, extra={"error": str(exc)})
            return True
        return False


__all__ = [
    "TeamMigrationReport",
    "last_warm_key",
    "legacy_team_counts",
    "migrate_team_tenants",
    "parse_team_orgs",
    "queue_team_orgs",
    "rekey",
    "report_legacy_team_records",
    "take_queued_team_orgs",
]
