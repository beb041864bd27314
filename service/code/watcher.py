"""Watching a workspace root: the files that changed under it, delivered to the event loop in debounced batches.

One ``RootWatcher`` per open workspace. Its thread holds the operating system's watch of the
tree (on Linux ``inotify.TreeWatch``, which asks for changes alone, not the opens every read of a
file causes, and skips pruned directories; elsewhere ``watchfiles``' notifier) and waits for
changes; a batch is handed
over once the tree has been quiet for ``STEP_MS`` (at most ``DEBOUNCE_MS`` after its first change),
so a save that writes a file in several steps, or a checkout that touches a thousand, arrives as
one batch. Batches that arrive while the previous one is being applied are merged.

Paths are handed over relative to the root (``/``-separated), without those nothing searchable can
be under: pruned directory names (``.git``, ``node_modules``, ``vendor``, ``skip_dirs``) and the
service's own directories (``ignored_dirs``: a data directory or cache inside the root). The rest
of the walker's rules (``.gitignore``, size, binary) are applied by whoever reads the batch.

A root that cannot be watched (the watch limit reached, a file system that reports no changes,
the root deleted) ends the watch: ``on_lost`` is told why, once, and the workspace falls back to
revalidating by mtime on search. Changes made before the watch was ``ready`` are the initial
revalidation's to find.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from watchfiles._rust_notify import RustNotify

from service.code.inotify import TreeWatch, WatchError

log = logging.getLogger(__name__)

# Quiet time that closes a batch, and the longest a batch waits for the tree to go quiet.
STEP_MS = 50
DEBOUNCE_MS = 800
# How often the thread looks up from waiting: to see the root still exists, and to stop.
TIMEOUT_MS = 1_000
POLL_DELAY_MS = 300

ChangeHandler = Callable[[set[str]], Awaitable[None]]
LossHandler = Callable[[str], None]


class RootWatcher:
    """Watches ``root`` in a thread and calls ``on_changes`` on the loop with the relative paths that changed."""

    def __init__(
        self,
        root: Path,
        on_changes: ChangeHandler,
        on_lost: LossHandler,
        *,
        pruned_names: Iterable[str] = (),
        ignored_dirs: Iterable[Path] = (),
    ) -> None:
        self.root = root
        self._on_changes = on_changes
        self._on_lost = on_lost
        self._pruned = frozenset(pruned_names)
        self._ignored = tuple(os.path.realpath(d).rstrip(os.sep) + os.sep for d in ignored_dirs)
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[set[str] | str] = asyncio.Queue()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        # Monotonic time the watch was in place; None until then (and forever if it never is).
        self.ready_at: float | None = None
        self.lost: str | None = None
        self._applying = False

    @property
    def watching(self) -> bool:
        """Whether the watch is in place and has not been lost or stopped."""
        return self.ready_at is not None and self.lost is None and not self._stop.is_set()

    @property
    def busy(self) -> bool:
        """Whether a batch is being applied or waits to be."""
        return self._applying or not self._inbox.empty()

    def start(self) -> None:
        """Start the thread and the loop-side reader (call on the event loop)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._watch, name=f"watch {self.root}", daemon=True)
        self._thread.start()
        self._task = asyncio.create_task(self._read(), name=f"watch {self.root}")

    def stop(self) -> None:
        """Stop watching: the thread ends within ``STEP_MS``, a batch not yet applied is dropped."""
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def stopped(self) -> None:
        """Wait for the loop-side reader to end (after ``stop``)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # ---- the thread ----------------------------------------------------------------------------

    def _watch(self) -> None:
        try:
            source, wait = self._inotify() if sys.platform.startswith("linux") else self._notify()
        except Exception as exc:  # the watch limit, a root gone or unreadable: no watch at all
            self._post(f"the root cannot be watched ({exc})")
            return
        try:
            with source:
                self._post("")  # ready
                while not self._stop.is_set():
                    changed = wait()
                    if changed is None:  # stopped
                        return
                    if not os.path.isdir(self.root):
                        self._post("the root is gone")
                        return
                    if changed and not self._stop.is_set():
                        self._post(changed)
        except WatchError as exc:  # says why: the root gone, the queue overflowed, the watch limit
            self._post(str(exc))
        except Exception as exc:  # whatever ends the thread ends the watch, said: never a silent one
            log.exception("the workspace watch failed", extra={"root": str(self.root)})
            self._post(f"the watch failed ({exc})")

    def _inotify(self) -> tuple[contextlib.AbstractContextManager[Any], Callable[[], set[str] | None]]:
        """On Linux: the service's own watch (``inotify.TreeWatch``), and its wait for a batch."""
        tree = TreeWatch(str(self.root), self._skipped)
        return tree, lambda: tree.changes(DEBOUNCE_MS, STEP_MS, TIMEOUT_MS, self._stop)

    def _notify(self) -> tuple[contextlib.AbstractContextManager[Any], Callable[[], set[str] | None]]:
        """Elsewhere: the platform's own notifier, through ``watchfiles``, and its wait for a batch."""
        notify = RustNotify([str(self.root)], False, False, POLL_DELAY_MS, True, False)

        def wait() -> set[str] | None:
            raw = notify.watch(DEBOUNCE_MS, STEP_MS, TIMEOUT_MS, self._stop)
            if raw == "stop":
                return None
            return {path for _change, path in raw} if isinstance(raw, set) else set()

        return notify, wait

    def _skipped(self, directory: str) -> bool:
        """Directories nothing searchable can be under: pruned names, the service's own directories."""
        return os.path.basename(directory) in self._pruned or (directory + os.sep).startswith(self._ignored)

    def _post(self, item: set[str] | str) -> None:
        loop = self._loop
        if loop is None or self._stop.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening any more
            loop.call_soon_threadsafe(self._inbox.put_nowait, item)

    # ---- the loop side -----------------------------------------------------------------------

    async def _read(self) -> None:
        while True:
            item = await self._inbox.get()
            if isinstance(item, str):
                if not item:
                    self.ready_at = time.monotonic()
                    continue
                self._lose(item)
                return
            while not self._inbox.empty():  # merge what arrived meanwhile
                more = self._inbox.get_nowait()
                if isinstance(more, str):
                    if more:
                        self._lose(more)
                        return
                    continue
                item |= more
            paths = self._relative(item)
            if not paths:
                continue
            self._applying = True
            try:
                await self._on_changes(paths)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying watched changes failed; the next revalidation picks them up", extra={"root": str(self.root)})
            finally:
                self._applying = False

    def _lose(self, why: str) -> None:
        self.lost = why
        self._stop.set()
        log.warning("workspace root no longer watched; revalidating by mtime on search", extra={"root": str(self.root), "reason": why})
        self._on_lost(why)

    def _relative(self, paths: set[str]) -> set[str]:
        """The changed paths relative to the root, less those nothing searchable can be under."""
        prefix = str(self.root).rstrip(os.sep) + os.sep
        found: set[str] = set()
        for path in paths:
            if not path.startswith(prefix) or path.startswith(self._ignored):
                continue
            rel = path[len(prefix) :].replace(os.sep, "/")
            parts = rel.split("/")
            if any(part in self._pruned for part in parts[:-1]) and rel != ".git/info/exclude":
                continue
            found.add(rel)
        return found


__all__ = ["RootWatcher"]
