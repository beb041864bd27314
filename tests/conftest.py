"""Shared fixtures: real Redis (a key prefix per test), the real model, the app on a real test server.

How the suite is organised: test folders mirror the code they test (``catalog/``, ``code/``,
``actions/``, ``admin/``, ``mcp/``, ``engine/`` with ``engine/store/``, ``workers/``); files at the top
test the top-level modules of ``service/`` (settings, rate limits, routing, errors, the app's HTTP
skeleton) and the repository (docs, deploy files, import layers); ``reliability/`` holds the
cross-cutting properties, security and fault tests and ``e2e/`` the paths across ``agentsearch``
processes. Every test starts the app through one of the starters of ``tests/helpers.py``
(``running_app``, which the ``client`` fixture uses, ``app_in_thread``, ``serving``,
``ServiceProcess``, ``serve_until_exit``; ``stand_in`` serves a test's own fake remote endpoint),
and calls it as one of the callers of ``tests/callers.py`` (``ALICE``, ``BOB``, ``ADMIN``, their
named variants, or ``auth(sub, **claims)``), so a caller's claims are defined in one place.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from service.engine.queue import forget_deployment
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.settings import Settings, env_name
from service.surfaces import surfaces
from tests.callers import TEST_SECRET, auth, token_for
from tests.embedding_server import embeddings_app
from tests.engine.model_server import ModelServer
from tests.helpers import MODEL_ARTIFACTS, REDIS_URL, reindex_in_process, running_app, wait_until, with_settings

__all__ = ["MODEL_ARTIFACTS", "REDIS_URL", "TEST_SECRET", "auth", "reindex_in_process", "running_app", "token_for", "wait_until", "with_settings"]

RAM_TEMPROOT = "/dev/shm"
RAM_TEMPROOT_MIN_FREE = 8 * 2**30

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One model-artifact directory (the local model's ONNX export) for every service the suite starts,
# in this process and in child processes: the export happens once, not per data directory.
os.environ.setdefault(env_name("model_artifact_dir"), str(MODEL_ARTIFACTS))
# Tests' temporary directories (data directories included) on the RAM file system where there is
# one: opening an index makes dozens of synced writes, seconds per app start on a busy disk and
# a fraction of one in RAM. Each index takes about 100 MB there (its files are preallocated), so
# only with room to spare, and a passing test's directory goes when it ends (pyproject.toml's
# tmp_path_retention_policy). An explicit root (this variable, or --basetemp) is kept.
if "PYTEST_DEBUG_TEMPROOT" not in os.environ and os.access(RAM_TEMPROOT, os.W_OK) and shutil.disk_usage(RAM_TEMPROOT).free >= RAM_TEMPROOT_MIN_FREE:
    os.environ["PYTEST_DEBUG_TEMPROOT"] = RAM_TEMPROOT
# Services the suite starts (`agentsearch serve` children included) load no starter data unless a test asks.
os.environ[env_name("starter_data")] = "false"


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A key prefix of this test alone; its keys are deleted afterwards."""
    prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = aioredis.from_url(REDIS_URL)
    try:
        await forget_deployment(client, prefix)
    finally:
        await client.aclose()


@pytest.fixture
def settings(tmp_path: Path, redis_prefix: str) -> Settings:
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    return Settings(
        data_dir=tmp_path / "data",
        redis_url=REDIS_URL,
        queue_prefix=redis_prefix,
        jwt_secret=TEST_SECRET,
        allowed_roots=(workspaces,),
        single_tenant=True,  # many tests register under this plain base as non-admin users; multi-tenant tests say so
        sweep_interval_s=5,
        worker_health_check_s=5,
        job_timeout_s=60,
        model_artifact_dir=MODEL_ARTIFACTS,
    )


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[Engine]:
    opened = await open_engine(settings, surfaces())
    yield opened
    await opened.close()


@pytest.fixture
async def model_b() -> AsyncIterator[ModelServer]:
    """The second embeddings model of the migration tests (``tests/engine/model_server.py``), started."""
    server = await ModelServer().start()
    yield server
    await server.close()


@pytest.fixture
async def embedding_endpoint() -> AsyncIterator[TestServer]:
    """The tests' OpenAI-compatible embeddings model (``tests/embedding_server.py``) on a local port."""
    server = TestServer(embeddings_app())
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    """The app with its own engine and in-process worker, as `make run` starts it."""
    async with running_app(settings) as test_client:
        yield test_client
