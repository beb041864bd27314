"""Abuse rate limits kept in Redis: per plan for the three search surfaces (per minute and per
day), per user for workspace registrations (per minute).

Catalog search has the published ceilings (free 80/min and 1,000/day, standard 160/5,000, pro
200/10,000, max 240/25,000); code search and action search have their own buckets, with per-plan
numbers from settings. An MCP tool call counts in the bucket of its HTTP surface. Workspace
registrations that change something have one more bucket, a minute window of
``workspace_registrations_per_minute`` whatever the plan, enforced even with the search limits
turned off (``rate_limits_enabled``).

Each window is a sliding window kept as a few per-slot counters (a hash per caller, surface and
window: slot -> "count:newest call in ms"). One Lua script reads both windows of a surface and
records the call only when both allow it, so a refused call costs nothing and two front ends
cannot both take the last call. A slot counts while its newest call is inside the window, so no
span of one window's length ever holds more than the limit (there is no boundary at which a
second burst opens), and a slot frees the instant its newest call leaves: ``Retry-After`` is that
instant, never more than the window. Slots keep memory to at most 60 + 96 small fields per caller
and surface (1 s slots for the minute, 15 min for the day) where an exact log would hold one entry
per call (25,000 a day for the max plan). The clock is Redis's own, read inside the script, so
front ends with skewed clocks, and calls overtaking each other on the way to Redis, share one
timeline.

Every bucket lives under the deployment's prefix, so the front ends of one deployment share it and
another deployment on the same Redis does not. When Redis is unreachable no bucket is enforced
(searches and registrations keep answering) and a warning is logged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.auth import Caller, Plan
from service.errors import RateLimited

if TYPE_CHECKING:
    from service.settings import Settings

log = logging.getLogger(__name__)

PlanLimits = Mapping[Plan, tuple[int, int]]

# Catalog search's published ceilings: (per minute, per day).
PLAN_LIMITS: dict[Plan, tuple[int, int]] = {
    Plan.FREE: (80, 1_000),
    Plan.STANDARD: (160, 5_000),
    Plan.PRO: (200, 10_000),
    Plan.MAX: (240, 25_000),
}


class Surface(StrEnum):
    """A search surface with its own bucket; the value names it in keys and in ``rateLimit``."""

    CATALOG = "catalog"
    CODE = "code"
    ACTIONS = "actions"

    @property
    def noun(self) -> str:
        return {"catalog": "catalog searches", "code": "code searches", "actions": "action searches"}[self.value]


@dataclass(frozen=True)
class Window:
    name: str
    seconds: int
    slot_seconds: int


MINUTE, DAY = Window("minute", 60, 1), Window("day", 86_400, 900)
WINDOWS = (MINUTE, DAY)
# The key segment of the workspace-registration bucket (a search surface's is its value).
REGISTRATIONS = "registration"

# KEYS: one hash per window. ARGV: now (ms; empty: Redis's own clock), then per window its length
# (ms), slot width (ms) and limit. A slot's field is its index (now // slot width); its value "count:newest" (ms).
# Returns {1} when the call is allowed and recorded, else {0, window number (1-based), wait ms}
# for the window whose wait is longest: one more call needs every window to allow it.
_CHECK_AND_RECORD = """
local now = tonumber(ARGV[1])
if now == nil then
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local worst_window, worst_wait = 0, 0
local slots = {}
for w = 1, #KEYS do
  local length = tonumber(ARGV[3 * w - 1])
  local width = tonumber(ARGV[3 * w])
  local limit = tonumber(ARGV[3 * w + 1])
  local flat = redis.call('HGETALL', KEYS[w])
  local live, used, newest_all = {}, 0, now
  for i = 1, #flat, 2 do
    local count, newest = string.match(flat[i + 1], '^(%d+):(%d+)$')
    count, newest = tonumber(count), tonumber(newest)
    if count == nil or newest + length <= now then
      redis.call('HDEL', KEYS[w], flat[i])
    else
      live[#live + 1] = {tonumber(flat[i]), count, newest, flat[i + 1]}
      used = used + count
      if newest > newest_all then newest_all = newest end
    end
  end
  if used >= limit then
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local freed, wait = 0, 0
    for _, slot in ipairs(live) do
      freed = freed + slot[2]
      wait = slot[3] + length - now
      if used - freed <= limit - 1 then break end
    end
    if wait > worst_wait then worst_window, worst_wait = w, wait end
  end
  slots[w] = {math.floor(now / width), newest_all + length - now}
end
if worst_window > 0 then
  return {0, worst_window, worst_wait}
end
for w = 1, #KEYS do
  local field = tostring(slots[w][1])
  local value = redis.call('HGET', KEYS[w], field)
  local count, newest = 0, now
  if value then
    local c, n = string.match(value, '^(%d+):(%d+)$')
    count, newest = tonumber(c) or 0, math.max(tonumber(n) or now, now)
  end
  redis.call('HSET', KEYS[w], field, string.format('%d:%d', count + 1, newest))
  redis.call('PEXPIRE', KEYS[w], math.ceil(slots[w][2]))
end
return {1}
"""


@dataclass(frozen=True)
class RateLimitExceeded:
    """Which surface and window refused, and when one more call will be allowed; rendered as the
    answers' ``rateLimit`` object and the ``Retry-After`` header."""

    plan: Plan
    window: str
    limit: int
    retry_after_s: int
    surface: Surface = Surface.CATALOG

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": "rate_limited",
            "plan": self.plan.value,
            "surface": self.surface.value,
            "window": self.window,
            "limit": self.limit,
            "retryAfterSeconds": self.retry_after_s,
            "message": (
                f"{self.plan.value} plan allows {self.limit} {self.surface.noun} per {self.window}; "
                f"retry in {self.retry_after_s}s"
            ),
        }

    def error(self) -> RateLimited:
        return RateLimited(
            self.as_dict()["message"],
            details={"rateLimit": self.as_dict()},
            headers={"Retry-After": str(self.retry_after_s)},
        )


