"""Warming progress: how far a workspace's background embedding has come, at what rate, and when it ends.

A workspace is warming while it is ``warm`` and some of its chunks have no current vector. Each
reading of a warming workspace's state (``GET /v1/workspaces/{id}``, the dashboard) adds a
``(time, embedded)`` sample, at most one per ``SAMPLE_EVERY_S``, to a sorted set in Redis,
``<queue_prefix>:code:warming:<workspace id>`` (score: epoch seconds), trimmed to the last
``WINDOW_S`` and ``MAX_SAMPLES`` and expiring ``WINDOW_S`` after its last write. The rate is the
rise of the embedded count over the window, so it is measured wherever the embed jobs run (the
in-process worker or separate workers) and whichever front end answers: they share Redis and the
store. It needs readings ``MIN_SPAN_S`` apart; until then ``rate_per_s``, ``eta_s`` and
``expected_finish`` are null. The key holds the deployment's prefix, so another deployment on the
same Redis keeps samples of its own, and the states that show them are the owner's (the dashboard's:
an admin's). Without Redis the progress is shown without a rate.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from arq.connections import ArqRedis

    from service.code.state import Workspaces
    from service.code.workspace import Workspace

log = logging.getLogger(__name__)

WINDOW_S = 600.0  # the rate is measured over the last ten minutes
SAMPLE_EVERY_S = 10.0  # a reading sooner after the last sample computes with it but stores none
MIN_SPAN_S = 5.0  # readings closer than this measure no rate
MAX_SAMPLES = 80  # more than the window holds at SAMPLE_EVERY_S, a bound should clocks disagree
LONG_ETA_S = 3_600.0  # an expected finish further away than this comes with a note on going faster


@dataclass(frozen=True)
class Sample:
    """The embedded count of a workspace at one time (epoch seconds)."""

    at: float
    embedded: int


def is_warming(workspace: Workspace, counts: Mapping[str, int]) -> bool:
    """Whether the workspace is warm and has chunks left to embed (``Workspaces.counts``)."""
    return workspace.warm and counts["pending"] + counts["cold"] > 0


async def warming_progress_of(workspaces: Workspaces, workspace: Workspace, counts: Mapping[str, int]) -> dict[str, Any] | None:
    """The workspace's ``warming_progress`` with its counts, this reading sampled; None when it is not warming."""
    if not is_warming(workspace, counts):
        return None
    engine = workspaces.engine
    now = time.time()
    samples = await WarmingSamples(engine.redis, engine.settings.queue_prefix).record(workspace.id, now, counts["embedded"])
    model = workspace.search.embeddings_model or engine.embedders.default_model
    return warming_progress(samples, embedded=counts["embedded"], total=counts["chunks"], now=now, model=model)


def warming_progress(samples: Sequence[Sample], *, embedded: int, total: int, now: float, model: str | None) -> dict[str, Any]:
    """``embedded``, ``total``, ``share``, ``rate_per_s``, ``eta_s``, ``expected_finish`` (ISO-8601
    UTC) and ``note`` of a workspace whose embedded count is ``embedded`` of ``total`` at ``now``,
    after the earlier ``samples``."""
    rate = measured_rate([*(s for s in samples if now - WINDOW_S <= s.at < now), Sample(now, embedded)])
    left = max(total - embedded, 0)
    eta = math.ceil(left / rate) if rate else None
    return {
        "embedded": embedded,
        "total": total,
        "share": round(embedded / total, 4) if total else 0.0,
        "rate_per_s": float(f"{rate:.3g}") if rate is not None else None,
        "eta_s": eta,
        "expected_finish": _iso(now + eta) if eta is not None else None,
        "note": long_eta_note(eta, left, model) if eta is not None and eta > LONG_ETA_S else None,
    }


def measured_rate(samples: Sequence[Sample]) -> float | None:
    """Chunks embedded per second over the samples since the embedded count last fell (a changed
    model or changed files drop chunks); None when those span less than ``MIN_SPAN_S``."""
    ordered = sorted(samples, key=lambda s: s.at)
    if not ordered:
        return None
    start = len(ordered) - 1
    while start > 0 and ordered[start - 1].embedded <= ordered[start].embedded:
        start -= 1
    first, last = ordered[start], ordered[-1]
    if last.at - first.at < MIN_SPAN_S:
        return None
    return (last.embedded - first.embedded) / (last.at - first.at)


def long_eta_note(eta_s: int, left: int, model: str | None) -> str:
    """What an operator reads when warming ends more than an hour from now: how to go faster."""
    using = f" with {model}" if model else ""
    return (
        f"embedding the {left} chunks left{using} takes about {eta_s / 3600:.1f} hours at this rate; to go faster, "
        "point the workspace at an OpenAI-compatible embeddings endpoint: configure a provider on the service "
        "(AGENTSEARCH_PROVIDER_<ID>_BASE_URL and AGENTSEARCH_PROVIDER_<ID>_API_KEY) and register the root again "
        '(POST /v1/workspaces) with search.embeddings_model "<ID>/<model_id>" and search.prewarm_embeddings true, '
        "which indexes the workspace anew and embeds it with that model"
    )


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WarmingSamples:
    """One deployment's warming samples in Redis, per workspace (see the module docstring)."""

    def __init__(self, redis: ArqRedis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    def key(self, workspace_id: str) -> str:
        return f"{self.prefix}:code:warming:{workspace_id}"

    async def record(self, workspace_id: str, now: float, embedded: int) -> list[Sample]:
        """The window's samples before ``now``, oldest first; this reading is stored when the newest is
        ``SAMPLE_EVERY_S`` old (one read, and one write at most every ``SAMPLE_EVERY_S``). Redis
        unreachable: no samples."""
        key = self.key(workspace_id)
        try:
            samples = [_sample(member) for member in await self.redis.zrangebyscore(key, now - WINDOW_S, "+inf")]
            if not samples or now - samples[-1].at >= SAMPLE_EVERY_S:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.zadd(key, {orjson.dumps({"at": now, "embedded": embedded}): now})
                    pipe.zremrangebyscore(key, "-inf", now - WINDOW_S)
                    pipe.zremrangebyrank(key, 0, -MAX_SAMPLES - 1)
                    pipe.expire(key, int(WINDOW_S))
                    await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("warming samples unavailable", extra={"workspace": workspace_id, "error": str(exc)})
            return []
        return samples


def _sample(member: bytes) -> Sample:
    data = orjson.loads(member)
    return Sample(at=float(data["at"]), embedded=int(data["embedded"]))


__all__ = ["Sample", "WarmingSamples", "is_warming", "long_eta_note", "measured_rate", "warming_progress", "warming_progress_of"]
