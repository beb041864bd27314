"""Waiting items derived from the catalog's state: expired secrets, integrations to reconnect,
disconnected or degraded MCP servers; shown to their own tenants only, each with a step that exists."""

from __future__ import annotations

from typing import Any

from tests.callers import ADMIN, ALICE, BOB, auth
from tests.catalog.fixtures import CAPABILITIES, INTEGRATIONS, MCP_HOME, home_package, put, search
from tests.catalog.test_names import _catalog_callables, assert_names_exist


def _server(server_id: str, status: str | None, message: str = "") -> dict[str, Any]:
    server: dict[str, Any] = {**MCP_HOME, "id": server_id}
    if status is not None:
        server["connection"] = {"status": status, "at": "2024-05-01T10:00:00Z", "message": message}
    return server


ALICE_STATE = [
    home_package(),
    *INTEGRATIONS,  # spotify's last refresh was reconnectable, github's is fine
    {"type": "secret", "id": "oldToken", "description": "Token that ran out.", "expiresAt": "2020-01-31"},
    {"type": "secret", "id": "freshToken", "description": "Token still valid.", "expiresAt": "2999-01-01T00:00:00Z"},
    {"type": "secret", "id": "shadeKey", "description": "Key of the shades bridge.", "packageId": "home-controls", "expiresAt": "2021-06-01T12:00:00+02:00"},
    _server("home", "disconnected", "OAuth grant revoked"),
    _server("garage", "degraded", "slow answers"),
    _server("office", "connected"),
    _server("attic", None),
]
BOB_STATE = [
    {"type": "secret", "id": "bobToken", "expiresAt": "2020-01-01"},
    {"type": "integration", "id": "dropbox", "name": "Dropbox", "lastRefresh": {"status": "reconnectable", "message": "grant expired"}},
    _server("bobhome", "disconnected"),
]


async def _waiting(client: Any, caller: dict[str, str]) -> dict[str, Any]:
    response = await client.get("/v1/catalog/waiting", headers=caller)
    assert response.status == 200
    return dict(await response.json())


async def test_expired_secrets_reconnects_and_disconnected_servers_become_waiting_items(lexical_client: Any) -> None:
    await put(lexical_client, CAPABILITIES, caller=ADMIN)
    await put(lexical_client, ALICE_STATE, caller=ALICE)
    await put(lexical_client, BOB_STATE, caller=BOB)
    listed = await _waiting(lexical_client, ALICE)
    items = listed["structuredContent"]["items"]
    by_id = {item["id"]: item for item in items}
    assert set(by_id) == {"secret-expired:oldToken", "secret-expired:home-controls:shadeKey", "oauth-reconnect:spotify", "mcp-reconnect:home", "mcp-reconnect:garage"}
    assert [item["status"] for item in items] == ["block"] * 4 + ["degraded"]  # blocking ones first
    assert by_id["secret-expired:oldToken"]["category"] == "secret-expired" and 'search({ entity: "secret:oldToken" })' in by_id["secret-expired:oldToken"]["nextStep"]
    assert 'search({ entity: "package:home-controls" })' in by_id["secret-expired:home-controls:shadeKey"]["nextStep"]
    assert by_id["oauth-reconnect:spotify"]["integration"] == "spotify" and "refresh token revoked" in by_id["oauth-reconnect:spotify"]["nextStep"]
    assert by_id["mcp-reconnect:home"]["title"] == "MCP server home disconnected" and "OAuth grant revoked" in by_id["mcp-reconnect:home"]["nextStep"]
    assert by_id["mcp-reconnect:garage"]["status"] == "degraded"
    known = _catalog_callables(CAPABILITIES + ALICE_STATE)
    assert_names_exist(listed, known)
    ranked = await search(lexical_client, {"query": "send an email"}, caller=ALICE)
    block = ranked["structuredContent"]["waiting"]
    assert block["total"] == 5 and block["more"] == 2 and [i["id"] for i in block["items"]] == [i["id"] for i in items[:3]]
    assert "## Waiting\n- **MCP server home disconnected** (block) — Ask the user to reconnect the MCP server home" in ranked["content"]
    assert_names_exist(ranked, known)
    bob = await _waiting(lexical_client, BOB)
    assert {i["id"] for i in bob["structuredContent"]["items"]} == {"secret-expired:bobToken", "oauth-reconnect:dropbox", "mcp-reconnect:bobhome"}
    assert not {"bobToken", "dropbox", "bobhome"} & {str(v) for item in items for v in item.values()}


async def test_org_state_reaches_org_members_only_and_an_ingested_item_stands_in_for_a_derived_one(lexical_client: Any) -> None:
    await put(lexical_client, [{"type": "secret", "id": "orgToken", "expiresAt": "2022-02-02"}], owner="org", caller=ALICE)
    await put(lexical_client, INTEGRATIONS, caller=ALICE)
    await put(lexical_client, [{"type": "waiting", "id": "spotify-grant", "title": "Spotify needs a new grant", "status": "block", "category": "oauth-reconnect", "integration": "spotify", "nextStep": "Reconnect Spotify in settings."}], caller=ALICE)
    alice = {i["id"]: i for i in (await _waiting(lexical_client, ALICE))["structuredContent"]["items"]}
    assert set(alice) == {"secret-expired:orgToken", "spotify-grant"}  # the ingested item replaces the derived reconnect
    colleague = await _waiting(lexical_client, auth("carol", org="acme"))
    assert [i["id"] for i in colleague["structuredContent"]["items"]] == ["secret-expired:orgToken"]
    outsider = await _waiting(lexical_client, BOB)
    assert outsider["structuredContent"]["items"] == [] and outsider["structuredContent"]["nextStep"] == "Nothing is waiting on the user."


async def test_state_fields_are_validated_and_the_server_detail_says_it_is_disconnected(lexical_client: Any) -> None:
    bad_expiry = await put(lexical_client, [{"type": "secret", "id": "t", "expiresAt": "next tuesday"}], status=400)
    assert "entities[0].expiresAt" in bad_expiry["error"]["message"] and "ISO 8601" in bad_expiry["error"]["message"]
    bad_status = await put(lexical_client, [_server("home", "asleep")], status=400)
    assert "connected, degraded, disconnected" in bad_status["error"]["message"]
    await put(lexical_client, [_server("home", "disconnected", "OAuth grant revoked")])
    detail = await search(lexical_client, {"entity": "mcp-server:home"})
    server = detail["structuredContent"]["results"][0]
    assert server["connection"]["status"] == "disconnected" and "Connection: disconnected" in detail["content"]
    assert detail["structuredContent"]["nextStep"] == server["nextStep"] and "reconnect the MCP server home" in server["nextStep"]
    await put(lexical_client, [_server("home", "connected")])
    assert (await _waiting(lexical_client, auth("alice")))["structuredContent"]["items"] == []