@dataclass(frozen=True)
class RegistrationsExceeded:
    """The registration bucket refused: its limit, and when one more registration will be allowed."""

    limit: int
    retry_after_s: int

    def error(self) -> RateLimited:
        return RateLimited(
            f"{self.limit} workspace registrations in the last minute, the most one user may make "
            f"(workspace_registrations_per_minute); retry in {self.retry_after_s}s. Registering unchanged settings again is free.",
            details={"rateLimit": {"limit": self.limit, "window_s": MINUTE.seconds, "retryAfterSeconds": self.retry_after_s}},
            headers={"Retry-After": str(self.retry_after_s)},
        )


def limits_from_settings(settings: Settings) -> dict[Surface, PlanLimits]:
    """Each surface's per-plan (per minute, per day) ceilings: the published ones for catalog search, the
    settings' for code and action search."""

    def by_plan(rows: tuple[tuple[str, int, int], ...]) -> dict[Plan, tuple[int, int]]:
        return {**PLAN_LIMITS, **{Plan(plan): (per_minute, per_day) for plan, per_minute, per_day in rows}}

    return {
        Surface.CATALOG: PLAN_LIMITS,
        Surface.CODE: by_plan(settings.code_search_rate_limits),
        Surface.ACTIONS: by_plan(settings.action_search_rate_limits),
    }


class RateLimiter:
    """Counts allowed searches per caller and surface, and registrations per caller; refused ones
    are not counted."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        *,
        enabled: bool = True,
        limits: Mapping[Surface, PlanLimits] | None = None,
        registrations_per_minute: int = 30,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._enabled = enabled
        self._limits: Mapping[Surface, PlanLimits] = limits or {surface: PLAN_LIMITS for surface in Surface}
        self._registrations_per_minute = registrations_per_minute
        self._script = redis.register_script(_CHECK_AND_RECORD)

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> RateLimiter:
        return cls(
            redis,
            settings.queue_prefix,
            enabled=settings.rate_limits_enabled,
            limits=limits_from_settings(settings),
            registrations_per_minute=settings.workspace_registrations_per_minute,
        )

    def limits(self, surface: Surface, plan: Plan) -> tuple[int, int]:
        """(per minute, per day) of ``plan`` on ``surface``."""
        return self._limits[surface][plan]

    def key(self, caller: Caller, bucket: Surface | str, window: Window) -> str:
        """The Redis hash of ``caller``'s ``window`` in ``bucket`` (a surface, or ``REGISTRATIONS``)."""
        return f"{self._prefix}:ratelimit:{bucket}:{caller.sub}:{window.name}"

    async def check(self, caller: Caller, surface: Surface, now: float | None = None) -> RateLimitExceeded | None:
        """Count one ``surface`` search for ``caller`` if every window allows it; else the window
        whose wait is longest (nothing counted). The clock is Redis's: one clock for every front end,
        read in the order the calls are counted. ``now`` (epoch seconds) replaces it in tests."""
        if not self._enabled:
            return None
        limits = self.limits(surface, caller.plan)
        refused = await self._take(caller, surface, tuple(zip(WINDOWS, limits, strict=True)), now)
        if refused is None:
            return None
        window, limit, wait_s = refused
        return RateLimitExceeded(caller.plan, window.name, limit, wait_s, surface)

    async def check_registration(self, caller: Caller, now: float | None = None) -> RegistrationsExceeded | None:
        """Count one workspace registration for ``caller`` if the minute allows it; else when one more
        will be allowed (nothing counted). The same clock, rule and Redis fallback as ``check``."""
        refused = await self._take(caller, REGISTRATIONS, ((MINUTE, self._registrations_per_minute),), now)
        if refused is None:
            return None
        _, limit, wait_s = refused
        return RegistrationsExceeded(limit, wait_s)

    async def _take(
        self, caller: Caller, bucket: Surface | str, windows: Sequence[tuple[Window, int]], now: float | None
    ) -> tuple[Window, int, int] | None:
        """Run the check-and-record script over ``windows`` (each with its limit) of ``bucket``: None
        when the call was counted (or Redis is unreachable), else the refusing window, its limit and
        the wait in whole seconds (at least 1)."""
        args: list[int | str] = ["" if now is None else int(now * 1000)]
        for window, limit in windows:
            args.extend((window.seconds * 1000, window.slot_seconds * 1000, limit))
        try:
            result = await self._script(keys=[self.key(caller, bucket, window) for window, _ in windows], args=args)
        except (RedisError, OSError) as exc:
            log.warning("rate limit not enforced: Redis unreachable", extra={"error": str(exc), "surface": str(bucket)})
            return None
        if int(result[0]) == 1:
            return None
        window, limit = windows[int(result[1]) - 1]
        return window, limit, max(1, math.ceil(int(result[2]) / 1000))
