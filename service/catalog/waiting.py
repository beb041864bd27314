"""The Waiting block of ranked search: what the signed-in human must clear (reconnects, expired secrets).

Only ``block`` and ``degraded`` items of the caller's own tenants show; setup and onboarding cards
stay off the block. The check is bounded (``WAITING_BUDGET_S``): past it the answer goes out
without the block and says so in ``phaseTimings.waitingItemsTimedOut``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.keys import Kind
from service.engine.store import Filter, Match, MatchAny

if TYPE_CHECKING:
    from service.catalog.state import WaitingSource
    from service.engine.runtime import Engine

WAITING_BUDGET_S = 1.5
SHOWN_ITEMS = 3
_SHOWN_STATUSES = ("block", "degraded")
_OFF_BLOCK_CATEGORIES = ("setup", "onboarding")
_MAX_ITEMS = 200


@dataclass(frozen=True)
class WaitingOutcome:
    items: list[dict[str, Any]]
    timed_out: bool
    duration_ms: float


def user_tenants(caller: Caller) -> tuple[str, ...]:
    return tuple(t for t in caller.tenants if t != GLOBAL_TENANT)


async def load_waiting_items(engine: Engine, caller: Caller) -> list[dict[str, Any]]:
    """The caller's open block/degraded items, blocking ones first."""
    from service.catalog.keys import COLLECTION

    flt = Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.WAITING.value)))
    page, _ = await engine.store.scroll(COLLECTION, flt, limit=_MAX_ITEMS)
    items = [
        {
            "id": p.payload.get("entity_id"),
            "title": p.payload.get("title"),
            "status": p.payload.get("status"),
            "category": p.payload.get("category"),
            "nextStep": p.payload.get("next_step") or None,
            "integration": p.payload.get("integration") or None,
            "server": p.payload.get("server") or None,
        }
        for p in page
        if p.payload.get("status") in _SHOWN_STATUSES and p.payload.get("category") not in _OFF_BLOCK_CATEGORIES
    ]
    items.sort(key=lambda item: (item["status"] != "block", str(item["title"])))
    return items


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
