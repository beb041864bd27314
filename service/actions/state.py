"""This process's copy of the action catalog: loaded from the store, kept fresh, compiled for ranking.

The store is the truth: each template has a meta point (display name, auth, revision; written
last, it marks a complete write) and an action-columns point it is loaded from;
each process keeps the tokenized templates in memory because keyword scoring reads every
visible action on every query. Freshness across front ends: a template write increments a
revision counter in Redis; a process compares it at most every ``CHECK_INTERVAL_S`` and reloads
only the templates whose stored revision differs from its own. Without Redis a process keeps
serving what it has (and what it wrote itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from service.actions.index import (
    EMBED_TEXT_LAYOUT,
    ActionColumns,
    ActionIndex,
    TemplateBlock,
    Vocabulary,
    template_revision,
)
from service.actions.model import (
    META_COLLECTION,
    SURFACE_NAME,
    TEMPLATE_ACTIONS_KIND,
    TEMPLATE_KIND,
    AuthType,
    TemplateAuth,
    TemplateDef,
    template_actions_key,
    template_meta_key,
)
from service.auth import GLOBAL_TENANT
from service.engine.records import Collection
from service.engine.store import Filter, Match, PointRecord, point_id

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 2.0
_SCROLL_PAGE = 256
_TEMPLATES_PER_READ = 64
# Tokenizing is pure Python: give the event loop a turn after this many actions.
_YIELD_EVERY_ACTIONS = 5_000


class ActionCatalog:
    """The tokenized templates of one engine, and their compiled ``ActionIndex``."""

    def __init__(self, engine: Engine, meta: Collection) -> None:
        self._engine = weakref.ref(engine)
        self.meta = meta
        """The templates' and instances' collection (``META_COLLECTION``)."""
        self.vocab = Vocabulary()
        self.blocks: dict[str, TemplateBlock] = {}
        self.lock = asyncio.Lock()
        """Held by loads, refreshes and template writes, so a write diffs against a settled catalog."""
        self._index: ActionIndex | None = None
        self._loaded = False
        self._seen_revision: int | None = None
        self._checked_at = float("-inf")

    @property
    def engine(self) -> Engine:
        engine = self._engine()
        if engine is None:
            raise RuntimeError("the engine of this action catalog was closed")
        return engine

    @property
    def revision_key(self) -> str:
        return f"{self.engine.settings.queue_prefix}:actions:catalog-revision"

    async def current(self) -> ActionIndex:
        """The compiled index, after loading (first call) and a throttled freshness check."""
        due = time.monotonic() - self._checked_at >= CHECK_INTERVAL_S
        # A write in progress holds the lock for seconds: keep answering from the current copy meanwhile.
        if not self._loaded or (due and not self.lock.locked()):
            async with self.lock:
                await self.sync()
        if self._index is None:
            self._index = ActionIndex(self.blocks.values(), self.vocab)
        return self._index

    async def sync(self, *, force: bool = False) -> None:
        """Load everything once; then reload templates other processes changed. Hold ``lock``."""
        if not self._loaded:
            revision = await self._read_revision()
            await self._load(None)
            self._seen_revision, self._loaded = revision, True
            self._checked_at = time.monotonic()
            return
        if not force and time.monotonic() - self._checked_at < CHECK_INTERVAL_S:
            return
        self._checked_at = time.monotonic()
        revision = await self._read_revision()
        if revision is not None and revision != self._seen_revision:
            await self._refresh()
            self._seen_revision = revision

    def apply(self, templates: Iterable[TemplateDef]) -> None:
        """Take written templates into this process's copy at once."""
        for template in templates:
            self.blocks[template.key] = TemplateBlock.build(template, template_revision(template), self.vocab)
        self._index = None

    def remove(self, key: str) -> None:
        if self.blocks.pop(key, None) is not None:
            self._index = None

    async def announce(self) -> None:
        """Tell other processes the catalog changed (best effort: they also re-check on their own writes)."""
        try:
            revision = int(await self.engine.redis.incr(self.revision_key))
        except (RedisError, OSError) as exc:
            log.warning("catalog revision not announced", extra={"error": str(exc)})
            return
        if self._seen_revision is not None and revision == self._seen_revision + 1:
            self._seen_revision = revision  # nobody else wrote in between: nothing to reload

    async def _read_revision(self) -> int | None:
        try:
            value = await self.engine.redis.get(self.revision_key)
        except (RedisError, OSError):
            return None
        return int(value) if value else 0

    async def _refresh(self) -> None:
        metas = await self._template_metas()
        changed = [key for key, meta in metas.items() if key not in self.blocks or self.blocks[key].revision != meta.get("revision")]
        for key in set(self.blocks) - set(metas):
            self.remove(key)
        if changed:
            await self._load(changed, metas)
            log.info("action catalog refreshed", extra={"templates": len(changed)})

    async def _load(self, keys: Sequence[str] | None, metas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Build blocks of ``keys`` (every template when None) from their stored meta and action columns."""
        started = time.perf_counter()
        metas = metas if metas is not None else await self._template_metas()
        wanted = sorted(metas) if keys is None else sorted(set(keys) & set(metas))
        columns = await (self._all_columns() if keys is None else self._columns_of(wanted))
        built = 0
        for key in wanted:
            stored = columns.get(key)
            if stored is None or stored.get("revision") != metas[key].get("revision"):
                log.warning("action template has no stored actions of its revision; skipped", extra={"template": key})
                continue
            action_columns = ActionColumns.from_payload(stored["actions"])
            template = _template_from_meta(key, metas[key])
            # Records written before layouts were recorded have the first one.
            layout = int(metas[key].get("embed_layout") or 1)
            self.blocks[key] = TemplateBlock.build(template, str(metas[key]["revision"]), self.vocab, action_columns, embed_layout=layout)
            built += len(action_columns)
            if built >= _YIELD_EVERY_ACTIONS:
                built = 0
                await asyncio.sleep(0)
        self._index = None
        if keys is None:
            log.info(
                "action catalog loaded",
                extra={"templates": len(self.blocks), "seconds": round(time.perf_counter() - started, 2)},
            )

    async def _template_metas(self) -> dict[str, Mapping[str, Any]]:
        kind = Filter(must=(Match("kind", TEMPLATE_KIND),))
        return {str(p["template"]): p async for p in self._scroll(kind)}

    async def _all_columns(self) -> dict[str, Mapping[str, Any]]:
        kind = Filter(must=(Match("kind", TEMPLATE_ACTIONS_KIND),))
        return {str(p["template"]): p async for p in self._scroll(kind)}

    async def _columns_of(self, keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        found: dict[str, Mapping[str, Any]] = {}
        for start in range(0, len(keys), _TEMPLATES_PER_READ):
            ids = [point_id(META_COLLECTION, template_actions_key(k)) for k in keys[start : start + _TEMPLATES_PER_READ]]
            for point in await self.meta.retrieve(ids):
                found[str(point.payload["template"])] = point.payload
        return found

    async def _scroll(self, filter: Filter) -> Any:
        async for point in self.meta.scroll_all(filter, page=_SCROLL_PAGE):
            yield point.payload


def _template_from_meta(key: str, meta: Mapping[str, Any]) -> TemplateDef:
    auth_type = AuthType(meta.get("auth_type", AuthType.API_KEY.value))
    return TemplateDef(
        key=key,
        display_name=str(meta.get("display_name") or key),
        description=str(meta.get("description") or ""),
        categories=tuple(meta.get("categories") or ()),
        auth=TemplateAuth(auth_type, meta.get("provider") if auth_type is AuthType.OAUTH else None),
    )


def template_points(template: TemplateDef) -> list[PointRecord]:
    """The two meta points of a template: its action columns, then its meta (written last, it marks the write complete).

    The columns point is what a process loads the catalog from (2,628 points rather than 124,730
    action records); the small meta point carries the revision that processes compare.
    """
    revision = template_revision(template)
    columns_key, meta_key = template_actions_key(template.key), template_meta_key(template.key)
    columns = {
        "tenant": GLOBAL_TENANT,
        "kind": TEMPLATE_ACTIONS_KIND,
        "key": columns_key,
        "template": template.key,
        "revision": revision,
        "actions": ActionColumns.of(template.actions).to_payload(),
    }
    meta = {"tenant": GLOBAL_TENANT, "kind": TEMPLATE_KIND, "key": meta_key, **_meta_payload(template, revision)}
    return [PointRecord(id=point_id(META_COLLECTION, columns_key), payload=columns), PointRecord(id=point_id(META_COLLECTION, meta_key), payload=meta)]


def _meta_payload(template: TemplateDef, revision: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "template": template.key,
        "display_name": template.display_name,
        "description": template.description,
        "categories": list(template.categories),
        "auth_type": template.auth.type.value,
        "revision": revision,
        "embed_layout": EMBED_TEXT_LAYOUT,
        "action_count": len(template.actions),
    }
    if template.auth.provider:
        payload["provider"] = template.auth.provider
    return payload


# One catalog per open engine. Engine is an unhashable dataclass, so key by id and check identity;
# the catalog holds the engine weakly and the entry goes when the engine is collected.
def catalog_for(engine: Engine) -> ActionCatalog:
    """The action catalog the surface opened on ``engine``."""
    catalog: ActionCatalog = engine.state_of(SURFACE_NAME)
    return catalog
