"""Giving freed heap memory back to the operating system after a large batch of work.

Indexing a large tree allocates and frees millions of small objects (Python's, and the embedded
store's and tantivy's native ones). The C allocator keeps freed pages in its arenas for reuse, so
the process's private memory stays at its peak long after the work ended. glibc's ``malloc_trim``
returns the free pages at the top and in the middle of every arena. Elsewhere (musl, macOS) the
call does not exist and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_free_memory() -> bool:
    """Hand the allocator's free pages back to the OS (a blocking call of a few ms to a few hundred
    for a heap of gigabytes: run it in a thread; ctypes releases the GIL); False where unsupported."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
