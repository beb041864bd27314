"""Team records stored under the old key ``team:<team>`` (no org), on a real data directory: visible to
nobody and counted at open, then re-keyed to ``team:<org>/<team>`` by ``agentsearch reindex --team-org``,
run on its own (the store free) and handed to a running service (the store held).

The old records are written the way the previous version wrote them: catalog entities through the
ingest with the old tenant key, an action instance as its meta point keyed by the old tenant.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.actions.model import META_COLLECTION
from service.catalog.ingest import write_entities
from service.catalog.keys import COLLECTION, Kind, record_key
from service.catalog.parsing import parse_entity
from service.engine.runtime import Engine
from service.engine.serving import META_COLLECTION as MIGRATE_META
from service.engine.startup import open_engine
from service.engine.store import PointRecord, point_id
from service.engine.teams import CHECK_MARKER, rekey
from service.settings import Settings
from service.state import ENGINE
from service.surfaces import surfaces
from tests.callers import ADMIN, ALICE, BOB_ENG, auth
from tests.helpers import reindex_in_process, running_app, wait_until

Client = TestClient[Any, Any]
TEMPLATE = {"template": "hubspot", "display_name": "HubSpot", "actions": [{"action": "search_contacts", "description": "Search contacts", "risk": "read"}]}
PACKAGE = {
    "type": "package",
    "id": "deploy-tools",
    "name": "@eng/deploy-tools",
    "summary": "Roll out the release train oldteamtext",
    "exports": [{"subpath": "./rollout", "purpose": "Start a rollout oldteamtext"}],
}
# ALICE is in acme's eng, the team that wrote the old records; BOB_ENG in bobco's eng: same team
# name, another org.



async def _write_old_team_records(engine: Engine) -> None:
    """A package (card, export, files) and an MCP server under ``team:eng``, and a team instance."""
    entities = [parse_entity(PACKAGE, "entities[0]"), parse_entity({"type": "mcp-server", "id": "pager", "description": "Pager oldteamtext", "tools": [{"name": "page", "description": "Page on-call"}]}, "entities[1]")]
    await write_entities(engine.records("catalog"), entities, "team:eng")
    payload = {"tenant": "team:eng", "kind": "instance", "key": "instance:team:eng:crm", "name": "crm", "template": "hubspot", "tier": "team", "owner": "eng", "auth_type": "api_key", "secret_name": "CRM_KEY", "connected": True, "updated_at": 0.0}
    await engine.store.upsert(META_COLLECTION, [PointRecord(id=point_id(META_COLLECTION, payload["key"]), payload=payload)])
    # The previous version never wrote the "no old team keys" marker this engine wrote at its open.
    await engine.store.delete(MIGRATE_META, [point_id(MIGRATE_META, CHECK_MARKER)])
    await engine.store.flush()


async def _seen_by(client: Client, headers: dict[str, str]) -> dict[str, Any]:
    package = await client.post("/v1/catalog/search", json={"entity": "package:deploy-tools"}, headers=headers)
    ranked = await (await client.post("/v1/catalog/search", json={"query": "release train rollout"}, headers=headers)).text()
    actions = await (await client.post("/v1/actions/search", json={"query": ""}, headers=headers)).json()
    return {"package": package.status, "ranked": "deploy-tools" in ranked, "instances": sorted(row["service"] for row in actions["results"])}


def test_rekey_keeps_each_key_scheme() -> None:
    assert rekey(record_key("team:eng", Kind.EXPORT, "p#./a"), "team:eng", "team:acme/eng") == "team:acme/eng|export|p#./a"
    assert rekey("instance:team:eng:crm", "team:eng", "team:acme/eng") == "instance:team:acme/eng:crm"
    assert rekey("team:engineering|package|p", "team:eng", "team:acme/eng") is None  # another team's key is never touched


async def test_old_team_records_are_visible_to_nobody_until_reindex_maps_the_team_to_its_org(
    settings: Settings, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    lexical = replace(settings, embeddings_model=None)
    engine = await open_engine(lexical, surfaces())
    try:
        await _write_old_team_records(engine)
    finally:
        await engine.close()

    async with AsyncExitStack() as stack:
        with caplog.at_level(logging.WARNING, logger="service.engine.teams"):
            client = await stack.enter_async_context(running_app(lexical))
        warned = [r for r in caplog.records if r.name == "service.engine.teams"]
        assert warned and warned[0].records == 6 and warned[0].team_keys == ["team:eng"], [r.getMessage() for r in warned]  # type: ignore[attr-defined]
        assert "agentsearch reindex --team-org" in warned[0].getMessage()
        assert (await client.put("/v1/actions/templates", json={"templates": [TEMPLATE]}, headers=ADMIN)).status == 200
        for caller in (ALICE, BOB_ENG):  # fail closed: the old key is nobody's tenant
            assert await _seen_by(client, caller) == {"package": 404, "ranked": False, "instances": []}

    capsys.readouterr()
    assert await asyncio.to_thread(reindex_in_process, lexical, team_orgs=["eng=acme"]) == 0
    printed = capsys.readouterr().out
    assert "re-keyed 6 team records" in printed and "team:eng -> team:acme/eng" in printed, printed

    caplog.clear()
    async with AsyncExitStack() as stack:
        with caplog.at_level(logging.WARNING, logger="service.engine.teams"):
            client = await stack.enter_async_context(running_app(lexical))
        assert not [r for r in caplog.records if r.name == "service.engine.teams"], "nothing left to count"
        assert await _seen_by(client, ALICE) == {"package": 200, "ranked": True, "instances": ["crm"]}
        assert await _seen_by(client, auth("carol", org="acme", teams=("eng",))) == {"package": 200, "ranked": True, "instances": ["crm"]}
        assert await _seen_by(client, BOB_ENG) == {"package": 404, "ranked": False, "instances": []}
        export = await client.post("/v1/catalog/search", json={"entity": "package:deploy-tools#./rollout"}, headers=ALICE)
        assert export.status == 200, await export.text()
        store = client.server.app[ENGINE].store
        old = await store.retrieve(COLLECTION, [point_id(COLLECTION, record_key("team:eng", Kind.PACKAGE, "deploy-tools"))])
        new = await store.retrieve(COLLECTION, [point_id(COLLECTION, record_key("team:acme/eng", Kind.PACKAGE, "deploy-tools"))])
        assert old == [] and new and new[0].payload["tenant"] == "team:acme/eng"
        # The team goes on writing under its org's key: a delete by the caller-facing owner finds it.
        deleted = await client.delete("/v1/catalog/entities/package:deploy-tools?owner=team:eng", headers=ALICE)
        assert deleted.status == 200 and (await deleted.json())["records"] == 3


async def test_reindex_hands_the_team_mapping_to_the_running_service(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    lexical = replace(settings, embeddings_model=None)
    engine = await open_engine(lexical, surfaces())
    try:
        await _write_old_team_records(engine)
    finally:
        await engine.close()
    async with running_app(lexical, worker_in_process=True) as client:
        assert (await client.put("/v1/actions/templates", json={"templates": [TEMPLATE]}, headers=ADMIN)).status == 200
        assert (await _seen_by(client, ALICE))["package"] == 404
        # The service holds the data directory: the command queues the job, with the mapping, for its worker.
        code = await asyncio.to_thread(reindex_in_process, lexical, team_orgs=["eng=acme"])
        assert code == 0
        assert "re-keyed 6 team records" in capsys.readouterr().out

        async def visible() -> bool:
            return await _seen_by(client, ALICE) == {"package": 200, "ranked": True, "instances": ["crm"]}

        await wait_until(visible, timeout_s=30)
        assert await _seen_by(client, BOB_ENG) == {"package": 404, "ranked": False, "instances": []}
