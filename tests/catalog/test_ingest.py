"""Catalog ingest: every entity type, owner-scoped keys, child diffs, rights and bad input (point 1)."""

from __future__ import annotations

from typing import Any

from service.catalog.keys import COLLECTION, Kind, record_key
from service.state import ENGINE
from tests.callers import ADMIN, auth
from tests.catalog.fixtures import (
    CAPABILITIES,
    GUIDES,
    HIDDEN_PACKAGE,
    INTEGRATIONS,
    MCP_HOME,
    SECRETS,
    home_package,
    put,
    search,
)
from tests.helpers import wait_until


def _engine(client: Any) -> Any:
    return client.server.app[ENGINE]


async def _payload(client: Any, key: str) -> Any:
    return await _engine(client).records("catalog").get(key)


async def test_every_entity_type_is_ingested_under_owner_scoped_keys(lexical_client: Any) -> None:
    client = lexical_client
    await put(client, CAPABILITIES[:1] + GUIDES[:1], caller=ADMIN)
    answer = await put(
        client,
        [
            home_package(),
            HIDDEN_PACKAGE,
            MCP_HOME,
            *INTEGRATIONS,
            *SECRETS,
            {"type": "memory", "id": "m1", "text": "Alice prefers shades half open in the morning."},
            {"type": "waiting", "id": "w1", "title": "Reconnect Spotify", "status": "block", "category": "oauth-reconnect"},
        ],
    )
    assert answer["owner"] == "user:alice"
    labels = [e["entity"] for e in answer["entities"]]
    assert labels == [
        "package:home-controls",
        "package:secret-garden",
        "mcp-server:home",
        "integration:github",
        "integration:spotify",
        "secret:githubPat",
        "secret:home-controls:deployKey",
        "memory:m1",
        "waiting:w1",
    ]
    # package: card + 2 exports + files record; server: card + 3 tools
    assert answer["entities"][0]["records"] == 4
    assert answer["entities"][2]["records"] == 4
    assert await _payload(client, record_key("global", Kind.CAPABILITY, "emailSend"))
    assert await _payload(client, record_key("user:alice", Kind.EXPORT, "home-controls#bond-area-shades"))
    assert await _payload(client, record_key("user:alice", Kind.MCP_TOOL, "home:set_pin"))
    scoped = await _payload(client, record_key("user:alice", Kind.PACKAGE_SECRET, "home-controls:deployKey"))
    assert scoped["ranked"] is False


async def test_secret_with_a_value_is_rejected_and_nothing_is_written(lexical_client: Any) -> None:
    client = lexical_client
    bad = {"type": "secret", "id": "stripeKey", "description": "Stripe", "value": "sk_live_123"}
    answer = await put(client, [home_package(), bad], status=400)
    assert answer["error"]["code"] == "validation_error"
    assert "never accepted" in answer["error"]["message"] and "entities[1].value" in answer["error"]["message"]
    assert await _payload(client, record_key("user:alice", Kind.PACKAGE, "home-controls")) is None
    assert await _payload(client, record_key("user:alice", Kind.SECRET, "stripeKey")) is None


async def test_bad_entities_say_what_to_fix(lexical_client: Any) -> None:
    client = lexical_client
    cases = [
        ({"type": "gadget", "id": "x"}, "not an entity type"),
        ({"type": "package"}, "entities[0].id is required"),
        ({"type": "package", "id": "has space"}, "must not contain whitespace"),
        ({"type": "package", "id": "p", "exports": [{"purpose": "no subpath"}]}, "entities[0].exports[0].subpath is required"),
        ({"type": "package", "id": "p", "surprise": 1}, "unknown field 'surprise'"),
        ({"type": "integration", "id": "gh", "accessToken": "t"}, "tokens and client secrets"),
        ({"type": "waiting", "id": "w", "title": "t", "status": "panic"}, "status must be one of"),
        ({"type": "capability", "id": "mcp:home:x", "domain": "d", "summary": "s"}, "MCP tools"),
    ]
    for entity, message in cases:
        answer = await put(client, [entity], status=400)
        assert message in answer["error"]["message"], (entity, answer)
    empty = await client.put("/v1/catalog/entities", data=b"{not json", headers=auth())
    assert empty.status == 400 and (await empty.json())["error"]["code"] == "invalid_json"


