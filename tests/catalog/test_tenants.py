"""Two tenants never see each other's packages, secrets, MCP servers or memories: hits, counts, domains, suggestions, errors."""

from __future__ import annotations

from typing import Any

from tests.callers import ADMIN, auth
from tests.catalog.fixtures import CAPABILITIES, DOMAINS, INTEGRATIONS, MCP_HOME, home_package, put, refs, search

ALICE_ENTITIES = [
    home_package(),
    MCP_HOME,
    {"type": "secret", "id": "homeToken", "description": "Token for the home thermostat API."},
    {"type": "package", "id": "spotify-tools", "name": "spotify-tools", "summary": "Spotify playlist helpers.", "tags": ["spotify"]},
    {"type": "memory", "id": "m1", "text": "Alice keeps the thermostat at 21 degrees."},
    {"type": "waiting", "id": "w1", "title": "Reconnect the home server", "status": "block"},
]
BOB_ENTITIES = [
    {"type": "mcp-server", "id": "garage", "description": "Garage door opener.", "tools": [{"name": "open_door", "description": "Open the garage door."}]},
    INTEGRATIONS[1],  # spotify, so suggestions would show alice's spotify-tools if tenants leaked
]


async def test_two_tenants_never_see_each_other(lexical_client: Any) -> None:
    client = lexical_client
    await put(client, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(client, ALICE_ENTITIES, caller=auth("alice"))
    await put(client, BOB_ENTITIES, caller=auth("bob"))

    for query in ("home thermostat", "thermostat token", "shades lights", "spotify playlist"):
        bob_refs = refs(await search(client, {"query": query}, caller=auth("bob")))
        assert not any(ref.endswith(("home-controls", "homeToken", ":home", "spotify-tools")) for ref in bob_refs), (query, bob_refs)
    bob_thermostat = (await search(client, {"query": "thermostat"}, caller=auth("bob")))["structuredContent"]
    # bob's Waiting block holds his own state alone (his spotify needs reconnecting), never alice's item
    assert bob_thermostat["memories"] == [] and [i["id"] for i in bob_thermostat["waiting"]["items"]] == ["oauth-reconnect:spotify"]
    assert "home" not in (await search(client, {"query": "thermostat"}, caller=auth("bob")))["content"].lower()

    bob_domains = [r["domain"] for r in (await search(client, {"query": ""}, caller=auth("bob")))["structuredContent"]["results"]]
    alice_domains = [r["domain"] for r in (await search(client, {"query": ""}, caller=auth("alice")))["structuredContent"]["results"]]
    assert "mcp:home" not in bob_domains and "mcp:garage" in bob_domains
    assert "mcp:garage" not in alice_domains and "mcp:home" in alice_domains

    unknown = await search(client, {"domain": "mcp:home"}, status=400, caller=auth("bob"))
    assert "mcp:home" not in unknown["error"]["message"].split("available domains:")[1]
    for ref in ("package:home-controls", "mcp-server:home", "secret:homeToken", "capability:mcp:home:set_pin"):
        missing = await search(client, {"entity": ref}, status=404, caller=auth("bob"))
        assert "alice" not in str(missing).lower()

    spotify = (await search(client, {"entity": "integration:spotify"}, caller=auth("bob")))["structuredContent"]["results"][0]
    assert spotify["relatedPackages"] == []
    assert (await search(client, {"query": "spotify-tools"}, caller=auth("bob")))["structuredContent"]["kind"] == "ranked"
    assert (await search(client, {"query": "home-controls"}, caller=auth("bob")))["structuredContent"]["results"] == []

    bob_counts = await (await client.get("/v1/index/status", headers=auth("bob"))).json()
    alice_counts = await (await client.get("/v1/index/status", headers=auth("alice"))).json()
    builtins = len(DOMAINS) + len(CAPABILITIES)
    assert bob_counts["surfaces"]["catalog"]["records"] == builtins + 2 + 1  # server + tool, integration
    assert alice_counts["surfaces"]["catalog"]["records"] > bob_counts["surfaces"]["catalog"]["records"]
