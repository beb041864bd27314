"""Freed heap memory goes back to the OS: after many small allocations are freed around a few
survivors (the pattern a large index build leaves), the process's private memory drops."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

from service.engine.heap import release_free_memory

ON_GLIBC = ctypes.util.find_library("c") is not None and Path("/proc/self/status").exists()


def _rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not ON_GLIBC, reason="malloc_trim is glibc's; elsewhere release_free_memory does nothing")
def test_freed_pages_between_survivors_are_given_back() -> None:
    blocks = [bytes(4_000) + bytes([i % 256]) for i in range(50_000)]  # ~200 MB from malloc's heap
    survivors = blocks[::64]  # one in 64 stays: the freed pages lie between live ones
    del blocks
    before = _rss_anon_kib()
    assert release_free_memory() is True
    after = _rss_anon_kib()
    assert survivors and before - after > 100_000, f"RssAnon {before} kB -> {after} kB"
