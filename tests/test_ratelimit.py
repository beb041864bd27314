"""Rate limits on the real Redis, with the clock injected (``now``) instead of sleeping: refused
calls are not counted, no span of a window's length holds more than the limit, each surface and
workspace registration has its own bucket, and ``Retry-After`` is the exact wait until one more call
is allowed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from service.auth import Caller, Plan
from service.errors import SettingsError
from service.ratelimit import RateLimiter, Surface, limits_from_settings
from service.settings import Settings
from service.settings_loader import load_settings
from tests.helpers import REDIS_URL

FREE_PER_MINUTE, FREE_PER_DAY = 80, 1_000
# A day start, so the day window's 15-minute slots line up with the injected times below.
BASE = 1_750_032_000.0


@pytest.fixture
async def limiter(redis_prefix: str) -> AsyncIterator[RateLimiter]:
    redis = aioredis.from_url(REDIS_URL)
    settings = Settings(queue_prefix=redis_prefix, code_search_rate_limits=(("free", 5, 20),), workspace_registrations_per_minute=3)
    yield RateLimiter.from_settings(redis, settings)
    await redis.aclose()


async def test_a_thousand_quick_refused_calls_cost_nothing(limiter: RateLimiter) -> None:
    """1,000 action searches at 100 a second: the plan's 80 are answered, the longest wait asked is
    the minute (not hours: the 920 refusals were not counted), and after it a full minute's worth
    is allowed again."""
    caller = Caller("quick", plan=Plan.FREE)
    start = BASE + 0.1
    answered, waits = 0, []
    for i in range(1_000):
        exceeded = await limiter.check(caller, Surface.ACTIONS, now=start + i * 0.01)
        if exceeded is None:
            answered += 1
        else:
            assert exceeded.window == "minute" and exceeded.surface is Surface.ACTIONS
            waits.append((start + i * 0.01, exceeded.retry_after_s))
    assert answered == FREE_PER_MINUTE
    resume = start + 61  # the burst left the minute; the day has counted 80 calls, not 1,000
    allowed = [await limiter.check(caller, Surface.ACTIONS, now=resume) is None for _ in range(FREE_PER_MINUTE + 1)]
    assert allowed == [True] * FREE_PER_MINUTE + [False]
    # Each Retry-After is the wait, rounded up, until the answered burst (newest call at +0.79 s) leaves the minute.
    leaves_at = start + 0.79 + 60
    assert all(at + wait - 1 < leaves_at <= at + wait + 0.002 for at, wait in waits)
    assert max(wait for _, wait in waits) == 60


async def test_no_span_of_a_minute_holds_more_than_the_limit(limiter: RateLimiter) -> None:
    """A full burst just before a minute boundary and another just after: the second is refused
    (fixed windows allowed both). Then a steady 10 calls a second for five minutes: every 60-second
    span holds at most 80 answered calls, and the caller still gets its 80 each minute."""
    caller = Caller("boundary", plan=Plan.FREE)
    boundary = BASE + 3_600
    for _ in range(FREE_PER_MINUTE):
        assert await limiter.check(caller, Surface.CATALOG, now=boundary - 0.5) is None
    after = await limiter.check(caller, Surface.CATALOG, now=boundary + 0.5)
    assert after is not None and after.retry_after_s == 59

    steady = Caller("steady", plan=Plan.FREE)
    answered = [t for t in (BASE + 7_200 + i * 0.1 for i in range(3_000)) if await limiter.check(steady, Surface.CATALOG, now=t) is None]
    most_in_a_minute = max(sum(1 for u in answered if t - 60 < u <= t) for t in answered)
    assert most_in_a_minute == FREE_PER_MINUTE
    assert len(answered) >= 4 * FREE_PER_MINUTE


async def test_each_surface_counts_in_its_own_bucket_with_its_own_numbers(limiter: RateLimiter) -> None:
    """Code search is set to free=5/20 here: exhausting it leaves catalog and action search allowed."""
    caller = Caller("three-surfaces", plan=Plan.FREE)
    for _ in range(5):
        assert await limiter.check(caller, Surface.CODE, now=BASE) is None
    exceeded = await limiter.check(caller, Surface.CODE, now=BASE)
    assert exceeded is not None and exceeded.limit == 5 and exceeded.as_dict()["surface"] == "code"
    assert "5 code searches per minute" in exceeded.as_dict()["message"]
    assert await limiter.check(caller, Surface.CATALOG, now=BASE) is None
    assert await limiter.check(caller, Surface.ACTIONS, now=BASE) is None
    assert await limiter.check(Caller("someone-else", plan=Plan.FREE), Surface.CODE, now=BASE) is None
    # The code day ceiling (20) trips on its own, while catalog search keeps its published ceilings.
    for minute in range(1, 4):
        for _ in range(5):
            assert await limiter.check(caller, Surface.CODE, now=BASE + minute * 60) is None
    day = await limiter.check(caller, Surface.CODE, now=BASE + 240)
    assert day is not None and day.window == "day" and day.limit == 20
    assert limiter.limits(Surface.CATALOG, Plan.MAX) == (240, 25_000) and limiter.limits(Surface.CODE, Plan.MAX) == (240, 25_000)


async def test_retry_after_is_the_exact_wait_until_one_more_call(limiter: RateLimiter) -> None:
    caller = Caller("exact", plan=Plan.FREE)
    for _ in range(FREE_PER_MINUTE):
        assert await limiter.check(caller, Surface.CATALOG, now=BASE + 0.25) is None
    exceeded = await limiter.check(caller, Surface.CATALOG, now=BASE + 10.5)
    assert exceeded is not None and exceeded.retry_after_s == 50  # the burst leaves the window at +60.25
    limit = exceeded.as_dict()
    assert limit["retryAfterSeconds"] == 50 and limit["window"] == "minute" and limit["limit"] == FREE_PER_MINUTE
    assert exceeded.error().headers == {"Retry-After": "50"} and "retry in 50s" in limit["message"]
    assert await limiter.check(caller, Surface.CATALOG, now=BASE + 10.5 + 49) is not None
    assert await limiter.check(caller, Surface.CATALOG, now=BASE + 10.5 + 50) is None
    # The day: 50 calls a minute for 20 minutes fills it. The first 15 minutes share one day slot,
    # whose newest call (minute 14) leaves the window at +840 s + one day.
    daily = Caller("daily", plan=Plan.FREE)
    for i in range(FREE_PER_DAY):
        assert await limiter.check(daily, Surface.CATALOG, now=BASE + (i // 50) * 60) is None
    now = BASE + 1_500.5
    day = await limiter.check(daily, Surface.CATALOG, now=now)
    assert day is not None and day.window == "day" and day.limit == FREE_PER_DAY
    assert day.retry_after_s == 85_740  # BASE + 840 + 86,400 - now = 85,739.5 s, rounded up
    assert await limiter.check(daily, Surface.CATALOG, now=BASE + 840 + 86_400 - 0.001) is not None
    assert await limiter.check(daily, Surface.CATALOG, now=BASE + 840 + 86_400) is None


async def test_registrations_have_their_own_minute_bucket_with_the_same_retry_after_rule(limiter: RateLimiter, redis_prefix: str) -> None:
    """Three registrations a minute, whatever the plan, apart from the search buckets; the refusal is
    the registration 429 (its message and ``rateLimit`` fields) with the exact wait; refused calls
    cost nothing; the search limits turned off leave it enforced."""
    caller = Caller("registering", plan=Plan.MAX)
    for at in (BASE + 0.25, BASE + 5.5, BASE + 20):
        assert await limiter.check_registration(caller, now=at) is None
    exceeded = await limiter.check_registration(caller, now=BASE + 30.5)
    assert exceeded is not None and exceeded.limit == 3 and exceeded.retry_after_s == 30  # the first leaves at +60.25
    error = exceeded.error()
    assert error.status == 429 and error.code == "rate_limited" and error.headers == {"Retry-After": "30"}
    assert error.details == {"rateLimit": {"limit": 3, "window_s": 60, "retryAfterSeconds": 30}}
    assert str(error).startswith("3 workspace registrations in the last minute") and "(workspace_registrations_per_minute); retry in 30s" in str(error)
    for _ in range(100):
        assert await limiter.check_registration(caller, now=BASE + 40) is not None
    assert await limiter.check(caller, Surface.CODE, now=BASE + 40) is None, "searches count in their own buckets"
    assert await limiter.check_registration(Caller("someone-else"), now=BASE + 40) is None
    assert await limiter.check_registration(caller, now=BASE + 60.249) is not None
    assert await limiter.check_registration(caller, now=BASE + 60.25) is None
    assert await limiter.check_registration(caller, now=BASE + 60.25) is not None, "the second leaves at +65.5"

    redis = aioredis.from_url(REDIS_URL)
    try:
        searches_off = RateLimiter.from_settings(redis, Settings(queue_prefix=redis_prefix, rate_limits_enabled=False, workspace_registrations_per_minute=1))
        unlimited = Caller("unlimited-searches", plan=Plan.FREE)
        assert await searches_off.check_registration(unlimited, now=BASE) is None
        assert await searches_off.check_registration(unlimited, now=BASE) is not None
        assert all([await searches_off.check(unlimited, Surface.CATALOG, now=BASE) is None for _ in range(FREE_PER_MINUTE + 1)])
    finally:
        await redis.aclose()


async def test_limits_are_not_enforced_while_redis_is_unreachable() -> None:
    redis = aioredis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        limiter = RateLimiter(redis, "unreachable", registrations_per_minute=1)
        assert await limiter.check(Caller("anyone", plan=Plan.FREE), Surface.CATALOG) is None
        assert [await limiter.check_registration(Caller("anyone")) for _ in range(3)] == [None] * 3
    finally:
        await redis.aclose()


def test_surface_ceilings_are_read_from_settings_and_bad_values_are_named() -> None:
    settings = load_settings({"AGENTSEARCH_ACTION_SEARCH_RATE_LIMITS": "free=10/100, max=500/50000"})
    actions = limits_from_settings(settings)[Surface.ACTIONS]
    assert actions[Plan.FREE] == (10, 100) and actions[Plan.MAX] == (500, 50_000) and actions[Plan.PRO] == (200, 10_000)
    for bad in ("gold=1/2", "free=80", "free=0/10", "free=1/2,free=3/4", "free=ten/100"):
        with pytest.raises(SettingsError, match="action_search_rate_limits"):
            load_settings({"AGENTSEARCH_ACTION_SEARCH_RATE_LIMITS": bad})
