"""Which deployment a process belongs to: its id, its Redis prefix, and the claim on that prefix.

A deployment is what shares one index: the embedded store's data directory, or, with
``QDRANT_URL``, every front end and worker of the cluster. Its id tags every job it enqueues, so a
worker never runs (and never reports as done) a job of another deployment that reached its queue.

- **Embedded store** (no ``QDRANT_URL``): the id is kept in ``data_dir/deployment-id``, created once.
  Unless ``queue_prefix`` is set, the prefix is ``agentsearch-<id>``: a second ``make run``, a
  benchmark or a test run on the same Redis gets queues of its own without being told.
- **Cluster** (``QDRANT_URL``): processes share nothing on disk, so the prefix is the setting every
  process is given (``agentsearch`` by default) and the prefix is the id.

An embedded instance that runs workers claims its prefix in Redis (``<prefix>:instance``: its id,
host, pid and data directory, with a TTL it keeps refreshing). A second embedded instance of another
data directory on the same prefix refuses to start while that claim lives; a dead instance's claim
expires after ``CLAIM_TTL_S``. Redis down at start does not stop the service: the claim is taken once
Redis answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

from service.errors import SettingsError
from service.fileonce import create_once
from service.settings import DEFAULT_QUEUE_PREFIX, Settings, env_name

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

DEPLOYMENT_ID_FILE = "deployment-id"
CLAIM_TTL_S = 30
# Refreshed three times a TTL: one lost refresh (a slow Redis, a busy loop) does not drop the claim.
CLAIM_REFRESH_S = CLAIM_TTL_S / 3

# Take the claim when it is free or already this deployment's (a restart of the same data
# directory); otherwise answer the live holder's claim. One script, so two instances starting at
# once cannot both win.
_CLAIM_SCRIPT = """
local held = redis.call('GET', KEYS[1])
if held and cjson.decode(held)['deployment'] ~= ARGV[2] then
  return held
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
return false
"""
# Drop the claim only when it is still this very instance's.
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class Deployment:
    """A process's deployment: ``id`` tags its jobs, ``prefix`` names its Redis keys and queues."""

    id: str
    prefix: str
    prefix_source: str
    """``setting`` (``queue_prefix`` was given), ``data_dir`` (derived from the id) or ``default``."""


def deployment_id(data_dir: Path) -> str:
    """The id kept in ``data_dir``: generated once and reused after (a restart keeps its queues)."""
    path = data_dir / DEPLOYMENT_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        return _checked_id(path)
    create_once(path, secrets.token_hex(6) + "\n")
    return _checked_id(path)


def _checked_id(path: Path) -> str:
    ident = path.read_text().strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", ident):
        raise SettingsError(
            f"data_dir ({env_name('data_dir')}): {path} holds no valid deployment id; delete the file to get a new one "
            "(the derived queue prefix changes with it; queued jobs of the old one are re-queued by the sweeper)"
        )
    return ident


def resolve_deployment(settings: Settings) -> Deployment:
    """The deployment of ``settings``: see the module docstring for how the prefix is chosen."""
    if settings.store_kind == "qdrant":
        prefix = settings.queue_prefix or DEFAULT_QUEUE_PREFIX
        return Deployment(id=prefix, prefix=prefix, prefix_source="setting" if settings.queue_prefix else "default")
    ident = deployment_id(settings.data_dir)
    if settings.queue_prefix:
        return Deployment(id=ident, prefix=settings.queue_prefix, prefix_source="setting")
    return Deployment(id=ident, prefix=f"{DEFAULT_QUEUE_PREFIX}-{ident}", prefix_source="data_dir")


def claim_key(prefix: str) -> str:
    return f"{prefix}:instance"


class PrefixClaim:
    """The claim of a live embedded instance on its prefix (see the module docstring)."""

    def __init__(self, redis: Any, *, prefix: str, deployment_id: str, data_dir: Path) -> None:
        self.redis = redis
        self.prefix = prefix
        self.deployment_id = deployment_id
        self.key = claim_key(prefix)
        self.value = orjson.dumps(
            {"deployment": deployment_id, "host": socket.gethostname(), "pid": os.getpid(), "data_dir": str(data_dir.resolve()), "since": int(time.time())}
        )
        self._refresh: asyncio.Task[None] | None = None
        self._warned_holder: bytes | None = None

    async def acquire(self) -> None:
        """Claim the prefix, then keep the claim alive. Raises ``SettingsError`` when a live
        instance of another deployment holds it; with Redis down, starts and claims later."""
        try:
            holder = await self._claim()
        except (RedisError, OSError) as exc:
            log.warning(
                "Redis is unreachable: the queue prefix is claimed once it answers",
                extra={"prefix": self.prefix, "error": type(exc).__name__},
            )
        else:
            if holder is not None:
                raise SettingsError(refusal(self.prefix, holder))
        self._refresh = asyncio.create_task(self._keep_alive())

    async def release(self) -> None:
        """Stop refreshing and drop the claim (a stopped instance frees its prefix at once)."""
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
        with contextlib.suppress(RedisError, OSError):
            await self.redis.eval(_RELEASE_SCRIPT, 1, self.key, self.value)

    async def _claim(self) -> bytes | None:
        """None when this instance holds the claim now, else the live holder's claim."""
        held = await self.redis.eval(_CLAIM_SCRIPT, 1, self.key, self.value, self.deployment_id, CLAIM_TTL_S)
        return bytes(held) if held else None

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(CLAIM_REFRESH_S)
            try:
                holder = await self._claim()
            except (RedisError, OSError):
                continue  # the service goes on without Redis; the claim is taken again once it answers
            if holder is not None and holder != self._warned_holder:
                # Both started while Redis was down. Jobs carry their deployment id, so neither runs
                # the other's; the operator still has to give one of them another prefix.
                self._warned_holder = holder
                log.error("%s", refusal(self.prefix, holder), extra={"prefix": self.prefix})


async def claim_for_workers(engine: Engine) -> PrefixClaim | None:
    """Claim the engine's prefix before its process runs workers on an embedded store (None on a
    cluster, whose processes share the prefix by design). Raises ``SettingsError`` when held."""
    settings = engine.settings
    if settings.store_kind == "qdrant":
        return None
    claim = PrefixClaim(engine.redis, prefix=settings.queue_prefix, deployment_id=engine.queue.deployment, data_dir=settings.data_dir)
    await claim.acquire()
    return claim


def refusal(prefix: str, holder: bytes) -> str:
    """What a second instance on a held prefix is told: who holds it and what to change."""
    try:
        claim = orjson.loads(holder)
    except orjson.JSONDecodeError:
        claim = {}
    return (
        f"queue_prefix ({env_name('queue_prefix')}): the prefix {prefix!r} is held by a live agentsearch instance "
        f"of another data directory ({claim.get('data_dir', '?')} on host {claim.get('host', '?')}, pid {claim.get('pid', '?')}, "
        f"deployment id {claim.get('deployment', '?')}); two deployments on one prefix would take each other's jobs. "
        f"Unset {env_name('queue_prefix')} (each data directory then gets a prefix of its own), choose another prefix, "
        f"or stop that instance (its claim expires {CLAIM_TTL_S} s after it stops)"
    )
