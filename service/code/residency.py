"""Which open workspaces are in use, when each was last used, and the task that closes those left idle.

A workspace's chunk cache, trigram reader and watcher are opened by its first search or index
run and closed after ``workspace_idle_close_s`` without one. A use is the task that asked for the
workspace (a request, a job, a command): the workspace counts as in use until that task ends, and
its idle time starts then, so nothing is closed under a search that holds it. Closing is one step
on the event loop (no await between the check and the close): a search that comes after it opens
the workspace again, one that came before holds it open.

Nothing is watched or opened before a use, so after a restart every workspace stays closed until
it is searched or indexed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# The closing task looks this often (at most), and at least twice per idle period.
MAX_TICK_S = 30.0
MIN_TICK_S = 0.05


@dataclass
class _Uses:
    """The tasks holding one workspace now, and when (monotonic and wall clock) it was last let go."""

    tasks: set[asyncio.Task[object]] = field(default_factory=set)
    released: float = field(default_factory=time.monotonic)
    released_at: float = field(default_factory=time.time)


class Residency:
    """Tracks the uses of open workspaces; ``close_idle`` is asked to close one idle past the limit
    (it answers False when the workspace is busy otherwise, e.g. applying a watched change)."""

    def __init__(self, idle_close_s: float, close_idle: Callable[[str], bool]) -> None:
        self.idle_close_s = idle_close_s
        self._close_idle = close_idle
        self._uses: dict[str, _Uses] = {}
        # When each workspace was last used (wall clock), kept after it closes.
        self._last_used: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def use(self, workspace_id: str) -> None:
        """The current task uses the workspace: it stays open until the task ends and ``idle_close_s`` after."""
        uses = self._uses.setdefault(workspace_id, _Uses())
        self._last_used[workspace_id] = time.time()
        task = asyncio.current_task()
        if task is not None and task not in uses.tasks:
            uses.tasks.add(task)
            task.add_done_callback(lambda done: self._release(workspace_id, uses, done))
        else:
            uses.released, uses.released_at = time.monotonic(), time.time()
        self._ensure_running()

    def _release(self, workspace_id: str, uses: _Uses, task: asyncio.Task[object]) -> None:
        uses.tasks.discard(task)
        uses.released, uses.released_at = time.monotonic(), time.time()
        self._last_used[workspace_id] = max(self._last_used.get(workspace_id, 0.0), uses.released_at)

    def in_use(self, workspace_id: str) -> bool:
        uses = self._uses.get(workspace_id)
        return uses is not None and any(not task.done() for task in uses.tasks)

    def last_used(self, workspace_id: str) -> float | None:
        """When the workspace was last used in this process (epoch seconds); None: not since it started."""
        return self._last_used.get(workspace_id)

    def forget(self, workspace_id: str, *, history: bool = False) -> None:
        """The workspace closed (``history``: it was deleted, its last use goes too)."""
        self._uses.pop(workspace_id, None)
        if history:
            self._last_used.pop(workspace_id, None)

    def close(self) -> None:
        """Stop the closing task (the owner closes what is open)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self._uses.clear()

    # ---- the closing task ------------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="close idle workspaces")

    async def _run(self) -> None:
        tick = min(max(self.idle_close_s / 2, MIN_TICK_S), MAX_TICK_S)
        while self._uses:
            await asyncio.sleep(tick)
            self.close_idle()

    def close_idle(self) -> list[str]:
        """Close every workspace idle for ``idle_close_s`` and used by no task; the ids closed."""
        now = time.monotonic()
        closed = []
        for workspace_id, uses in list(self._uses.items()):
            if self.in_use(workspace_id) or now - uses.released < self.idle_close_s:
                continue
            try:
                done = self._close_idle(workspace_id)
            except Exception:
                log.exception("closing an idle workspace failed", extra={"workspace": workspace_id})
                done = False
            if done:
                self._uses.pop(workspace_id, None)
                closed.append(workspace_id)
                log.info("idle workspace closed", extra={"workspace": workspace_id, "idle_s": round(now - uses.released, 1)})
        return closed


__all__ = ["Residency"]
