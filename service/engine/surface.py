"""The surface contract: what one search surface hands the engine (``SurfaceDef``), and one search run.

The engine knows surfaces only through the ``SurfaceDef`` list it is opened with
(``service.engine.startup.open_engine``); it never imports a surface package. The app, the
command line and the workers get that list from ``service.surfaces.surfaces()``.

Every surface searches the same way: ``run_search(engine, surface, caller, body)`` parses the body
with the surface's ``parse`` (bad input is refused before anything is counted), checks the caller's
rate limit for that surface, then runs the surface's ``search(engine, caller, request, deadline)``
under one ``Deadline``, and returns a ``SearchAnswer``. The HTTP routes and the MCP tools both call
it, so a search costs the same and ends at the same time whichever door it came through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from service.engine.deadline import Deadline, SearchAbandoned, request_left_s, search_budget_s
from service.engine.store import CollectionSpec
from service.errors import DeadlineExceeded
from service.ratelimit import RateLimitExceeded, Surface

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.records import RecordTexts
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# How long an abandoned search may take to stop before its deadline answer goes out without it.
_CLEAN_UP_S = 0.05


@dataclass
class SearchAnswer:
    """One search's answer, the same type on every surface: the JSON body (the HTTP response body and
    the MCP tool's result), its HTTP status and headers, and the time each phase took."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Phase name -> milliseconds (the ``Server-Timing`` header); filled from the search's ``Deadline``."""


@dataclass(frozen=True)
class SurfaceSearch:
    """The search of one surface, as ``run_search`` runs it."""

    rate_limit: Surface
    """The rate-limit windows a search of this surface counts against."""
    parse: Callable[[Engine, Caller, Any, str | None], Awaitable[Any]]
    """``(engine, caller, body, target)`` -> the surface's request. ``target`` is what the URL names
    besides the body (a workspace id), or None. Bad input raises its 4xx here, before the rate
    limit counts the search."""
    search: Callable[[Engine, Caller, Any, Deadline], Coroutine[Any, Any, SearchAnswer]]
    """One search, start to finish; long searches check ``deadline`` between phases."""
    deadline_advice: str
    """What to do when a search ran out of time, after "retry once, then" (e.g. "narrow path or glob")."""
    rate_limited: Callable[[RateLimitExceeded, Deadline], SearchAnswer] | None = None
    """The answer to a search over the caller's rate limit; None: the 429 error."""
    past_deadline: Callable[[float, Deadline], SearchAnswer] | None = None
    """The answer to a search past its deadline (given the request deadline in seconds); None: the
    504 error saying ``deadline_advice``."""


@dataclass(frozen=True)
class JobDef:
    """One arq job: its coroutine (taking ``ctx`` first) and whether it runs on the fast queue."""

    function: Callable[..., Awaitable[Any]]
    fast: bool


@dataclass(frozen=True)
class SurfaceDef:
    """What one surface plugs into the service."""

    name: str
    spec: CollectionSpec
    routes: web.RouteTableDef
    on_open: Callable[[Engine], Awaitable[None]] | None = None
    """Opens what the surface keeps on the engine (``engine.state[name]``), after its collection."""
    on_close: Callable[[Engine], Awaitable[None]] | None = None
    """Closes it again (files, processes) when the engine closes, before the store does."""
    add_cli: Callable[[Any], None] | None = None
    jobs: dict[str, JobDef] = field(default_factory=dict)
    """arq job name -> its job."""
    analyzed_fields: tuple[str, ...] = ()
    """Payload fields besides ``terms`` that hold analyzer output (``reindex`` upgrades them)."""
    bulk_embedding: bool = False
    """Its records arrive in bulk (workspace chunks): their embed jobs go to the bulk queue, behind
    which no interactive write's embedding waits."""
    search: SurfaceSearch | None = None
    """Its search, run by ``run_search`` (a surface may have none)."""
    record_texts: RecordTexts | None = None
    """Where its records' texts are kept when the store's points do not hold them (code: the
    workspaces' chunk caches); its ``job`` must be among ``jobs``, node-local."""
    tenant_collections: tuple[str, ...] = ()
    """Collections besides its own whose points carry a tenant in their key (re-keyed with it when
    old team keys are migrated, ``service.engine.teams``)."""


def surface_jobs(surfaces: Sequence[SurfaceDef]) -> dict[str, JobDef]:
    """Every surface's arq jobs, by name."""
    jobs: dict[str, JobDef] = {}
    for surface in surfaces:
        jobs.update(surface.jobs)
    return jobs


async def run_search(
    engine: Engine, surface: str, caller: Caller, body: Any, *, target: str | None = None, budget_s: float | None = None
) -> SearchAnswer:
    """Parse ``body``, count the search against ``caller``'s ``surface`` rate limit, and search within
    ``budget_s`` (default: the request deadline less a margin, so the caller gets an answer that says
    what to do rather than a bare 504). Past the budget the search is cancelled (a phase not yet
    started never runs) and the surface's deadline answer is returned."""
    searcher = engine.searches[surface]
    request = await searcher.parse(engine, caller, body, target)
    request_deadline_s = engine.settings.request_deadline_s
    deadline = Deadline(search_budget_s(request_deadline_s) if budget_s is None else budget_s)
    try:
        with deadline.phase("rateLimit"):
            exceeded = await engine.rate_limiter.check(caller, searcher.rate_limit)
    except SearchAbandoned:  # the request spent its time before the search began
        return _timed(_past_deadline(searcher, request_deadline_s, deadline), deadline)
    if exceeded is not None:
        if searcher.rate_limited is None:
            raise exceeded.error()
        return _timed(searcher.rate_limited(exceeded, deadline), deadline)
    task = asyncio.create_task(searcher.search(engine, caller, request, deadline))
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline.remaining_s())
    except asyncio.CancelledError:  # the request went away: so does its search
        task.cancel()
        raise
    if task in done:
        try:
            return _timed(task.result(), deadline)
        except SearchAbandoned:
            return _timed(_past_deadline(searcher, request_deadline_s, deadline), deadline)
    deadline.abandoned = True
    task.cancel()  # aborts the phase in flight; phases not yet started never run
    task.add_done_callback(_retrieved)
    # A phase may take a moment to stop (a store call finishes its thread first): wait for it a
    # little, never past the request's own deadline, so the answer below is not late. The
    # request's own cancellation (its deadline, or the caller gone) still propagates from here.
    left_s = request_left_s()
    await asyncio.wait({task}, timeout=_CLEAN_UP_S if left_s is None else min(_CLEAN_UP_S, left_s / 2))
    log.warning(
        "search abandoned at the deadline",
        extra={"surface": surface, "deadline_s": request_deadline_s, "phases": [p for p, _ in deadline.phases]},
    )
    return _timed(_past_deadline(searcher, request_deadline_s, deadline), deadline)


def _retrieved(task: asyncio.Task[Any]) -> None:
    """An abandoned search's outcome is not wanted, only collected (no "never retrieved" warning)."""
    if not task.cancelled():
        task.exception()


def _past_deadline(searcher: SurfaceSearch, request_deadline_s: float, deadline: Deadline) -> SearchAnswer:
    if searcher.past_deadline is not None:
        return searcher.past_deadline(request_deadline_s, deadline)
    raise DeadlineExceeded(f"search did not finish within {request_deadline_s:g}s; retry once, then {searcher.deadline_advice}")


def _timed(answer: SearchAnswer, deadline: Deadline) -> SearchAnswer:
    answer.timings_ms = {**deadline.tiles(), **answer.timings_ms}
    return answer
