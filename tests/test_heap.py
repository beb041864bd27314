"""A full collection slower than its budget freezes what survived it, so later ones walk only newer objects."""

from __future__ import annotations

import subprocess
import sys

# Run in a child: freezing changes the whole interpreter's collector.
FULL_PASSES = """
import gc, sys
from service.heap import keep_full_passes_short, settle
keep_full_passes_short(float(sys.argv[1]))
keep_full_passes_short(float(sys.argv[1]))  # installed once
kept = [[i] for i in range(300_000)]  # lists are tracked by the collector
gc.collect()
after_first = gc.get_freeze_count()
garbage = [[j] for j in range(1000)]
del garbage
gc.collect()
print(sum(1 for c in gc.callbacks if getattr(c, "__qualname__", "").endswith("on_collection")), after_first, gc.get_freeze_count(), settle() >= gc.get_freeze_count())
"""


def full_passes(budget_s: float) -> list[str]:
    result = subprocess.run([sys.executable, "-c", FULL_PASSES, str(budget_s)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_a_slow_full_pass_freezes_its_survivors_and_a_fast_one_does_not() -> None:
    installed, after_first, after_second, settled = full_passes(0.0)  # every pass is over budget
    assert installed == "1"
    assert int(after_first) >= 300_000  # the kept lists, frozen by the first pass
    assert int(after_second) >= int(after_first)
    assert settled == "True"

    installed, after_first, after_second, _ = full_passes(60.0)  # none is
    assert installed == "1"
    assert after_first == after_second == "0"
