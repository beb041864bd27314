"""Waiting items: what the signed-in human must clear (reconnects, expired secrets), ingested or derived from state.

Two sources make one list. Ingested ``waiting`` entities say it outright; the catalog's own records
say it too, so those items are derived at read time: a secret reference whose ``expiresAt`` has
passed (ingest stores it as ``expires_ts`` too, so the store finds the expired ones by range), an integration whose last token refresh was ``reconnectable``, an MCP server whose
connection is ``disconnected`` (``block``) or ``degraded``. An ingested item about the same
integration or server stands in for the derived one. Only ``block`` and ``degraded`` items of the
caller's own tenants show; setup and onboarding cards stay off the list. Ranked search shows the
first few as its Waiting block within ``WAITING_BUDGET_S`` (past it the answer goes out without the
block and says so in ``phaseTimings.waitingItemsTimedOut``); ``waiting_summary`` answers the full list.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.keys import Kind
from service.catalog.parsing import parse_timestamp
from service.catalog.state import WaitingSource, catalog_index, catalog_state
from service.engine.store import Filter, Match, MatchAny, Range

if TYPE_CHECKING:
    from service.engine.runtime import Engine

WAITING_BUDGET_S = 1.5
SHOWN_ITEMS = 3
# Where the Waiting block's "N more" line sends the agent: the MCP tool and its HTTP twin.
WAITING_TOOL = "waiting_summary"
WAITING_PATH = "/v1/catalog/waiting"
WAITING_SUMMARY_STEP = f"call the {WAITING_TOOL} tool (GET {WAITING_PATH}) for the full list"
_SHOWN_STATUSES = ("block", "degraded")
_OFF_BLOCK_CATEGORIES = ("setup", "onboarding")
# Records read per source: the most items one caller is shown.
MAX_ITEMS = 200


@dataclass(frozen=True)
class WaitingOutcome:
    items: list[dict[str, Any]]
    timed_out: bool
    duration_ms: float


def user_tenants(caller: Caller) -> tuple[str, ...]:
    return tuple(t for t in caller.tenants if t != GLOBAL_TENANT)


async def load_waiting_items(engine: Engine, caller: Caller) -> list[dict[str, Any]]:
    """The caller's open block/degraded items, ingested and derived, blocking ones first."""
    tenants = user_tenants(caller)
    now = datetime.fromtimestamp(time.time(), UTC)
    ingested, secrets, integrations, servers = await _read_sources(engine, tenants, now)
    items = [_ingested_item(p) for p in _first_per_entity(ingested, tenants)]
    items = [i for i in items if i["status"] in _SHOWN_STATUSES and i["category"] not in _OFF_BLOCK_CATEGORIES]
    covered = {("integration", i["integration"]) for i in items if i["integration"]} | {("server", i["server"]) for i in items if i["server"]}
    derived = [
        *(item for p in _first_per_entity(secrets, tenants) if (item := expired_secret_item(p, now)) is not None),
        *(reconnect_integration_item(p) for p in _first_per_entity(integrations, tenants) if ("integration", p.get("entity_id")) not in covered),
        *(disconnected_server_item(p) for p in _first_per_entity(servers, tenants) if ("server", p.get("entity_id")) not in covered),
    ]
    return sort_items([*items, *derived])


def sort_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocking items first, then by title (a stable order for the block and the full list)."""
    return sorted(items, key=lambda item: (item["status"] != "block", str(item["title"]), str(item["id"])))


# The kinds each source reads (the sources are told apart by kind when read in one scroll).
_SOURCE_KINDS = ((Kind.WAITING.value,), (Kind.SECRET.value, Kind.PACKAGE_SECRET.value), (Kind.INTEGRATION.value,), (Kind.MCP_SERVER.value,))


def _source_conditions(now: datetime) -> tuple[Filter, ...]:
    """What each source reads besides the caller's tenants: ingested items, expired secrets, integrations to reconnect, servers down."""
    return (
        Filter(must=(Match("kind", Kind.WAITING.value),)),
        Filter(must=(MatchAny("kind", _SOURCE_KINDS[1]), Range("expires_ts", lt=now.timestamp()))),
        Filter(must=(Match("kind", Kind.INTEGRATION.value), Match("last_refresh.status", "reconnectable"))),
        Filter(must=(Match("kind", Kind.MCP_SERVER.value), MatchAny("connection.status", ("disconnected", "degraded")))),
    )


async def _read_sources(engine: Engine, tenants: tuple[str, ...], now: datetime) -> list[list[Mapping[str, Any]]]:
    """Each source's first ``MAX_ITEMS`` records in scroll order: one scroll for them all when they fit
    one page (then each source's share is exactly what its own scroll reads), else one scroll each."""
    sources = _source_conditions(now)
    tenant = MatchAny("tenant", tenants)
    page, more = await catalog_index(engine).scroll(Filter(must=(tenant,), should=sources), limit=MAX_ITEMS * len(sources))
    if more is not None:
        return list(await asyncio.gather(*(_scroll(engine, Filter(must=(tenant, *source.must))) for source in sources)))
    payloads = [point.payload for point in page]
    return [[p for p in payloads if p.get("kind") in kinds][:MAX_ITEMS] for kinds in _SOURCE_KINDS]


