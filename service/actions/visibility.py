"""Who sees what: the instances a caller reaches, and the rows (units) a search may return.

A caller reaches global instances, its org's, its teams' and its own, nothing else: instances are
read with a tenant filter on the caller's tenant keys, so another tenant's instance never enters
a search, a count or a message. When two reachable instances share a name, the most specific
tier wins (user over team over org over global), so ``service`` always names one instance.
``exclude`` drops units by instance name or template key (case-insensitive) before any scoring.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.actions.index import ActionIndex, TemplateBlock
from service.actions.model import (
    INSTANCE_KIND,
    AuthType,
    InstanceAuth,
    InstanceDef,
    SearchRequest,
    Tier,
)
from service.actions.state import ActionCatalog, catalog_for
from service.auth import Caller
from service.engine.store import Filter, Match, MatchAny

if TYPE_CHECKING:
    from service.engine.runtime import Engine

_PAGE = 1024


@dataclass(frozen=True)
class Unit:
    """One source of result rows: a reachable instance, or a template nobody configured (a catalog row)."""

    template_idx: int
    block: TemplateBlock
    instance: InstanceDef | None = None

    @property
    def setup_required(self) -> bool:
        return self.instance is None

    @property
    def connected(self) -> bool:
        return self.instance is not None and self.instance.connected

    @property
    def sort_name(self) -> str:
        return self.instance.name if self.instance is not None else self.block.key


# How long a caller's visible instances are kept (seconds), and for how many callers. A write in this
# process forgets them at once; one in another front end shows here within the TTL.
VISIBLE_TTL_S = 2.0
VISIBLE_CACHED_MAX = 1024


class VisibleInstances:
    """The instances each caller reached lately, keyed by the caller's tenant keys (user, org, teams),
    in a bounded LRU whose entries live ``VISIBLE_TTL_S``. ``forget`` drops every entry and bumps the
    generation, so a read that was already running when an instance was written is not kept."""

    def __init__(self, maxsize: int = VISIBLE_CACHED_MAX, ttl_s: float = VISIBLE_TTL_S) -> None:
        self.maxsize, self.ttl_s = maxsize, ttl_s
        self.generation = 0
        self._entries: OrderedDict[tuple[str, ...], tuple[float, tuple[InstanceDef, ...]]] = OrderedDict()

    def get(self, tenants: tuple[str, ...]) -> list[InstanceDef] | None:
        entry = self._entries.get(tenants)
        if entry is None:
            return None
        if time.monotonic() >= entry[0]:
            del self._entries[tenants]
            return None
        self._entries.move_to_end(tenants)
        return list(entry[1])

    def put(self, tenants: tuple[str, ...], generation: int, instances: Sequence[InstanceDef]) -> None:
        """Keep what a read found, unless an instance was written since it started (``generation``)."""
        if generation != self.generation:
            return
        self._entries[tenants] = (time.monotonic() + self.ttl_s, tuple(instances))
        self._entries.move_to_end(tenants)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def forget(self) -> None:
        self.generation += 1
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# One cache per action catalog (one per open engine); the entry goes with the catalog.
_VISIBLE: weakref.WeakKeyDictionary[ActionCatalog, VisibleInstances] = weakref.WeakKeyDictionary()


def visible_cache(engine: Engine) -> VisibleInstances:
    catalog = catalog_for(engine)
    cache = _VISIBLE.get(catalog)
    if cache is None:
        cache = _VISIBLE[catalog] = VisibleInstances()
    return cache


def forget_visible_instances(engine: Engine) -> None:
    """An instance was written or deleted: every caller's visible instances are read afresh."""
    visible_cache(engine).forget()


async def visible_instances(engine: Engine, caller: Caller) -> list[InstanceDef]:
    """Every instance the caller reaches, one per name (the most specific tier wins); kept briefly
    per caller (``VisibleInstances``)."""
    cache = visible_cache(engine)
    tenants = caller.tenants
    found = cache.get(tenants)
    if found is not None:
        return found
    generation = cache.generation
    instances = await _read_visible(engine, tenants)
    cache.put(tenants, generation, instances)
    return instances


