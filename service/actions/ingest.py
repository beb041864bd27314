"""Writing the action catalog (templates and their actions) and callers' instances into the store.

Templates: each action is a record of the ``actions`` collection (key ``template#action``, tenant
``global``), written through ``RecordIndex`` so it is searchable at once and embedded in the
background. A template write diffs against the catalog as stored: only new or changed actions are
written (and only those whose embed text changed are re-embedded), actions gone from the template
are deleted, and the template's meta point is written last, marking the template complete. An
action's text holds its service's display name, description and categories, so a change to those,
or a new ``EMBED_TEXT_LAYOUT``, rewrites all of the template's actions (re-embedding, again, only
the texts that changed).

Instances: one meta point each, under the owner's tenant (``global``, ``org:<id>``,
``team:<org>/<team>``, ``user:<sub>``), keyed by tenant and name, so a re-PUT replaces it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from service.actions.index import action_terms, embed_text, service_context_of, template_revision
from service.actions.model import (
    ACTION_KIND,
    INSTANCE_KIND,
    META_COLLECTION,
    SURFACE_NAME,
    ActionDef,
    InstanceDef,
    TemplateDef,
    action_key,
    instance_meta_key,
    template_actions_key,
    template_meta_key,
)
from service.actions.state import catalog_for, template_points
from service.actions.visibility import forget_visible_instances
from service.auth import GLOBAL_TENANT
from service.engine.records import IndexRecord
from service.engine.store import Filter, Match, PointRecord, point_id
from service.errors import ValidationError

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TemplateWriteResult:
    templates: int
    actions: int
    written: int
    """New or changed actions written (the rest were already stored as given)."""
    removed: int
    to_embed: int
    """Written actions whose embed text is new: only these are re-embedded."""
    enqueued: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def action_record(template: TemplateDef, action: ActionDef) -> IndexRecord:
    payload: dict[str, Any] = {
        "template": template.key,
        "action": action.name,
        "description": action.description,
        "risk": action.risk.value,
        "display_name": template.display_name,
    }
    if action.method:
        payload["method"] = action.method
    if action.path:
        payload["path"] = action.path
    return IndexRecord(
        key=action_key(template.key, action.name),
        tenant=GLOBAL_TENANT,
        kind=ACTION_KIND,
        embed_text=embed_text(action, template),
        terms=action_terms(template, action),
        payload=payload,
    )


async def write_templates(engine: Engine, templates: Sequence[TemplateDef]) -> TemplateWriteResult:
    """Upsert whole templates: each one's action list replaces the stored one."""
    requested = (len(templates), sum(len(t.actions) for t in templates))
    catalog = catalog_for(engine)
    records = engine.records(SURFACE_NAME)
    started = time.perf_counter()
    async with catalog.lock:
        await catalog.sync(force=True)
        changed: list[IndexRecord] = []
        removed: list[str] = []
        # A template stored with the same revision needs nothing: a re-load of an unchanged catalog writes nothing.
        templates = [t for t in templates if t.key not in catalog.blocks or catalog.blocks[t.key].revision != template_revision(t)]
        for template in templates:
            old = catalog.blocks.get(template.key)
            # Every action's text holds its service's context: when that (or the text layout) changed, all are rewritten.
            same_service = old is not None and old.service_context_of() == service_context_of(template)
            for action in template.actions:
                if not same_service or old is None or old.action(action.name) != action:
                    changed.append(action_record(template, action))
            if old is not None:
                names = {a.name for a in template.actions}
                removed.extend(action_key(template.key, name) for name in old.columns.names if name not in names)
        outcome = await records.write(changed)
        if removed:
            await records.delete(removed)
        # Columns first, meta last: the meta point marks each template complete.
        await catalog.meta.upsert([point for t in templates for point in template_points(t)])
        await catalog.meta.flush()
        catalog.apply(templates)
    await catalog.announce()
    result = TemplateWriteResult(
        templates=requested[0],
        actions=requested[1],
        written=outcome.written,
        removed=len(removed),
        to_embed=outcome.to_embed,
        enqueued=outcome.enqueued,
    )
    log.info("action templates written", extra={**result.as_dict(), "seconds": round(time.perf_counter() - started, 2)})
    return result


async def delete_template(engine: Engine, key: str) -> bool:
    """Remove a template and its actions; False when there is no such template."""
    catalog = catalog_for(engine)
    async with catalog.lock:
        await catalog.sync(force=True)
        if key not in catalog.blocks:
            return False
        # Meta first: a crash in between leaves orphan actions, which no catalog load picks up.
        await catalog.meta.delete([template_meta_key(key)])
        await catalog.meta.delete([template_actions_key(key)])
        await engine.records(SURFACE_NAME).delete_where(Filter(must=(Match("template", key),)))
        await catalog.meta.flush()
        catalog.remove(key)
    await catalog.announce()
    return True


# ---- instances ---------------------------------------------------------------------------------


async def write_instances(engine: Engine, instances: Sequence[InstanceDef]) -> int:
    """Upsert instances (already authorized by parsing); 400 when one names a template the catalog lacks."""
    catalog = catalog_for(engine)
    index = await catalog.current()
    unknown = sorted({i.template for i in instances if i.template not in index.template_pos})
    if unknown:
        raise ValidationError(
            f"unknown template{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown[:5]))}; "
            "templates are loaded with PUT /v1/actions/templates"
        )
    now = time.time()
    points = [PointRecord(id=_instance_point_id(i.tenant, i.name), payload=instance_payload(i, now)) for i in instances]
    await catalog.meta.upsert(points)
    await catalog.meta.flush()
    forget_visible_instances(engine)
    return len(points)


async def delete_instance(engine: Engine, tenant: str, name: str) -> bool:
    meta = catalog_for(engine).meta
    key = instance_meta_key(tenant, name)
    if not await meta.exists(key):
        return False
    await meta.delete([key])
    await meta.flush()
    forget_visible_instances(engine)
    return True


def _instance_point_id(tenant: str, name: str) -> str:
    return point_id(META_COLLECTION, instance_meta_key(tenant, name))


def instance_payload(instance: InstanceDef, updated_at: float) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "tenant": instance.tenant,
        "kind": INSTANCE_KIND,
        "key": instance_meta_key(instance.tenant, instance.name),
        "name": instance.name,
        "template": instance.template,
        "tier": instance.tier.value,
        "auth_type": instance.auth.type.value,
        "connected": instance.connected,
        "updated_at": updated_at,
    }
    optional = {
        "owner": instance.owner,
        "org": instance.org,
        "provider": instance.auth.provider,
        "secret_name": instance.auth.secret_name,
        "account_email": instance.account_email,
    }
    payload.update({k: v for k, v in optional.items() if v is not None})
    return payload


__all__ = [
    "TemplateWriteResult",
    "action_record",
    "delete_instance",
    "delete_template",
    "instance_payload",
    "write_instances",
    "write_templates",
]
