"""The C allocator's arenas: a long-running process keeps few, so memory freed by one thread is reused by the next.

glibc gives each thread that allocates at once an arena of its own (up to eight per CPU) and keeps
what is freed in it for that arena: a service whose work hops between the event loop, the default
thread pool, tantivy's and onnxruntime's threads holds freed memory in many of them. A workspace
build of 25 MB of source left the service at 204 MB of private memory (RssAnon) with glibc's
default and at 132 MB with two arenas (``python -m bench.bench_code_scale --limit-mb 25``, one run
each, same machine). ``limit_arenas`` applies that limit to this process unless the operator set
``MALLOC_ARENA_MAX`` (glibc reads it itself); elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Limit glibc's malloc arenas to ``arenas``; True when applied (call it before starting threads)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))


__all__ = ["ARENAS", "limit_arenas"]
