"""The starter data set: it loads on a new data directory, once (the marker keeps a restart and a
user's deletions), never when off or beyond the embedded default, and a failed load leaves the
service serving; the start-up lines say where the service is and what to try."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.engine.startup import open_engine
from service.errors import SettingsError
from service.settings import Settings
from service.settings_loader import load_settings
from service.starter.banner import FIRST_QUERY, serving_lines
from service.starter.loader import (
    DATA,
    LOADED,
    MARKER,
    PENDING,
    SKIPPED,
    load_in_background,
    load_starter,
    marker_state,
    source_root,
    starter_context,
    starter_due,
    starter_in_place,
    with_starter_base,
)
from service.state import ENGINE
from service.surfaces import surfaces
from tests.callers import ADMIN, TEST_SECRET, auth
from tests.code.helpers import wait_model_ready
from tests.helpers import running_app, wait_until, with_settings

DEMO = auth("demo", org="demo")


@pytest.fixture
def starter_settings(settings: Settings) -> Settings:
    """The suite's settings with the starter set on (the suite's default is off), its base allowed."""
    return with_starter_base(with_settings(settings, starter_data=True))


async def post(client: TestClient[Any, Any], path: str, body: dict[str, Any], headers: dict[str, str] = DEMO) -> dict[str, Any]:
    response = await client.post(path, json=body, headers=headers)
    answer: dict[str, Any] = await response.json()
    assert response.status == 200, answer
    return answer


async def catalog_entities(client: TestClient[Any, Any], query: str) -> list[str]:
    answer = await post(client, "/v1/catalog/search", {"query": query})
    return [r["entity"] for r in answer["structuredContent"]["results"]]


async def test_a_new_data_directory_loads_the_set_in_the_background_and_a_restart_keeps_deletions(starter_settings: Settings) -> None:
    data_dir = starter_settings.data_dir
    assert starter_due(starter_settings) and marker_state(data_dir) == PENDING
    assert source_root() in starter_settings.allowed_roots

    def with_starter(app: web.Application) -> None:
        app.cleanup_ctx.append(starter_context())

    async with running_app(starter_settings, setup=with_starter) as client:
        await wait_until(lambda: marker_state(data_dir) == LOADED, timeout_s=60)
        await wait_model_ready(client)  # searches then rank as callers' do, not lexically while it loads
        marker = json.loads((data_dir / MARKER).read_text())
        assert marker["templates"] >= 20 and marker["instances"] >= 3 and marker["catalog_entities"] >= 30, marker

        # catalog: a global capability, and an MCP server of demo's org with its tools
        assert "capability:WeatherTool" in await catalog_entities(client, FIRST_QUERY)
        assert "mcp-server:devops" in await catalog_entities(client, "SSH into my server and run a command")
        # actions: demo's own instance, ranked for what it can do
        rows = (await post(client, "/v1/actions/search", {"query": "refund a payment", "limit": 5}))["results"]
        assert rows and rows[0]["service"] == "stripe", rows
        # code: the service's own source, registered for demo and searchable (lexically: no background warming)
        listed = await (await client.get("/v1/workspaces", headers=DEMO)).json()
        (workspace,) = listed["workspaces"]
        assert workspace["root"] == str(source_root()) and workspace["id"] == marker["workspace"]
        found = await post(client, f"/v1/workspaces/{workspace['id']}/search", {"query": "sliding window rate limit", "limit": 3, "mode": "lexical"})
        assert found["results"] and found["results"][0]["path"] == "ratelimit.py", found["output"]

        response = await client.delete("/v1/catalog/entities/capability:WeatherTool", headers=ADMIN)
        assert response.status == 200

    # The next start: the marker says loaded, so nothing loads again and the deletion stays.
    assert not starter_due(starter_settings) and starter_in_place(starter_settings)
    async with running_app(starter_settings) as client:
        assert await load_starter(client.app[ENGINE]) is None
        assert "capability:WeatherTool" not in await catalog_entities(client, FIRST_QUERY)


async def test_two_loads_at_once_write_the_set_once(starter_settings: Settings) -> None:
    assert starter_due(starter_settings)
    engine = await open_engine(starter_settings, surfaces())
    try:
        first, second = await asyncio.gather(load_starter(engine), load_starter(engine))
    finally:
        await engine.close()
    assert [load is None for load in (first, second)].count(True) == 1, (first, second)
    assert marker_state(starter_settings.data_dir) == LOADED


def test_the_setting_is_on_by_default_and_read_from_its_variable() -> None:
    assert load_settings({}).loads_starter_data
    assert not load_settings({"AGENTSEARCH_STARTER_DATA": "false"}).starter_data
    with pytest.raises(SettingsError, match="AGENTSEARCH_STARTER_DATA"):
        load_settings({"AGENTSEARCH_STARTER_DATA": "sometimes"})


def test_off_or_beyond_the_embedded_default_nothing_loads_and_no_base_is_added(settings: Settings, tmp_path: Path) -> None:
    off = with_settings(settings, starter_data=False)
    cluster = with_settings(settings, starter_data=True, qdrant_url="http://qdrant:6333", jwt_secret=TEST_SECRET)
    local = with_settings(settings, starter_data=True, qdrant_path=tmp_path / "qdrant")
    for each in (off, cluster, local):
        assert not each.loads_starter_data
        assert with_starter_base(each).allowed_roots == each.allowed_roots
        assert not starter_due(each) and not starter_in_place(each)
    assert not (settings.data_dir / MARKER).exists()


async def test_a_data_directory_with_an_index_but_no_marker_is_left_as_it_is(starter_settings: Settings) -> None:
    engine = await open_engine(starter_settings, surfaces())  # data of its own: the index exists
    try:
        assert not starter_due(starter_settings)
        assert marker_state(starter_settings.data_dir) == SKIPPED
        assert await load_starter(engine) is None
    finally:
        await engine.close()
    assert not starter_in_place(starter_settings)


async def test_a_failed_load_warns_keeps_serving_and_loads_at_the_next_start(
    starter_settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "broken-starter"
    shutil.copytree(DATA, broken)
    catalog = json.loads((broken / "catalog.json").read_text())
    catalog["global"]["entities"].append({"type": "capability", "id": "noSummary", "domain": "finance"})
    (broken / "catalog.json").write_text(json.dumps(catalog))
    assert starter_due(starter_settings)
    async with running_app(starter_settings) as client:
        with caplog.at_level(logging.WARNING, logger="service.starter.loader"):
            assert await load_in_background(client.app[ENGINE], broken) is None
        assert any("starter data not loaded" in r.getMessage() and "summary" in r.getMessage() for r in caplog.records), caplog.text
        assert (await client.get("/healthz")).status == 200
        assert marker_state(starter_settings.data_dir) == PENDING
    assert starter_due(starter_settings), "a pending marker loads again at the next start"


def test_serving_lines_name_the_url_the_dashboard_and_a_first_search(settings: Settings) -> None:
    wildcard = with_settings(settings, host="0.0.0.0", port=8123)
    url, admin, first = serving_lines(wildcard, starter=True)
    assert url == "agentsearch listening on http://127.0.0.1:8123"
    assert admin.startswith("admin dashboard: http://127.0.0.1:8123/admin ") and "--sub ops --admin" in admin
    assert f"token --data-dir {settings.data_dir} --sub demo --org demo" in first
    assert "curl -s http://127.0.0.1:8123/v1/catalog/search" in first and FIRST_QUERY in first
    *_, without = serving_lines(wildcard, starter=False)
    assert "/v1/index/status" in without and "demo" not in without
