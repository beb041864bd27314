"""The warm regex matching processes: a small pool of ``rematch.py`` processes, reused from one
regex search to the next, killed at a search's deadline and replaced.

Starting a Python process costs about 20 ms, more than most regex searches take once it runs,
so a process serves one request after another. A pool starts its processes lazily (none until
the first regex search), lends each to one search at a time, and holds at most ``size`` of them,
so at most ``size`` patterns match at once: a burst of hostile regexes queues behind itself (each
still stops at its own deadline, time queued included) and leaves the other cores to the rest. A
process that runs past its search's deadline (a catastrophic pattern), whose search is cancelled
mid-request, or that answers out of protocol is killed and reaped at once; the next search that
needs one starts a fresh one. A request over many files (``SPLIT_MIN_FILES``) that finds
every process of the pool idle is matched by two at once, the files dealt out alternately, and
answered as one (:func:`merged`): the same lines, in half the time, as the pool was idle anyway.
``close`` kills every idle process and reaps it; a process lent out
is killed when it comes back. A process idle for ``rematch.IDLE_EXIT_S`` ends itself (a pool
dropped without ``close`` leaves nothing running for long) and is reaped by the next start; every
process left is killed at interpreter exit.

Each engine's ``Workspaces`` holds one pool (closed with them); callers without an engine share
a default pool. Processes are plain ``subprocess.Popen`` children read through the running event
loop (``add_reader``), not asyncio transports, so a pool is not tied to one event loop. Use a
pool from one thread at a time (the event loop's).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.code.prefilter import scan_plan

POOL_SIZE = 2
SPLIT_MIN_FILES = 256  # a request over this many files, arriving with the pool idle, is matched by two processes
ENDED_EARLY = "the matching process ended early"
MATCHER_LINE_BYTES = 32 << 20  # one file's answer line (at most limit + 1 lines of 4 KiB, JSON-escaped)
ALARM_GRACE_S = 5  # the process ends itself this long after its deadline, should nobody kill it
REAP_WAIT_S = 2.0  # how long a kill waits for the process to end before it is reaped later
_SCRIPT = Path(__file__).with_name("rematch.py")  # run as a script, never imported here
_READ_BYTES = 1 << 16


def _site_args() -> list[str]:
    """``--site DIR`` where the optional ``re2`` module is installed: the process runs without site
    packages, and finds its linear-time screen there (``rematch.LinearScreen``)."""
    spec = importlib.util.find_spec("re2")
    if spec is None or spec.origin is None:
        return []
    return ["--site", str(Path(spec.origin).parent.parent)]


_SITE_ARGS = _site_args()


@dataclass
class MatchRun:
    """What a matching process answered: per file index its lines, and how far it got."""

    found: list[tuple[int, list[tuple[int, str]]]] = field(default_factory=list)
    scanned: int = 0
    ruled_out: int = 0  # of the scanned files, those the linear screen passed over (told at the end: 0 if cut short)
    ruled: list[int] = field(default_factory=list)  # which, when the request asked (``report_ruled``)
    timed_out: bool = False
    error: str | None = None


class _ProtocolError(Exception):
    """The process answered something that is not the protocol, or too much of it."""


class _Matcher:
    """One ``rematch.py`` process and the unread part of its output."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_SCRIPT), *_SITE_ARGS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            close_fds=True,
        )
        _LIVE.add(self)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._buffer = bytearray()
        self.requests = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        """Whether the process still runs (one that ended is reaped here)."""
        if self.process.poll() is None:
            return True
        self._forget()
        return False

    async def converse(self, request: bytes, run: MatchRun) -> None:
        """Send one request and read its answer into ``run`` (until ``done``, an error or the end)."""
        self.requests += 1
        await self._write(request)
        while True:
            line = await self._readline()
            if not line:
                run.error = ENDED_EARLY
                return
            try:
                if self._take(json.loads(line), run):
                    return
            except (ValueError, KeyError, TypeError):
                raise _ProtocolError("the matching process answered outside its protocol") from None

    @staticmethod
    def _take(message: dict[str, Any], run: MatchRun) -> bool:
        """Add one answer line to ``run``; True when it ends the request."""
        if message.get("done"):
            run.scanned = max(run.scanned, int(message.get("scanned", run.scanned)))
            run.ruled_out = int(message.get("ruled_out", 0))
            run.ruled = [int(index) for index in message.get("ruled", ())]
            return True
        if "error" in message:
            run.error = str(message["error"])
            return True
        index = int(message["i"])
        run.scanned = max(run.scanned, index + 1)
        if message.get("lines"):
            run.found.append((index, [(int(number), str(text)) for number, text in message["lines"]]))
        return False

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._in, view)
            except BlockingIOError:
                await _ready(self._in, writable=True)
                continue
            view = view[written:]

    async def _readline(self) -> bytes:
        """The next line of output (with its newline), or b"" at the end of it."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            searched = len(self._buffer)
            if searched > MATCHER_LINE_BYTES:
                raise _ProtocolError("the matching process answered a line longer than allowed")
            try:
                data = os.read(self._out, _READ_BYTES)
            except BlockingIOError:
                await _ready(self._out, writable=False)
                continue
            if not data:
                return b""
            self._buffer += data

    def kill(self) -> bool:
        """Kill and reap the process; False when it did not end in time (``sweep`` reaps it later)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        try:
            self.process.wait(timeout=REAP_WAIT_S)
        except subprocess.TimeoutExpired:
            return False
        self._forget()
        return True

    def _forget(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        _LIVE.discard(self)


# Every matching process started and not yet reaped, whichever pool started it: reaped by
# ``sweep`` once ended, killed at interpreter exit. A pool dropped without ``close`` leaves its
# idle processes here (each ends itself after ``rematch.IDLE_EXIT_S`` without a request).
_LIVE: set[_Matcher] = set()


def sweep() -> None:
    """Reap every matching process that has ended (killed, or ended itself while idle)."""
    for matcher in list(_LIVE):
        if matcher.process.poll() is not None:
            matcher._forget()


async def _ready(descriptor: int, *, writable: bool) -> None:
    """Wait until ``descriptor`` can be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(descriptor, wake)
    else:
        loop.add_reader(descriptor, wake)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(descriptor)
        else:
            loop.remove_reader(descriptor)


class MatcherPool:
    """At most ``size`` warm matching processes, lent to one search at a time."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self.started = 0  # processes started so far (reuse keeps it low)
        self._idle: list[_Matcher] = []
        self._lent: set[_Matcher] = set()
        self._slots_taken = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self.closed = False

    @property
    def idle_pids(self) -> list[int]:
        return [matcher.pid for matcher in self._idle]

    @property
    def pids(self) -> list[int]:
        """Every process of the pool not yet reaped: idle and lent out."""
        return [matcher.pid for matcher in (*self._idle, *self._lent) if matcher in _LIVE]

    async def run(self, request: dict[str, Any], deadline: float) -> MatchRun:
        """Run one request (``rematch.py``'s protocol) in a process of the pool; past ``deadline``
        (time waiting for a process included) the process is killed and the files it answered
        stay answered. A request without a ``plan`` gets its pattern's (``prefilter.scan_plan``)."""
        if "plan" not in request:
            plan = scan_plan(str(request["pattern"]), int(request["flags"]))
            request = dict(request, plan=None if plan is None else plan.as_dict())
        files = request["files"]
        if len(files) >= SPLIT_MIN_FILES and self.size >= 2 and self._slots_taken == 0 and not self._waiting:
            self._slots_taken += 2
            try:
                halves = [dict(request, files=files[part::2], report_ruled=True) for part in range(2)]
                return merged(await asyncio.gather(*(self._served(half, deadline) for half in halves)), len(files))
            finally:
                self._release()
                self._release()
        if not await self._acquire(deadline):
            return MatchRun(timed_out=True)
        try:
            return await self._served(request, deadline)
        finally:
            self._release()

    async def _served(self, request: dict[str, Any], deadline: float) -> MatchRun:
        """One request in one process, the caller holding a slot for it."""
        run = MatchRun(error="the matching processes were shut down") if self.closed else MatchRun()
        for attempt in range(2):
            if self.closed or deadline <= time.monotonic():
                run.timed_out = not self.closed
                break
            matcher = self._take(fresh=attempt > 0)
            reused = matcher.requests > 0
            run = await self._attempt(matcher, request, deadline)
            # A reused process that ended before answering (it ended itself while idle, just as
            # this request came) is no fault of the request: once more, in a fresh process.
            if not (reused and run.error == ENDED_EARLY and run.scanned == 0):
                break
        return run

    def _take(self, *, fresh: bool) -> _Matcher:
        """An idle process that still runs, or a new one (started lazily, here)."""
        while self._idle and not fresh:
            matcher = self._idle.pop()
            if matcher.alive():
                self._lent.add(matcher)
                return matcher
        sweep()
        matcher = _Matcher()
        self.started += 1
        self._lent.add(matcher)
        return matcher

    async def _attempt(self, matcher: _Matcher, request: dict[str, Any], deadline: float) -> MatchRun:
        """One conversation; the process goes back to the pool only after a clean answer."""
        run = MatchRun()
        finished = False
        remaining = deadline - time.monotonic()
        try:
            message = dict(request, alarm_s=math.ceil(max(remaining, 0.0)) + ALARM_GRACE_S)
            payload = json.dumps(message).encode() + b"\n"
            await asyncio.wait_for(matcher.converse(payload, run), timeout=max(remaining, 0.0))
            finished = run.error is None
        except TimeoutError:
            run.timed_out = True
        except BrokenPipeError:
            run.error = ENDED_EARLY
        except (_ProtocolError, OSError) as exc:
            run.error = str(exc)
        finally:
            self._lent.discard(matcher)
            if finished and not self.closed and matcher.alive():
                self._idle.append(matcher)
            else:
                matcher.kill()  # timed out, cancelled, failed or shut down: never reused
        return run

    async def _acquire(self, deadline: float) -> bool:
        """Take a slot (True), or False when none came free before ``deadline``."""
        if self._slots_taken < self.size and not self._waiting:
            self._slots_taken += 1
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await asyncio.wait_for(turn, timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed a slot just as the search was cancelled: pass it on
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(turn)
        return True

    def _release(self) -> None:
        """Hand the slot to the next search waiting, or give it back."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes on
                return
        self._slots_taken -= 1

    def close(self) -> None:
        """Kill and reap every idle process; one lent out now is killed when it comes back, and
        searches waiting for one end without matching."""
        self.closed = True
        idle, self._idle = self._idle, []
        for matcher in idle:
            matcher.kill()
        sweep()
        for turn in self._waiting:
            if not turn.done():
                turn.set_result(None)  # each wakes, finds the pool shut and passes the slot on


def merged(halves: Sequence[MatchRun], total: int) -> MatchRun:
    """Two processes' answers to the alternate files of one request (``files[0::2]`` and
    ``files[1::2]``) as the answer of one process to all ``total`` of them: files in order, and
    only as far as both got: a half that stopped early leaves the files after its last one
    unanswered, whatever the other found there (its last file itself counts when it was cut at the
    match limit, as a single process's would, and not when the deadline cut it)."""
    answered = total
    for part, half in enumerate(halves):
        if half.scanned < len(range(part, total, 2)):
            at_limit = not half.timed_out and half.error is None and half.scanned > 0
            answered = min(answered, part + 2 * half.scanned - (1 if at_limit else 0))
    found = sorted((part + 2 * index, lines) for part, half in enumerate(halves) for index, lines in half.found)
    ruled = sorted(part + 2 * index for part, half in enumerate(halves) for index in half.ruled)
    return MatchRun(
        found=[(index, lines) for index, lines in found if index < answered],
        scanned=answered,
        ruled_out=sum(1 for index in ruled if index < answered),
        ruled=[index for index in ruled if index < answered],
        timed_out=any(half.timed_out for half in halves),
        error=next((half.error for half in halves if half.error is not None), None),
    )


_default: MatcherPool | None = None


def default_pool() -> MatcherPool:
    """The pool of callers without an engine of their own."""
    global _default
    if _default is None or _default.closed:
        _default = MatcherPool()
    return _default


@atexit.register
def _kill_all() -> None:
    """No matching process outlives the interpreter that started it."""
    for matcher in list(_LIVE):
        matcher.kill()
