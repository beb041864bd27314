"""Catalog ingest: who may write which entity as whose, the write of their records, child diffs, and deletes.

``records`` says which records an entity becomes. Children (exports, tools) that disappeared from a
re-ingest are deleted; children whose text is unchanged keep their vectors (``RecordIndex`` diffs
content hashes), so re-ingesting a server with one edited tool re-embeds that tool alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.keys import GLOBAL_KINDS, Kind, record_key
from service.catalog.markdown import DEFAULT_BUDGET_CHARS, own_sections
from service.catalog.model import Capability, Domain, Entity, Guide, McpServer, Package, entity_type_of
from service.catalog.records import entity_label, records_for
from service.catalog.render import guide_section_header
from service.engine.records import RecordIndex
from service.engine.store import Filter, Match
from service.errors import Forbidden, NotFound, ValidationError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestSummary:
    entity: str
    records: int
    to_embed: int
    removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "records": self.records, "toEmbed": self.to_embed, "removed": self.removed}


# ---- owners ----------------------------------------------------------------------------------------


def resolve_owner(caller: Caller, owner: str | None) -> str:
    """The tenant that owns user-scoped entities of this request: the caller, its org or one of its teams.

    ``team:<name>`` names the caller's team ``<name>`` of the caller's org; the stored tenant is
    ``team:<org>/<name>`` (``Caller.team_owner_tenant``: admins may name ``team:<org>/<name>``).
    """
    if owner in (None, "", "user"):
        return caller.user_tenant
    assert owner is not None
    if owner == "org":
        if not caller.org:
            raise ValidationError("owner 'org' needs a token with an org claim")
        return f"org:{caller.org}"
    kind, _, name = owner.partition(":")
    if kind not in ("user", "org", "team") or not name:
        raise ValidationError("owner must be 'user', 'org', 'team:<name>' (or, for admins, 'user:<sub>' / 'org:<org>' / 'team:<org>/<name>')")
    if kind == "team":
        tenant = caller.team_owner_tenant(name)
    else:
        tenant = owner if owner in caller.tenants or caller.admin else None
    if tenant is None:
        yours = ["user"] + (["org"] if caller.org else []) + [f"team:{team}" for team in caller.teams]
        raise Forbidden(f"owner {owner!r} is not one of your tenants ({', '.join(yours)})")
    return tenant


def tenant_for(entity: Entity, owner_tenant: str) -> str:
    return GLOBAL_TENANT if isinstance(entity, Capability | Domain | Guide) else owner_tenant


def refuse_repeated_entities(entities: Sequence[Entity], owner_tenant: str) -> None:
    """400 when one ``(type, id)`` of one owner appears twice in a batch, naming its positions:
    each copy's stale-child cleanup would delete the other's exports and tools after a 200."""
    positions: dict[tuple[str, str], list[int]] = {}
    for i, entity in enumerate(entities):
        positions.setdefault((tenant_for(entity, owner_tenant), entity_label(entity)), []).append(i)
    repeated = [(label, where) for (_, label), where in positions.items() if len(where) > 1]
    if repeated:
        named = "; ".join(
            f"{label} at entities[{where[0]}] and entities[{where[1]}]" + (f" (and {len(where) - 2} more)" if len(where) > 2 else "")
            for label, where in repeated[:5]
        )
        raise ValidationError(f"entities must be unique per owner in one request; repeated: {named}")


def lint_guide(guide: Guide, path: str) -> None:
    """The ``no-oversized-guide-section`` lint: each heading's own text fits the entity budget
    left after the header it is answered under, so opening any heading answers with its text,
    never a bare contents list. ``path`` names the field in the error."""
    for heading, size in own_sections(guide.markdown):
        room = DEFAULT_BUDGET_CHARS - len(guide_section_header(guide.id, guide.title, guide.summary, heading.slug))
        if size > room:
            raise ValidationError(
                f"{path}: section #{heading.slug} (line {heading.line}) has {size:,} characters of its own, "
                f"over the {room:,} that fit the {DEFAULT_BUDGET_CHARS:,}-character entity budget after its header "
                "(no-oversized-guide-section); split it under subheadings"
            )


def require_rights(caller: Caller, entities: Iterable[Entity]) -> None:
    globals_ = sorted({entity_type_of(e) for e in entities if isinstance(e, Capability | Domain | Guide)})
    if globals_ and not caller.admin:
        raise Forbidden(f"{', '.join(globals_)} entities are global built-ins and need an admin token (claim admin: true)")


# ---- writes and deletes ----------------------------------------------------------------------------------


def _children_filter(tenant: str, kind: Kind, field: str, value: str) -> Filter:
    return Filter(must=(Match("tenant", tenant), Match("kind", kind.value), Match(field, value)))


async def _child_keys(index: RecordIndex, flt: Filter) -> set[str]:
    return {str(point.payload["key"]) async for point in index.scroll_all(flt, page=512)}


async def write_entities(index: RecordIndex, entities: Sequence[Entity], owner_tenant: str) -> list[IngestSummary]:
    """Write every entity's records in one batched write, then delete children (exports, tools) that are gone."""
    planned = [(entity, tenant_for(entity, owner_tenant)) for entity in entities]
    records = [(entity, tenant, records_for(entity, tenant)) for entity, tenant in planned]
    flat = [record for _, _, group in records for record in group]
    unembedded: set[str] = set()  # a record keeps its vector only if that vector was computed from this text
    await index.write(flat, unembedded=unembedded)
    summaries = []
    for entity, tenant, group in records:
        to_embed = sum(1 for r in group if r.key in unembedded)
        removed = await _drop_stale_children(index, entity, tenant, {r.key for r in group})
        summaries.append(IngestSummary(entity_label(entity), len(group), to_embed, removed))
    log.info("catalog entities written", extra={"tenant": owner_tenant, "entities": len(summaries), "to_embed": sum(s.to_embed for s in summaries)})
    return summaries


