"""The embedded store's directory lock: an exclusive flock(2) on ``<root>/.lock``, which holds the owner's pid.

A second process's ``load()`` of a qdrant-edge shard breaks the owner's next ``flush()``, so the
store takes this lock before it touches any shard, and a second process is refused with
``StoreLockedError`` naming the owner.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .base import StoreError, StoreLockedError

LOCK_FILE = ".lock"


def lock_directory(root: Path) -> int:
    """Take ``root/.lock`` (flock, exclusive, non-blocking) and write our pid into it; returns its descriptor."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        # No O_TRUNC: on failure the file must still name the owner.
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file of the index directory {root}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        if owner == str(os.getpid()):
            raise StoreLockedError(
                f"the index directory {root} is already open in this process (pid {owner})"
            ) from None
        raise StoreLockedError(
            f"the index directory {root} is in use by another agentsearch process (pid {owner}); "
            "stop that process or give this one another data directory"
        ) from None
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot lock the index directory {root}: {exc}") from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot write the lock file of the index directory {root}: {exc}") from exc
    return fd


def unlock_directory(fd: int) -> None:
    """Release the lock taken by ``lock_directory`` and close its descriptor."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


__all__ = ["LOCK_FILE", "lock_directory", "unlock_directory"]
