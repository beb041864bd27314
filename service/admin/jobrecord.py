"""What the dashboard shows of a job: its status, times, tries, result or error, parsed from arq's keys."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import orjson

from service.engine.queue import deserialize

# The list view shows this much of a result or an error; the detail view shows all of it.
SHORT_TEXT = 300
# arq serializes a job as {"t": try, "f": function, ...} in that order: the function name sits in
# the first bytes, so a GETRANGE of this many bytes names the job without reading its arguments.
FUNCTION_PEEK_BYTES = 160
_FUNCTION_RE = re.compile(rb'"f":"((?:[^"\\]|\\.)*)"')


class JobStatus(StrEnum):
    """A job's state as arq keeps it (Sidekiq's busy / enqueued / scheduled / processed / dead)."""

    QUEUED = "queued"
    DEFERRED = "deferred"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATUSES


# arq finishes a job with a CancelledError only when it was aborted (other cancellations retry it).
ABORTED = "aborted"
ACTIVE_STATUSES = (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.IN_PROGRESS)
FINISHED_STATUSES = (JobStatus.COMPLETE, JobStatus.FAILED)


@dataclass(frozen=True)
class JobTarget:
    """What a job works on: its surface, the tenants whose records it touches and a readable target."""

    surface: str | None = None
    tenants: tuple[str, ...] = ()
    target: str | None = None


@dataclass(frozen=True)
class JobRow:
    """One job of the table (and, with ``args``, of the detail page)."""

    id: str
    queue: str
    function: str
    status: JobStatus
    tries: int
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    enqueued_ms: int | None = None
    due_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    result: Any = None
    error: str | None = None
    abort_requested: bool = False
    retry_of: str | None = None
    retried_as: str | None = None
    target: JobTarget = field(default_factory=JobTarget)
    traceback: str | None = None  # a failed job's stack trace, as its worker recorded it (detail view only)

    @property
    def sort_ms(self) -> int:
        """Newest first by the job's latest time: its due time while it waits, its finish time once done."""
        return self.finished_ms or self.due_ms or self.enqueued_ms or 0

    @property
    def duration_ms(self) -> int | None:
        if self.started_ms is None or self.finished_ms is None:
            return None
        return max(0, self.finished_ms - self.started_ms)

    @property
    def aborted(self) -> bool:
        return self.status is JobStatus.FAILED and (self.error or "").startswith(ABORTED)

    def with_target(self, target: JobTarget) -> JobRow:
        return replace(self, target=target)

    def as_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The JSON of the table row; ``full`` adds the arguments and the whole result."""
        result = self.result if full else _short(self.result)
        body: dict[str, Any] = {
            "id": self.id,
            "queue": self.queue,
            "function": self.function,
            "status": self.status.value,
            "tries": self.tries,
            "surface": self.target.surface,
            "tenants": list(self.target.tenants),
            "target": self.target.target,
            "enqueued_ms": self.enqueued_ms,
            "due_ms": self.due_ms,
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "duration_ms": self.duration_ms,
            "result": result,
            "error": self.error if full or self.error is None else self.error[:SHORT_TEXT],
            "aborted": self.aborted,
            "abort_requested": self.abort_requested,
            "retry_of": self.retry_of,
            "retried_as": self.retried_as,
        }
        if full:
            body["args"] = list(self.args)
            body["kwargs"] = self.kwargs
            body["traceback"] = self.traceback
        return body


def _short(value: Any) -> Any:
    """A result small enough for a table cell: scalars and small structures as they are, the rest cut as JSON text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= SHORT_TEXT else value[:SHORT_TEXT] + "…"
    text = orjson.dumps(value, default=str).decode()
    return value if len(text) <= SHORT_TEXT else text[:SHORT_TEXT] + "…"


def function_of_peek(head: bytes | None) -> str | None:
    """The function name in the first bytes of a serialized job (``FUNCTION_PEEK_BYTES``); None if cut."""
    if not head:
        return None
    match = _FUNCTION_RE.search(head)
    return match.group(1).decode(errors="replace") if match else None


def active_row(job_id: str, queue: str, data: bytes | None, *, score: int, now_ms: int, running: bool, tries: int, abort_requested: bool, running_since_ms: int | None) -> JobRow | None:
    """A queued, deferred or running job from its ``arq:job`` key; None when it vanished meanwhile."""
    if data is None:
        return None
    try:
        job = deserialize(data)
    except ValueError:
        job = {"f": "<unreadable>", "a": [], "k": {}}
    if running:
        status = JobStatus.IN_PROGRESS
    elif score > now_ms:
        status = JobStatus.DEFERRED
    else:
        status = JobStatus.QUEUED
    return JobRow(
        id=job_id,
        queue=queue,
        function=str(job.get("f")),
        status=status,
        tries=max(tries, int(job.get("t") or 0)),
        args=tuple(job.get("a") or ()),
        kwargs=dict(job.get("k") or {}),
        enqueued_ms=_int(job.get("et")),
        due_ms=score,
        started_ms=running_since_ms if running else None,
        abort_requested=abort_requested,
    )


def finished_row(job_id: str, data: bytes | None, *, queue_short: dict[str, str]) -> JobRow | None:
    """A finished job from its ``arq:result`` key; None when the result expired."""
    if data is None:
        return None
    try:
        result = deserialize(data)
    except ValueError:
        return None
    success = bool(result.get("s"))
    return JobRow(
        id=job_id,
        queue=queue_short.get(str(result.get("q")), str(result.get("q"))),
        function=str(result.get("f")),
        status=JobStatus.COMPLETE if success else JobStatus.FAILED,
        tries=int(result.get("t") or 1),
        args=tuple(result.get("a") or ()),
        kwargs=dict(result.get("k") or {}),
        enqueued_ms=_int(result.get("et")),
        started_ms=_int(result.get("st")),
        finished_ms=_int(result.get("ft")),
        result=result.get("r") if success else None,
        error=None if success else _error_text(result.get("r")),
    )


def _error_text(value: Any) -> str:
    """The failure as the worker stored it (``Type: message``); arq stores an aborted job's as a CancelledError."""
    text = value if isinstance(value, str) else repr(value)
    if text.startswith("CancelledError"):
        return f"{ABORTED} (CancelledError)"
    return text or "failed"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None
