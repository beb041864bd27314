"""Search analytics: each answered search recorded into bounded hourly Redis buckets, and the last 24 hours read back.

``recorded_search`` runs a search (``run_search``) and then records it: its surface, the caller's
tenant (``org:<org>``, else ``user:<sub>``), the normalized query text (trimmed, whitespace
collapsed, lowercased, at most ``MAX_QUERY_CHARS``), how many results it answered and how long it
took. The HTTP search routes and the MCP tools search through it; evaluations call ``run_search``
directly and are not recorded.

Recording never slows or fails a search: records wait in memory for ``FLUSH_DELAY_S`` and are
written together by a task of their own, in one pipelined round trip (one increment per key and
member, each key trimmed and its expiry renewed once), at most ``MAX_PENDING`` records wait (past
that a record is dropped), and a failed write is logged at most once a minute. With Redis down
searches answer as before. (One round trip a search cost the service more of its one interpreter
than any other step of an action search under load.)

Per surface and hour, under the deployment's prefix (two deployments on one Redis see only their own)::

    <p>:analytics:<surface>:<hour>:top    sorted set: ``<tenant>\\t<query>`` -> searches
    <p>:analytics:<surface>:<hour>:none   the same, for searches that answered no result
    <p>:analytics:<surface>:<hour>:slow   the same member -> the slowest latency (ms) seen

``<hour>`` is the Unix hour. Each set keeps its ``BUCKET_CAP`` highest members (the lowest go first)
and expires ``BUCKET_TTL_S`` after its last write, so the data stays bounded: at most
3 x ``BUCKET_CAP`` members per surface and hour, 25 hours. ``read_analytics`` merges the last
``WINDOW_HOURS`` buckets in one pipelined read.

``search_analytics`` off (``AGENTSEARCH_SEARCH_ANALYTICS=false``) writes nothing to Redis. The
process-local counters ``agentsearch_searches_total{surface}`` and
``agentsearch_searches_no_results_total{surface}`` on ``/metrics`` count every search either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from service.engine.surface import SearchAnswer, run_search
from service.errors import DeadlineExceeded

if TYPE_CHECKING:
    from service.auth import Caller
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 200
BUCKET_CAP = 1000
BUCKET_TTL_S = 25 * 3600
WINDOW_HOURS = 24
MAX_PENDING = 256
FLUSH_DELAY_S = 0.05
ERROR_LOG_INTERVAL_S = 60.0
CLOSE_WAIT_S = 2.0
KINDS = ("top", "none", "slow")
_STATE_KEY = "search-analytics"  # in ``Engine.state``; no surface can be named so

SEARCHES = Counter("agentsearch_searches", "Searches answered, per surface", ["surface"])
NO_RESULTS = Counter("agentsearch_searches_no_results", "Searches that answered no result, per surface", ["surface"])


def normalize_query(text: str) -> str:
    """The query as recorded: whitespace trimmed and collapsed, lowercased, at most ``MAX_QUERY_CHARS``."""
    return " ".join(text.split()).lower()[:MAX_QUERY_CHARS].rstrip()


def tenant_of(caller: Caller) -> str:
    """The tenant a caller's searches are recorded under: its org, else the user."""
    return caller.org_tenant or caller.user_tenant


def bucket_key(prefix: str, surface: str, hour: int, kind: str) -> str:
    return f"{prefix}:analytics:{surface}:{hour}:{kind}"


def member_of(tenant: str, query: str) -> str:
    return f"{tenant}\t{query}"


def split_member(member: str) -> tuple[str, str]:
    """(tenant, query) of a member; the query holds no tab (whitespace is collapsed), so the last one splits."""
    tenant, _, query = member.rpartition("\t")
    return tenant, query


def result_count(answer: SearchAnswer) -> int | None:
    """How many results an answer holds: ``results`` (code, actions) or ``structuredContent.results``
    (catalog); None for an answer without results (an error or deadline answer)."""
    body = answer.body
    results = body.get("results")
    if results is None and isinstance(body.get("structuredContent"), dict):
        results = body["structuredContent"].get("results")
    return len(results) if isinstance(results, list) else None


