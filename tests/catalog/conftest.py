"""Catalog fixtures: a lexical-only app (deterministic order, no embedding wait) and a seeded hybrid app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.settings import Settings
from tests.catalog.fixtures import (
    GITHUB_PACKAGE,
    HIDDEN_PACKAGE,
    INTEGRATIONS,
    MCP_HOME,
    SECRETS,
    home_package,
    put,
    seed_builtins,
    wait_embedded,
)
from tests.conftest import with_settings


async def _client(settings: Settings) -> TestClient[Any, Any]:
    test_client: TestClient[Any, Any] = TestClient(TestServer(create_app(settings)))
    await test_client.start_server()
    return test_client


@pytest.fixture
async def lexical_client(settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    """The app with embeddings off: BM25 only, so orders are exact and nothing waits for a model."""
    test_client = await _client(with_settings(settings, embeddings_model=None))
    yield test_client
    await test_client.close()


ALICE_DATA = [home_package(), HIDDEN_PACKAGE, MCP_HOME, *INTEGRATIONS, GITHUB_PACKAGE, *SECRETS]


@pytest.fixture
async def seeded(client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    """The default (hybrid) app with built-ins and alice's entities, every record embedded."""
    await seed_builtins(client)
    await put(client, ALICE_DATA)
    await wait_embedded(client)
    return client