async def _drop_stale_children(index: RecordIndex, entity: Entity, tenant: str, fresh: set[str]) -> int:
    if isinstance(entity, Package):
        flt = _children_filter(tenant, Kind.EXPORT, "package_id", entity.id)
    elif isinstance(entity, McpServer):
        flt = _children_filter(tenant, Kind.MCP_TOOL, "server", entity.id)
    else:
        return 0
    stale = sorted(await _child_keys(index, flt) - fresh)
    if stale:
        await index.delete(stale)
    return len(stale)


# Delete target per `type` of `DELETE /v1/catalog/entities/{type}:{id}`.
_DELETE_KINDS: dict[str, Kind] = {
    "capability": Kind.CAPABILITY,
    "domain": Kind.DOMAIN,
    "guide": Kind.GUIDE,
    "package": Kind.PACKAGE,
    "integration": Kind.INTEGRATION,
    "mcp-server": Kind.MCP_SERVER,
    "secret": Kind.SECRET,
    "memory": Kind.MEMORY,
    "waiting": Kind.WAITING,
}


async def delete_entity(index: RecordIndex, caller: Caller, entity_type: str, entity_id: str, owner_tenant: str) -> int:
    """Delete one entity (and its children) of ``owner_tenant``; 404 when that owner has none."""
    kind = _DELETE_KINDS.get(entity_type)
    if kind is None:
        raise ValidationError(f"unknown entity type {entity_type!r}; use one of {', '.join(_DELETE_KINDS)}")
    if not entity_id:
        raise ValidationError(f"empty id after '{entity_type}:'")
    if kind in GLOBAL_KINDS:
        caller.require_admin()
        tenant = GLOBAL_TENANT
    else:
        tenant = owner_tenant
    if kind is Kind.MCP_SERVER and entity_id.startswith("mcp:"):
        entity_id = entity_id[4:]
    if kind is Kind.SECRET and ":" in entity_id:
        kind = Kind.PACKAGE_SECRET  # secret:{packageId}:{id} addresses a package-scoped reference
    key = record_key(tenant, kind, entity_id)
    if await index.get(key) is None:
        raise NotFound(f"no {entity_type}:{entity_id} in your catalog (owner {tenant})" if tenant != GLOBAL_TENANT else f"no built-in {entity_type}:{entity_id}")
    keys = [key]
    if kind is Kind.PACKAGE:
        keys.append(record_key(tenant, Kind.PACKAGE_FILES, entity_id))
        keys.extend(await _child_keys(index, _children_filter(tenant, Kind.EXPORT, "package_id", entity_id)))
    elif kind is Kind.MCP_SERVER:
        keys.extend(await _child_keys(index, _children_filter(tenant, Kind.MCP_TOOL, "server", entity_id)))
    await index.delete(keys)
    return len(keys)
