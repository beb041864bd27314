"""Code-search fixtures: one app per test module (starting one costs seconds: fresh collections and
the worker), shared by tests that each register their own tree, so they never see each other's
workspaces; ``variant`` settings for tests that need an app configured otherwise."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from service.settings import Settings
from tests.callers import TEST_SECRET
from tests.code.trees import write_tree
from tests.helpers import REDIS_URL, running_app


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_prefix() -> AsyncIterator[str]:
    prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = aioredis.from_url(REDIS_URL)
    try:
        async for key in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(key)
        async for key in client.scan_iter(match=f"arq:*{prefix}*", count=1000):
            await client.delete(key)
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def module_settings(tmp_path_factory: pytest.TempPathFactory, module_prefix: str) -> Iterator[Settings]:
    """The module's settings; its directory (data, workspaces, variants') is removed after the module."""
    base = tmp_path_factory.mktemp("code")
    (base / "workspaces").mkdir()
    yield Settings(
        data_dir=base / "data",
        redis_url=REDIS_URL,
        queue_prefix=module_prefix,
        jwt_secret=TEST_SECRET,
        allowed_roots=(base / "workspaces",),
        single_tenant=True,  # the module's callers share one plain base (tests/code/test_roots.py: multi-tenant)
        sweep_interval_s=5,
        worker_health_check_s=5,
        job_timeout_s=60,
        revalidate_interval_s=0.0,
        # These modules assert what each search's revalidation reports: no watch applies an edit first
        # (tests/code/test_watcher.py covers watched workspaces).
        workspace_watch=False,
    )
    shutil.rmtree(base, ignore_errors=True)


def variant(settings: Settings, name: str, **changes: Any) -> Settings:
    """Settings of a second app beside the module's: its own data directory and queues."""
    data_dir = settings.data_dir.parent / f"data-{name}-{uuid.uuid4().hex[:6]}"
    return replace(settings, data_dir=data_dir, queue_prefix=f"{settings.queue_prefix}-{name}", **changes)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_client(module_settings: Settings) -> AsyncIterator[Any]:
    async with running_app(module_settings) as client:
        yield client


@pytest.fixture
def tree(module_settings: Settings) -> Path:
    """A fresh multi-language tree under the allowed base, for this test alone."""
    return write_tree(module_settings.allowed_roots[0] / f"repo-{uuid.uuid4().hex[:8]}")
