"""The service limits glibc's malloc arenas at start, so memory freed by one thread is reused by another."""

from __future__ import annotations

import subprocess
import sys

from service.allocator import ARENAS

# Threads that each allocate once get an arena of their own until the limit; malloc_info lists the heaps.
COUNT_HEAPS = """
import ctypes, ctypes.util, sys, tempfile, threading
from service.allocator import limit_arenas
applied = limit_arenas() if sys.argv[1] == "limit" else False
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
kept, start = [], threading.Barrier(8)
def allocate():
    start.wait()
    kept.append(libc.malloc(1000))
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    fp = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    print(applied, open(out.name).read().count("<heap nr="))
"""


def heaps(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    result = subprocess.run([sys.executable, "-c", COUNT_HEAPS, mode], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    applied, count = result.stdout.split()
    return applied, int(count)


def test_the_arena_limit_holds_threads_to_few_heaps() -> None:
    applied, limited = heaps("limit", env={"PATH": "/usr/bin:/bin"})
    assert applied == "True"
    _, default = heaps("default", env={"PATH": "/usr/bin:/bin"})
    assert limited <= ARENAS < default, (limited, default)
