"""The long-lived heap kept out of the cyclic collector's full passes, so that none stalls the requests in flight.

CPython's collector walks every tracked object on a full (generation 2) pass while holding the
GIL: with the model's modules imported (torch alone brings about 480,000 objects) one pass took
200 ms, and every request in flight waited for it; under an uncached search mix at 90 searches/s
it was the worst request of the run (``bench.loadtest``). Those objects are modules, functions,
classes and loaded indexes that live as long as the process. ``keep_full_passes_short`` installs a
collector callback: a full pass that took longer than ``FULL_PASS_BUDGET_S`` freezes what survived
it (``gc.freeze``), so later passes walk only what was made since. ``settle`` collects once and
freezes, for the moment a process has finished starting.

What is frozen is never examined for cycles again: a frozen object that later becomes part of an
unreachable cycle is not reclaimed (reference counting still frees everything else). That costs
at most the cyclic garbage of the requests in flight at each freeze, and freezes are rare: each
one leaves the next pass short.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

FULL_PASS_BUDGET_S = 0.02
"""A full pass longer than this freezes its survivors (about 50,000 objects' walk on this machine)."""

log = logging.getLogger(__name__)
_started: list[float] = []
_installed: list[Any] = []


def keep_full_passes_short(budget_s: float = FULL_PASS_BUDGET_S) -> None:
    """Freeze the survivors of any full pass that took longer than ``budget_s`` (installed once per process)."""
    if _installed:
        return

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            _started[:] = [time.perf_counter()]
            return
        took = time.perf_counter() - _started[0] if _started else 0.0
        if took > budget_s:
            gc.freeze()
            log.debug("a full collection took %.0f ms: its survivors are kept out of later ones", took * 1000, extra={"frozen": gc.get_freeze_count()})

    gc.callbacks.append(on_collection)
    _installed.append(on_collection)


def stop_keeping() -> None:
    """Remove the callback and return frozen objects to the collector (tests; a process need not)."""
    while _installed:
        gc.callbacks.remove(_installed.pop())
    gc.unfreeze()


def settle() -> int:
    """Collect once, then freeze everything alive: for a process that has finished starting. The count frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


__all__ = ["FULL_PASS_BUDGET_S", "keep_full_passes_short", "settle", "stop_keeping"]
