"""Catalog fixtures: a lexical-only app (deterministic order, no embedding wait) and a seeded hybrid app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

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
from tests.helpers import running_app


@pytest.fixture
async def lexical_client(settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    """The app with embeddings off: BM25 only, so orders are exact and nothing waits for a model."""
    async with running_app(settings, embeddings_model=None) as test_client:
        yield test_client


ALICE_DATA = [home_package(), HIDDEN_PACKAGE, MCP_HOME, *INTEGRATIONS, GITHUB_PACKAGE, *SECRETS]


@pytest.fixture
async def seeded(client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    """The default (hybrid) app with built-ins and alice's entities, every record embedded."""
    await seed_builtins(client)
    await put(client, ALICE_DATA)
    await wait_embedded(client)
    return client