async def _read_visible(engine: Engine, tenants: tuple[str, ...]) -> list[InstanceDef]:
    flt = Filter(must=(Match("kind", INSTANCE_KIND), MatchAny("tenant", tenants)))
    by_name: dict[str, InstanceDef] = {}
    async for point in catalog_for(engine).meta.scroll_all(flt, page=_PAGE):
        instance = instance_from_payload(point.payload)
        held = by_name.get(instance.name)
        if held is None or instance.tier.specificity > held.tier.specificity:
            by_name[instance.name] = instance
    return sorted(by_name.values(), key=lambda i: i.name)


def instance_from_payload(payload: Mapping[str, Any]) -> InstanceDef:
    return InstanceDef(
        name=str(payload["name"]),
        template=str(payload["template"]),
        tier=Tier(payload["tier"]),
        owner=payload.get("owner"),
        org=payload.get("org"),
        auth=InstanceAuth(AuthType(payload["auth_type"]), provider=payload.get("provider"), secret_name=payload.get("secret_name")),
        account_email=payload.get("account_email"),
        connected=bool(payload.get("connected", True)),
    )


def select_units(index: ActionIndex, instances: Sequence[InstanceDef], request: SearchRequest) -> list[Unit]:
    """Instances (and, with ``include_catalog``, unconfigured templates) left after ``exclude``.

    Instance units come first, then catalog units in browse order. A template counts as configured
    when the caller reaches any instance of it, excluded or not: excluding ``gmail_work`` must not
    bring Gmail back as a setup row.
    """
    excluded = {entry.lower() for entry in request.exclude}
    units: list[Unit] = []
    skip: set[int] = set()
    for instance in instances:
        position = index.template_pos.get(instance.template)
        if position is None:
            continue  # its template left the catalog: nothing to call
        skip.add(position)
        if instance.name.lower() in excluded or instance.template.lower() in excluded:
            continue
        units.append(Unit(position, index.blocks[position], instance))
    if request.include_catalog:
        catalog = _catalog(index)
        for entry in excluded:
            skip.update(catalog.positions_by_lower_key.get(entry, ()))
        units.extend(u for u in catalog.units if u.template_idx not in skip)
    return units


@dataclass(frozen=True)
class _CatalogUnits:
    units: tuple[Unit, ...]
    """One setup row per template, in browse order (display name, then key)."""
    positions_by_lower_key: dict[str, tuple[int, ...]]


# Built once per compiled index: include_catalog reads all 2,628 templates on every query.
_CATALOGS: weakref.WeakKeyDictionary[ActionIndex, _CatalogUnits] = weakref.WeakKeyDictionary()


def _catalog(index: ActionIndex) -> _CatalogUnits:
    catalog = _CATALOGS.get(index)
    if catalog is None:
        units = sorted((Unit(position, block) for position, block in enumerate(index.blocks)), key=lambda u: (u.block.display_name.lower(), u.block.key))
        by_key: dict[str, tuple[int, ...]] = {}
        for position, block in enumerate(index.blocks):
            by_key[block.key.lower()] = (*by_key.get(block.key.lower(), ()), position)
        catalog = _CATALOGS[index] = _CatalogUnits(units=tuple(units), positions_by_lower_key=by_key)
    return catalog


def browse_order(units: Sequence[Unit]) -> list[Unit]:
    """Connected instances first, then the others, each alphabetical by display name; then catalog rows.

    Catalog units arrive from ``select_units`` already in that order, so only instances are sorted.
    """
    instances = sorted((u for u in units if u.instance is not None), key=lambda u: (not u.connected, u.block.display_name.lower(), u.sort_name))
    return instances + [u for u in units if u.instance is None]