async def test_builtins_need_an_admin_token(lexical_client: Any) -> None:
    client = lexical_client
    answer = await put(client, CAPABILITIES[:1], status=403)
    assert "admin" in answer["error"]["message"]
    response = await client.delete("/v1/catalog/entities/capability:emailSend", headers=auth())
    assert response.status == 403


async def test_same_package_id_of_two_owners_never_touch_each_other(lexical_client: Any) -> None:
    client = lexical_client
    await put(client, [home_package()])
    await put(client, [home_package(summary="Bob's own home package.", exports=[])], caller=auth("bob"))
    alice = await _payload(client, record_key("user:alice", Kind.PACKAGE, "home-controls"))
    bob = await _payload(client, record_key("user:bob", Kind.PACKAGE, "home-controls"))
    assert alice["summary"].startswith("Control lights") and bob["summary"].startswith("Bob's")
    # Bob's re-ingest without exports removed only his exports.
    assert await _payload(client, record_key("user:alice", Kind.EXPORT, "home-controls#porch-lights"))
    response = await client.delete("/v1/catalog/entities/package:home-controls", headers=auth("bob"))
    assert response.status == 200 and (await response.json())["records"] == 2  # card + files
    assert await _payload(client, record_key("user:alice", Kind.PACKAGE, "home-controls"))
    again = await client.delete("/v1/catalog/entities/package:home-controls", headers=auth("bob"))
    assert again.status == 404
    assert "bob" in (await again.json())["error"]["message"] and "alice" not in (await again.json())["error"]["message"]
    detail = await search(client, {"entity": "package:home-controls"})
    assert detail["structuredContent"]["results"][0]["ok"] is True


async def test_delete_removes_children_and_bad_refs_are_400(lexical_client: Any) -> None:
    client = lexical_client
    await put(client, [home_package(), MCP_HOME])
    response = await client.delete("/v1/catalog/entities/mcp-server:home", headers=auth())
    assert (await response.json())["records"] == 4
    assert await _payload(client, record_key("user:alice", Kind.MCP_TOOL, "home:set_pin")) is None
    bad = await client.delete("/v1/catalog/entities/gadget:x", headers=auth())
    assert bad.status == 400 and "unknown entity type" in (await bad.json())["error"]["message"]
    no_colon = await client.delete("/v1/catalog/entities/package", headers=auth())
    assert no_colon.status == 400


async def test_reingest_reembeds_only_changed_tools_and_exports(client: Any) -> None:
    engine = _engine(client)
    await put(client, [MCP_HOME, home_package()])

    async def embedded() -> bool:
        counts = await engine.records("catalog").counts(["user:alice"])
        return counts["records"] > 0 and counts["pending"] == 0

    await wait_until(embedded, timeout_s=240)
    tools = [dict(t) for t in MCP_HOME["tools"]]
    tools[1]["description"] = "Read the current thermostat temperature in Celsius."
    server = {**MCP_HOME, "tools": tools[:2]}  # set_temperature removed, get_temperature changed
    answer = await put(client, [server])
    assert answer["entities"][0] == {"entity": "mcp-server:home", "records": 3, "toEmbed": 2, "removed": 1}
    exports = home_package()["exports"]
    changed = home_package(exports=[exports[0], {**exports[1], "purpose": "Switch the porch lights."}])
    summary = (await put(client, [changed]))["entities"][0]
    assert summary["toEmbed"] == 1 and summary["removed"] == 0  # only the porch-lights export
    unchanged = await _payload(client, record_key("user:alice", Kind.MCP_TOOL, "home:set_pin"))
    assert unchanged["embed_state"] == "done"
    page, _ = await engine.store.scroll(COLLECTION, None, limit=100)
    assert not any(p.payload["key"].endswith("home:set_temperature") for p in page)


