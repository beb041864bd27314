"""Answering one action search: visibility, then browse listing or ranking, then rendering."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.actions.model import SearchRequest
from service.actions.ranking import rank
from service.actions.render import browse_rows, search_row
from service.actions.state import catalog_for
from service.actions.visibility import browse_order, select_units, visible_instances
from service.auth import Caller

if TYPE_CHECKING:
    from service.engine.runtime import Engine


@dataclass
class SearchAnswer:
    body: dict[str, Any]
    timings_ms: dict[str, float] = field(default_factory=dict)


async def search_actions(engine: Engine, caller: Caller, request: SearchRequest) -> SearchAnswer:
    """The action-search answer: ``{query, results}`` plus ``notices`` and ``meta`` (mode, candidates, signals)."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    index = await catalog_for(engine).current()
    timings["catalog"] = _ms(started)
    started = time.perf_counter()
    instances = await visible_instances(engine, caller)
    units = select_units(index, instances, request)
    timings["instances"] = _ms(started)
    if request.browse:
        # Browse mode is a listing, not a ranking: every callable instance, no actions, no scores, no limit.
        rows = browse_rows(browse_order(units), index, request.include_catalog)
        body = {"query": request.query, "results": rows, "notices": list(request.notices), "meta": {"mode": "browse", "candidates": len(units)}}
        return SearchAnswer(body=body, timings_ms=timings)
    ranking = await rank(engine, index, units, request.query, request.limit)
    timings.update(ranking.timings_ms)
    body = {
        "query": request.query,
        "results": [search_row(ranked, index, request.include_catalog) for ranked in ranking.rows],
        "notices": [*request.notices, *ranking.notices],
        "meta": {"mode": "search", "candidates": ranking.candidates, "signals": list(ranking.signals)},
    }
    return SearchAnswer(body=body, timings_ms=timings)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
