"""Request-scoped search timing: phase tiles, ``unaccounted``, and the search deadline checked between phases.

A search runs as phases (``rateLimit``, ``identityResolution``, ``rowAndRegistryLoad``,
``featureFlags``, ``loadAndRank``, ``memoryEnrichment``, ``jevRerank``, ``waitingItems``, ...).
Each phase is one exclusive tile of ``timing.serverTiming``; ``unaccounted`` is the wall clock minus
the tiles. Before a phase starts the clock checks the deadline and whether the request gave up on
this search, so an abandoned search stops at its next phase instead of competing with a retry.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any


class SearchAbandoned(Exception):
    """The deadline passed (or the request gave up): stop before the next phase."""


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SearchClock:
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

    def timing(self) -> dict[str, Any]:
        """``timing``: startedAt, endedAt, durationMs and serverTiming tiles plus ``unaccounted``."""
        duration_ms = self.elapsed_s() * 1000
        tiles: dict[str, float] = {}
        for name, ms in self.phases:
            tiles[name] = tiles.get(name, 0.0) + ms
        unaccounted = max(0.0, duration_ms - sum(tiles.values()))
        server_timing = [{"name": name, "durationMs": round(ms, 3)} for name, ms in tiles.items()]
        server_timing.append({"name": "unaccounted", "durationMs": round(unaccounted, 3)})
        return {
            "startedAt": _iso(self.started_at),
            "endedAt": _iso(datetime.now(UTC)),
            "durationMs": round(duration_ms, 3),
            "serverTiming": server_timing,
        }