def _hour(now_s: float) -> int:
    return int(now_s // 3600)


@dataclass(frozen=True)
class _Record:
    surface: str
    member: str
    results: int | None
    latency_ms: float
    hour: int


class SearchAnalytics:
    """One engine's recorder: records written in batches in the background, bounded in number, their failures logged sparingly."""

    def __init__(self, redis: Any, prefix: str, *, enabled: bool) -> None:
        self.redis = redis
        self.prefix = prefix
        self.enabled = enabled
        self.dropped = 0
        """Records not written because ``MAX_PENDING`` were waiting."""
        self.failed = 0
        """Records whose write failed (Redis down, or slow past its socket timeout)."""
        self._waiting: list[_Record] = []
        self._flusher: asyncio.Task[None] | None = None
        self._last_logged = float("-inf")
        self._failed_since_log = 0

    def record(self, surface: str, tenant: str, query: str, results: int | None, latency_ms: float, *, now_s: float | None = None) -> None:
        """Count the search and, when enabled and the query has text, write it in the background."""
        SEARCHES.labels(surface).inc()
        if results == 0:
            NO_RESULTS.labels(surface).inc()
        text = normalize_query(query)
        if not self.enabled or not text:
            return
        if len(self._waiting) >= MAX_PENDING:
            self.dropped += 1
            return
        self._waiting.append(_Record(surface, member_of(tenant, text), results, latency_ms, _hour(time.time() if now_s is None else now_s)))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_DELAY_S)
        while self._waiting:
            batch, self._waiting = self._waiting, []
            await self._write(batch)

    async def _write(self, batch: Sequence[_Record]) -> None:
        increments: dict[str, dict[str, int]] = {}  # key -> member -> searches
        slowest: dict[str, dict[str, float]] = {}  # key -> member -> the slowest latency
        for record in batch:
            top = bucket_key(self.prefix, record.surface, record.hour, "top")
            members = increments.setdefault(top, {})
            members[record.member] = members.get(record.member, 0) + 1
            if record.results == 0:
                none = bucket_key(self.prefix, record.surface, record.hour, "none")
                members = increments.setdefault(none, {})
                members[record.member] = members.get(record.member, 0) + 1
            latencies = slowest.setdefault(bucket_key(self.prefix, record.surface, record.hour, "slow"), {})
            latencies[record.member] = max(latencies.get(record.member, 0.0), round(record.latency_ms, 1))
        pipe = self.redis.pipeline(transaction=False)
        for key, counts in increments.items():
            for member, count in counts.items():
                pipe.zincrby(key, count, member)
        for key, latencies in slowest.items():
            pipe.zadd(key, latencies, gt=True)
        for key in [*increments, *slowest]:
            pipe.zremrangebyrank(key, 0, -(BUCKET_CAP + 1))
            pipe.expire(key, BUCKET_TTL_S)
        try:
            await pipe.execute()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # whatever Redis raises, the searches have already answered
            self._failure(exc, len(batch))

    def _failure(self, exc: BaseException, records: int) -> None:
        self.failed += records
        self._failed_since_log += records
        now = time.monotonic()
        if now - self._last_logged >= ERROR_LOG_INTERVAL_S:
            log.warning(
                "search analytics could not write to Redis (%d failed since the last warning); searches answer as before",
                self._failed_since_log,
                extra={"error": type(exc).__name__, "failed": self._failed_since_log},
            )
            self._last_logged = now
            self._failed_since_log = 0

    async def settle(self) -> None:
        """Write every record waiting now and wait for the write (tests, and ``close``)."""
        while True:
            flusher = self._flusher
            if flusher is not None and not flusher.done():
                await asyncio.gather(flusher, return_exceptions=True)
            elif self._waiting:
                batch, self._waiting = self._waiting, []
                await self._write(batch)
            else:
                return

    async def close(self) -> None:
        """Write what waits for a moment (``CLOSE_WAIT_S``), then drop the rest."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.settle()
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        self.dropped += len(self._waiting)
        self._waiting = []


def analytics_of(engine: Engine) -> SearchAnalytics:
    """The engine's recorder, made on first use (it drains its writes when the engine closes)."""
    found = engine.state.get(_STATE_KEY)
    if isinstance(found, SearchAnalytics):
        return found
    made = SearchAnalytics(engine.redis, engine.settings.queue_prefix, enabled=engine.settings.search_analytics)
    engine.state[_STATE_KEY] = made

    async def close(_: Engine) -> None:
        await made.close()

    engine.closers.append(close)
    return made