async def test_org_owner_shares_with_org_members_only(lexical_client: Any) -> None:
    client = lexical_client
    await put(client, [home_package(id="shared-tools", name="shared-tools")], owner="org", caller=auth("alice", org="acme"))
    assert await _payload(client, record_key("org:acme", Kind.PACKAGE, "shared-tools"))
    member = await search(client, {"entity": "package:shared-tools"}, caller=auth("carol", org="acme"))
    assert member["structuredContent"]["results"][0]["ok"] is True
    outsider = await search(client, {"entity": "package:shared-tools"}, status=404, caller=auth("mallory", org="evil"))
    assert outsider["isError"] is True
    forbidden = await put(client, [home_package()], status=403, owner="team:ops", caller=auth("alice"))
    assert "not one of your tenants" in forbidden["error"]["message"]


async def test_a_repeated_entity_in_one_batch_is_refused_naming_both_positions(lexical_client: Any) -> None:
    """The same package twice in one batch: each copy's stale-child cleanup would delete the other's
    exports after a 200, so the batch is refused whole."""
    client = lexical_client
    first = home_package()
    second = home_package(exports=[{"subpath": "./garage-door", "purpose": "Open or close the garage door."}])
    answer = await put(client, [first, HIDDEN_PACKAGE, second], status=400)
    assert answer["error"]["code"] == "validation_error"
    message = answer["error"]["message"]
    assert "package:home-controls" in message and "entities[0]" in message and "entities[2]" in message, message
    for kind, entity_id in ((Kind.PACKAGE, "home-controls"), (Kind.PACKAGE, "secret-garden"), (Kind.EXPORT, "home-controls#porch-lights")):
        assert await _payload(client, record_key("user:alice", kind, entity_id)) is None, entity_id
    thrice = await put(client, [home_package()] * 3, status=400)
    assert "package:home-controls at entities[0] and entities[1] (and 1 more)" in thrice["error"]["message"]
    # The same id under different types, and one id per owner in separate requests, are fine.
    await put(client, [home_package(), {"type": "memory", "id": "home-controls", "text": "Alice's note."}])
    await put(client, [home_package(id="shared-tools")], owner="org", caller=auth("alice", org="acme"))


async def test_every_acknowledged_package_and_export_of_a_batch_is_retrievable_and_searchable(lexical_client: Any) -> None:
    client = lexical_client
    words = ("amber", "birch", "cedar", "delta", "ember", "fjord")
    packages = [
        home_package(
            id=f"pkg-{word}",
            name=f"@alice/pkg-{word}",
            summary=f"The {word} package.",
            exports=[{"subpath": f"./{word}-{n}", "purpose": f"Toggle the {word} {part} switch."} for n, part in enumerate(("north", "south"))],
        )
        for word in words
    ]
    answer = await put(client, packages)
    assert answer["written"] == len(words) and [e["removed"] for e in answer["entities"]] == [0] * len(words)
    for word in words:
        card = (await search(client, {"entity": f"package:pkg-{word}"}))["structuredContent"]["results"][0]
        assert [e["entity"] for e in card["exports"]] == [f"package:pkg-{word}#{word}-0", f"package:pkg-{word}#{word}-1"]
        for n, part in enumerate(("north", "south")):
            export = (await search(client, {"entity": f"package:pkg-{word}#{word}-{n}"}))["structuredContent"]["results"][0]
            assert export["ok"] is True and export["type"] == "package-export", export
            hits = (await search(client, {"query": f"{word} {part} switch"}))["structuredContent"]["results"]
            assert f"package:pkg-{word}#{word}-{n}" in [hit["entity"] for hit in hits][:3], (word, part, hits)
