"""The deadline of one search: its time budget, the phases it ran, and the check between phases.

Every surface's search runs under a ``Deadline`` (``service.engine.surface.run_search`` makes it).
A search runs as named phases (``rateLimit``, then the surface's own: ``revalidate``, ``lexical``,
``loadAndRank``, ``jevRerank``, ...). Each phase is one exclusive tile of the answer's timing
(``Server-Timing`` and, for the catalog, ``timing.serverTiming``); ``unaccounted`` is the wall clock
minus the tiles. Before a phase starts the deadline checks its budget and whether the request gave
up on this search, so an abandoned search stops at its next phase instead of competing with a retry.

A search budget counts from the request, not from the search: the HTTP deadline middleware marks
when the request must be answered (``request_deadline``), and ``search_budget_s`` leaves out what
the request has already spent before its search starts (authentication, sessions, parsing), so the
surface's deadline answer is ready before the middleware's bare 504.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any


class SearchAbandoned(Exception):
    """The deadline passed (or the request gave up): stop before the next phase."""


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The search's own deadline fires this much before the request's (the HTTP middleware's), so the
# caller gets the surface's deadline answer, which says what to do, rather than a bare 504.
_MARGIN_S = 0.5


# When the request running in this context must be answered (``time.perf_counter()``), if it runs
# under the HTTP deadline.
_REQUEST_ENDS = ContextVar[float | None]("request_ends", default=None)


@contextmanager
def request_deadline(seconds: float) -> Iterator[None]:
    """The request running in this context must be answered within ``seconds`` from now."""
    token = _REQUEST_ENDS.set(time.perf_counter() + seconds)
    try:
        yield
    finally:
        _REQUEST_ENDS.reset(token)


def search_budget_s(request_deadline_s: float) -> float:
    """The time one search may take within a request deadline of ``request_deadline_s``: the deadline
    less a margin, and, inside a request under the deadline, no more than what the request has left
    less that margin."""
    margin_s = min(_MARGIN_S, request_deadline_s * 0.1)
    budget_s = max(0.05, request_deadline_s - margin_s)
    ends = _REQUEST_ENDS.get()
    if ends is not None:
        budget_s = min(budget_s, max(0.0, ends - time.perf_counter() - margin_s))
    return budget_s


def request_left_s() -> float | None:
    """Seconds the request running in this context has left; None outside a request deadline."""
    ends = _REQUEST_ENDS.get()
    return None if ends is None else max(0.0, ends - time.perf_counter())


class Deadline:
    """When a search must be done by, and the phase tiles it has run."""

    def __init__(self, budget_s: float) -> None:
        self.started_at = datetime.now(UTC)
        self._start = time.perf_counter()
        self.budget_s = budget_s
        self.phases: list[tuple[str, float]] = []
        self.abandoned = False

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start

    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.elapsed_s())

    def check(self) -> None:
        if self.abandoned or self.elapsed_s() >= self.budget_s:
            self.abandoned = True
            raise SearchAbandoned()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one exclusive phase; refuse to start it once the search is abandoned."""
        self.check()
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases.append((name, (time.perf_counter() - started) * 1000))

    def add(self, name: str, duration_ms: float) -> None:
        self.phases.append((name, duration_ms))

    def phase_ms(self, name: str) -> float | None:
        values = [ms for phase, ms in self.phases if phase == name]
        return round(sum(values), 3) if values else None

    def tiles(self) -> dict[str, float]:
        """Phase name -> milliseconds, a phase run twice summed once."""
        tiles: dict[str, float] = {}
        for name, ms in self.phases:
            tiles[name] = tiles.get(name, 0.0) + ms
        return tiles

    def timing(self) -> dict[str, Any]:
        """``timing``: startedAt, endedAt, durationMs and serverTiming tiles plus ``unaccounted``."""
        duration_ms = self.elapsed_s() * 1000
        tiles = self.tiles()
        unaccounted = max(0.0, duration_ms - sum(tiles.values()))
        server_timing = [{"name": name, "durationMs": round(ms, 3)} for name, ms in tiles.items()]
        server_timing.append({"name": "unaccounted", "durationMs": round(unaccounted, 3)})
        return {
            "startedAt": _iso(self.started_at),
            "endedAt": _iso(datetime.now(UTC)),
            "durationMs": round(duration_ms, 3),
            "serverTiming": server_timing,
        }