async def recorded_search(engine: Engine, surface: str, caller: Caller, body: Any, *, target: str | None = None) -> SearchAnswer:
    """``run_search``, then the search recorded (an answer of status 400 or more, a rate-limit
    answer, is not a search; a search past its deadline is, with no result count)."""
    started = time.perf_counter()
    query = body.get("query") if isinstance(body, dict) else None
    text = query if isinstance(query, str) else ""
    try:
        answer = await run_search(engine, surface, caller, body, target=target)
    except DeadlineExceeded:
        analytics_of(engine).record(surface, tenant_of(caller), text, None, (time.perf_counter() - started) * 1000)
        raise
    if answer.status < 400:
        analytics_of(engine).record(surface, tenant_of(caller), text, result_count(answer), (time.perf_counter() - started) * 1000)
    return answer


# ---- reading -------------------------------------------------------------------------------------------


@dataclass
class QueryRow:
    """One query of a list: its text, the figure the list ranks by, and the tenants that searched it."""

    query: str
    value: float
    tenants: set[str] = field(default_factory=set)

    def as_dict(self, name: str, tenants_shown: int = 10) -> dict[str, Any]:
        value: float | int = round(self.value, 1) if name == "ms" else int(self.value)
        return {"query": self.query, name: value, "tenants": sorted(self.tenants)[:tenants_shown], "tenant_count": len(self.tenants)}


@dataclass
class SurfaceAnalytics:
    """One surface's last 24 hours: searches with text, and the three lists."""

    searches: int = 0
    no_result_searches: int = 0
    top: list[QueryRow] = field(default_factory=list)
    no_results: list[QueryRow] = field(default_factory=list)
    slowest: list[QueryRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "searches": self.searches,
            "no_result_searches": self.no_result_searches,
            "top": [row.as_dict("count") for row in self.top],
            "no_results": [row.as_dict("count") for row in self.no_results],
            "slowest": [row.as_dict("ms") for row in self.slowest],
        }


@dataclass
class AnalyticsReport:
    """The last ``WINDOW_HOURS`` hours per surface, for one tenant or all; ``tenants``: every tenant seen."""

    surfaces: dict[str, SurfaceAnalytics]
    tenants: list[str]
    tenant: str | None
    enabled: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_hours": WINDOW_HOURS,
            "recording": self.enabled,
            "tenant": self.tenant,
            "tenants": self.tenants,
            "surfaces": {name: surface.as_dict() for name, surface in self.surfaces.items()},
        }


async def read_analytics(
    engine: Engine, surfaces: Sequence[str], *, tenant: str | None = None, limit: int = 20, now_s: float | None = None
) -> AnalyticsReport:
    """The last ``WINDOW_HOURS`` hourly buckets of each surface merged (counts summed, latency the
    maximum), the rows of ``tenant`` alone when given; each list its ``limit`` first."""
    hour = _hour(time.time() if now_s is None else now_s)
    hours = range(hour - WINDOW_HOURS + 1, hour + 1)
    prefix = engine.settings.queue_prefix
    pipe = engine.redis.pipeline(transaction=False)
    order = [(surface, kind) for surface in surfaces for kind in KINDS for _ in hours]
    for surface in surfaces:
        for kind in KINDS:
            for h in hours:
                pipe.zrange(bucket_key(prefix, surface, h, kind), 0, -1, withscores=True)
    replies = await pipe.execute()
    merged: dict[tuple[str, str], dict[str, QueryRow]] = {(s, k): {} for s in surfaces for k in KINDS}
    seen_tenants: set[str] = set()
    for (surface, kind), members in zip(order, replies, strict=True):
        rows = merged[(surface, kind)]
        for raw, score in members:
            member_tenant, query = split_member(raw.decode() if isinstance(raw, bytes) else str(raw))
            seen_tenants.add(member_tenant)
            if tenant is not None and member_tenant != tenant:
                continue
            row = rows.setdefault(query, QueryRow(query, 0.0))
            row.value = max(row.value, float(score)) if kind == "slow" else row.value + float(score)
            row.tenants.add(member_tenant)
    report: dict[str, SurfaceAnalytics] = {}
    for surface in surfaces:
        top, none, slow = (sorted(merged[(surface, kind)].values(), key=lambda r: (-r.value, r.query)) for kind in KINDS)
        report[surface] = SurfaceAnalytics(
            searches=int(sum(row.value for row in top)),
            no_result_searches=int(sum(row.value for row in none)),
            top=top[:limit],
            no_results=none[:limit],
            slowest=slow[:limit],
        )
    return AnalyticsReport(surfaces=report, tenants=sorted(seen_tenants), tenant=tenant, enabled=engine.settings.search_analytics)