async def _scroll(engine: Engine, flt: Filter) -> list[Mapping[str, Any]]:
    page, _ = await catalog_index(engine).scroll(flt, limit=MAX_ITEMS)
    return [p.payload for p in page]


def _first_per_entity(payloads: Sequence[Mapping[str, Any]], tenants: Sequence[str]) -> list[Mapping[str, Any]]:
    """One payload per (kind, id): the caller's own before its org's and teams', as lookups resolve them."""
    order = {t: i for i, t in enumerate(tenants)}
    chosen: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for payload in sorted(payloads, key=lambda p: order.get(str(p.get("tenant")), len(order))):
        chosen.setdefault((str(payload.get("kind")), str(payload.get("package_id") or ""), str(payload.get("entity_id"))), payload)
    return list(chosen.values())


def _item(item_id: str, title: str, status: str, category: str, next_step: str, *, integration: str | None = None, server: str | None = None, secret: str | None = None) -> dict[str, Any]:
    return {"id": item_id, "title": title, "status": status, "category": category, "nextStep": next_step, "integration": integration, "server": server, "secret": secret}


def _ingested_item(payload: Mapping[str, Any]) -> dict[str, Any]:
    item = _item(
        str(payload.get("entity_id")),
        str(payload.get("title")),
        str(payload.get("status")),
        str(payload.get("category") or "other"),
        str(payload.get("next_step") or ""),
        integration=payload.get("integration") or None,
        server=payload.get("server") or None,
    )
    item["nextStep"] = item["nextStep"] or None
    return item


def expired_secret_item(payload: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """A blocking item for a secret reference whose expiry has passed; None while it is valid."""
    expires = parse_timestamp(str(payload.get("expires_at") or ""))
    if expires is None or expires > now:
        return None
    secret = str(payload.get("entity_id"))
    scoped = payload.get("kind") == Kind.PACKAGE_SECRET.value
    name = f"{payload.get('package_id')}:{secret}" if scoped else secret
    where = f"secret {secret} of package {payload.get('package_id')}" if scoped else f"secret {secret}"
    ref = f'package:{payload.get("package_id")}' if scoped else f"secret:{secret}"
    step = f"Ask the user to renew the {where} (expired {payload.get('expires_at')}); calls that use it fail until then. Its metadata: search({{ entity: \"{ref}\" }})."
    return _item(f"secret-expired:{name}", f"Secret {secret} expired", "block", "secret-expired", step, secret=secret)


def reconnect_integration_item(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A blocking item for an integration whose last token refresh needs the user to re-authorize."""
    integration_id = str(payload.get("entity_id"))
    refresh = payload.get("last_refresh") or {}
    reason = refresh.get("message") or "reconnect required"
    step = f"Ask the user to reconnect {payload.get('title')}: its last token refresh failed and needs them to re-authorize ({reason})."
    return _item(f"oauth-reconnect:{integration_id}", f"Reconnect {payload.get('title')}", "block", "oauth-reconnect", step, integration=integration_id)


def disconnected_server_item(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An item for an MCP server that is disconnected (``block``: its tools cannot be called) or degraded."""
    server = str(payload.get("entity_id"))
    connection = payload.get("connection") or {}
    disconnected = connection.get("status") == "disconnected"
    reason = connection.get("message") or ("disconnected" if disconnected else "degraded")
    effect = "its tools cannot be called until then" if disconnected else "its tools may fail until then"
    step = f"Ask the user to reconnect the MCP server {server} ({reason}); {effect}. Its tools: search({{ entity: \"mcp-server:{server}\" }})."
    title = f"MCP server {server} {'disconnected' if disconnected else 'degraded'}"
    return _item(f"mcp-reconnect:{server}", title, "block" if disconnected else "degraded", "mcp-reconnect", step, server=server)


async def check_waiting(source: WaitingSource, engine: Engine, caller: Caller, budget_s: float = WAITING_BUDGET_S) -> WaitingOutcome:
    """Run the waiting check within ``budget_s``; a timeout yields no items and ``timed_out``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(budget_s):
            items = await source(engine, caller)
    except TimeoutError:
        return WaitingOutcome([], True, (loop.time() - started) * 1000)
    return WaitingOutcome(items, False, (loop.time() - started) * 1000)


def waiting_block(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Waiting block of a ranked answer: the first ``SHOWN_ITEMS`` items and where the rest are."""
    more = max(0, len(items) - SHOWN_ITEMS)
    return {
        "items": list(items[:SHOWN_ITEMS]),
        "more": more,
        "total": len(items),
        "summary": WAITING_SUMMARY_STEP,
    }


async def waiting_summary(engine: Engine, caller: Caller) -> dict[str, Any]:
    """The full list of the caller's waiting items (the Waiting block shows the first few), without the block's time budget."""
    items = await catalog_state(engine).waiting_source(engine, caller)
    step = (
        "Tell the user what is waiting on them; each item says what they must do, and a cleared item leaves this list."
        if items
        else "Nothing is waiting on the user."
    )
    return {"kind": "waiting", "items": items, "total": len(items), "nextStep": step}
