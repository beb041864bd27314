"""One action search, start to finish: visibility, then a browse listing or a ranking, then rendering."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.actions.model import SearchRequest
from service.actions.parsing import parse_search_body
from service.actions.ranking import rank
from service.actions.render import browse_rows, search_row
from service.actions.state import catalog_for
from service.actions.visibility import browse_order, select_units, visible_instances
from service.auth import Caller
from service.engine.deadline import Deadline
from service.engine.surface import SearchAnswer, SurfaceSearch
from service.ratelimit import Surface

if TYPE_CHECKING:
    from service.engine.runtime import Engine


async def parse(engine: Engine, caller: Caller, body: Any, target: str | None) -> SearchRequest:
    """The search body, validated (the surface's search takes no target)."""
    return parse_search_body(body)


async def search(engine: Engine, caller: Caller, request: SearchRequest, deadline: Deadline) -> SearchAnswer:
    """The action-search answer: ``{query, results}`` plus ``notices`` and ``meta`` (mode, candidates, signals,
    and for a search the ranking mode and the served blend's weights)."""
    with deadline.phase("catalog"):
        index = await catalog_for(engine).current()
    with deadline.phase("instances"):
        instances = await visible_instances(engine, caller)
        units = select_units(index, instances, request)
    if request.browse:
        # Browse mode is a listing, not a ranking: every callable instance, no actions, no scores, no limit.
        rows = browse_rows(browse_order(units), index, request.include_catalog)
        body = {"query": request.query, "results": rows, "notices": list(request.notices), "meta": {"mode": "browse", "candidates": len(units)}}
        return SearchAnswer(body=body)
    deadline.check()
    ranking = await rank(engine, index, units, request.query, request.limit, mode=request.ranking)
    for phase, duration_ms in ranking.timings_ms.items():
        deadline.add(phase, duration_ms)
    meta: dict[str, Any] = {"mode": "search", "candidates": ranking.candidates, "signals": list(ranking.signals), "ranking": request.ranking.value}
    if ranking.weights is not None:
        meta["weights"] = ranking.weights.as_dict()
    body = {
        "query": request.query,
        "results": [search_row(ranked, index, request.include_catalog) for ranked in ranking.rows],
        "notices": [*request.notices, *ranking.notices],
        "meta": meta,
    }
    return SearchAnswer(body=body)


SEARCH = SurfaceSearch(rate_limit=Surface.ACTIONS, parse=parse, search=search, deadline_advice="shorten the query or exclude services")
