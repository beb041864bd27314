"""Per-plan abuse rate limits (burst per minute and per day), kept in Redis.

Seed 000's ceilings: free 80/min and 1,000/day, standard 160/5,000, pro 200/10,000,
max 240/25,000. Fixed windows keyed by user and window start. When Redis is unreachable the
limit is not enforced (searches keep answering) and the decision says so.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.auth import Caller, Plan
from service.errors import RateLimited

log = logging.getLogger(__name__)

PLAN_LIMITS: dict[Plan, tuple[int, int]] = {
    Plan.FREE: (80, 1_000),
    Plan.STANDARD: (160, 5_000),
    Plan.PRO: (200, 10_000),
    Plan.MAX: (240, 25_000),
}
_WINDOWS = (("minute", 60), ("day", 86_400))


@dataclass(frozen=True)
class RateLimitExceeded:
    """Which window tripped and when it resets; rendered as seed 000's ``rateLimit`` object."""

    plan: Plan
    window: str
    limit: int
    retry_after_s: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": "rate_limited",
            "plan": self.plan.value,
            "window": self.window,
            "limit": self.limit,
            "retryAfterSeconds": self.retry_after_s,
            "message": f"{self.plan.value} plan allows {self.limit} searches per {self.window}; retry in {self.retry_after_s}s",
        }

    def error(self) -> RateLimited:
        return RateLimited(
            self.as_dict()["message"],
            details={"rateLimit": self.as_dict()},
            headers={"Retry-After": str(self.retry_after_s)},
        )


class RateLimiter:
    def __init__(self, redis: Redis, prefix: str, *, enabled: bool = True) -> None:
        self._redis = redis
        self._prefix = prefix
        self._enabled = enabled

    async def check(self, caller: Caller, now: float | None = None) -> RateLimitExceeded | None:
        """Count one search for ``caller``; the exceeded window, or None when allowed."""
        if not self._enabled:
            return None
        now = time.time() if now is None else now
        limits = dict(zip(("minute", "day"), PLAN_LIMITS[caller.plan], strict=True))
        keys = []
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for window, seconds in _WINDOWS:
                    start = int(now // seconds) * seconds
                    key = f"{self._prefix}:ratelimit:{caller.sub}:{window}:{start}"
                    keys.append((window, seconds, start))
                    pipe.incr(key)
                    pipe.expire(key, seconds + 5)
                results = await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("rate limit not enforced: Redis unreachable", extra={"error": str(exc)})
            return None
        for (window, seconds, start), count in zip(keys, results[0::2], strict=True):
            if int(count) > limits[window]:
                return RateLimitExceeded(caller.plan, window, limits[window], max(1, int(start + seconds - now)))
        return None
