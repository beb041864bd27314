"""Shared fixtures: real Redis (a key prefix per test), the real model, the app on a real test server."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.auth import mint_token
from service.engine.queue import forget_deployment
from service.engine.runtime import Engine, open_engine
from service.settings import Settings
from tests.embedding_server import embeddings_app

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REDIS_URL = "redis://127.0.0.1:6379/0"
TEST_SECRET = "test-secret-for-agentsearch-tests-0123456789"


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
    )


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[Engine]:
    opened = await open_engine(settings)
    yield opened
    await opened.close()


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
    test_client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings)))
    await test_client.start_server()
    yield test_client
    await test_client.close()


def token_for(sub: str = "alice", **claims: Any) -> str:
    return mint_token(TEST_SECRET, sub=sub, **claims)


def auth(sub: str = "alice", **claims: Any) -> dict[str, str]:
    """Authorization header for a caller with these claims (org, teams, plan, admin)."""
    return {"Authorization": f"Bearer {token_for(sub, **claims)}"}


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.2) -> None:
    """Poll an (async) predicate until true; fail the test with a timeout otherwise."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)


def with_settings(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, **changes)


def reindex_in_process(settings: Settings, **kwargs: Any) -> int:
    """``agentsearch reindex`` in this process; the logging it configures for its own run is undone after."""
    from service.migrate import run_reindex

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return run_reindex(settings, as_json=False, wait=True, **kwargs)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
