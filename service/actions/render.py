"""Rendering action-search rows: each field present or absent as the table below says.

| field | present |
|---|---|
| service | instance rows only (never on setup_required rows) |
| template, service_display_name, tier, auth | always (a catalog row's tier is ``global``: templates are global catalog data) |
| account_email | OAuth instances that have one |
| secret_name | API-key instances (the label, never a value) |
| action, description, risk, score | search mode only (absent in browse mode) |
| auth.provider | OAuth only; ``auth.connected`` is false on setup_required rows |
| setup_required | only when the request set ``include_catalog``: true on catalog rows, false otherwise |
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from service.actions.index import ActionIndex
from service.actions.model import AuthType, Tier
from service.actions.ranking import Ranked
from service.actions.visibility import Unit

SCORE_DECIMALS = 4


def search_row(ranked: Ranked, index: ActionIndex, include_catalog: bool) -> dict[str, Any]:
    _, action = index.action_at(ranked.action_idx)
    row = _service_fields(ranked.unit)
    row["action"] = action.name
    row["description"] = action.description
    row["risk"] = action.risk.value
    row.update(_access_fields(ranked.unit))
    row["score"] = round(ranked.score, SCORE_DECIMALS)
    if include_catalog:
        row["setup_required"] = ranked.unit.setup_required
    return row


def browse_row(unit: Unit, include_catalog: bool) -> dict[str, Any]:
    row = _service_fields(unit)
    row.update(_access_fields(unit))
    if include_catalog:
        row["setup_required"] = unit.setup_required
    return row


def browse_rows(units: Sequence[Unit], index: ActionIndex, include_catalog: bool) -> list[dict[str, Any]]:
    """Browse rows; a setup row depends only on its template, so those are rendered once per index."""
    cached = _SETUP_ROWS.get(index)
    if cached is None:
        cached = _SETUP_ROWS[index] = {}
    rows = []
    for unit in units:
        if unit.instance is None:
            row = cached.get(unit.template_idx)
            if row is None:
                row = cached[unit.template_idx] = browse_row(unit, include_catalog=True)
            rows.append(row)
        else:
            rows.append(browse_row(unit, include_catalog))
    return rows


# Shared, never mutated after rendering: the response serializer only reads them.
_SETUP_ROWS: weakref.WeakKeyDictionary[ActionIndex, dict[int, dict[str, Any]]] = weakref.WeakKeyDictionary()


def _service_fields(unit: Unit) -> dict[str, Any]:
    row: dict[str, Any] = {}
    instance = unit.instance
    if instance is not None:
        row["service"] = instance.name
    row["template"] = unit.block.key
    row["service_display_name"] = unit.block.display_name
    if instance is not None and instance.auth.type is AuthType.OAUTH and instance.account_email:
        row["account_email"] = instance.account_email
    if instance is not None and instance.auth.type is AuthType.API_KEY and instance.auth.secret_name:
        row["secret_name"] = instance.auth.secret_name
    return row


def _access_fields(unit: Unit) -> dict[str, Any]:
    instance = unit.instance
    if instance is None:
        auth_type, provider, connected, tier = unit.block.auth.type, unit.block.auth.provider, False, Tier.GLOBAL
    else:
        auth_type, provider, connected, tier = instance.auth.type, instance.auth.provider, instance.connected, instance.tier
    auth: dict[str, Any] = {"type": auth_type.value}
    if auth_type is AuthType.OAUTH and provider:
        auth["provider"] = provider
    auth["connected"] = connected
    return {"tier": tier.value, "auth": auth}
