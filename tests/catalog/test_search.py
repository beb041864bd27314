"""Ranked search, broad queries and domains, exports, MCP servers, hidden and exact packages (points 2-4, 6)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.callers import ADMIN
from tests.catalog.fixtures import (
    CAPABILITIES,
    DOMAINS,
    HIDDEN_PACKAGE,
    MCP_HOME,
    home_package,
    put,
    refs,
    search,
)


async def test_ranked_cards_carry_type_title_summary_ref_domain_and_call_shape(seeded: Any) -> None:
    answer = await search(seeded, {"query": "send an email to Kent"})
    doc = answer["structuredContent"]
    assert doc["kind"] == "ranked" and doc["mode"] == "hybrid" and answer["isError"] is False
    top = doc["results"][0]
    assert top["entity"] == "capability:emailSend" and top["type"] == "capability"
    assert top["domain"] == "email" and top["title"] == "emailSend" and top["summary"].startswith("Send an email")
    assert top["callShape"] == "kody.emailSend(params: { to: string[]; subject: string; body: string })"
    assert "email" in top["whyMatched"]
    # the markdown carries the same substance
    content = answer["content"]
    for fragment in ("`capability:emailSend`", "domain `email`", top["callShape"], "Why: ", doc["nextStep"]):
        assert fragment in content
    assert "entitlement" not in doc
    # no shared word with any capability: only the model can find it
    semantic = (await search(seeded, {"query": "write to a colleague by mail"}))["structuredContent"]["results"]
    top_email = next(r for r in semantic if r["entity"].startswith("capability:email"))
    assert top_email["entity"] == "capability:emailSend" and semantic.index(top_email) < 3


async def test_call_shapes_inline_on_the_top_three_capabilities_only_and_collapse_long_types(lexical_client: Any) -> None:
    long_type = "{\n" + "\n".join(f"    field{i}: string;" for i in range(40)) + "\n}"
    caps = [{"type": "capability", "id": f"reportMake{i}", "domain": "reports", "summary": f"Make report number {i}.", "inputType": long_type} for i in range(4)]
    await put(lexical_client, caps, caller=ADMIN)
    doc = (await search(lexical_client, {"query": "make a report"}))["structuredContent"]
    shapes = [r.get("callShape") for r in doc["results"]]
    assert len(shapes) == 4 and all(shapes[:3]) and shapes[3] is None
    assert "\n" not in shapes[0] and shapes[0].endswith("…)") and len(shapes[0]) <= 180
    assert doc["notices"] and doc["notices"][0] == "embeddings are not configured; lexical results only"


async def test_strong_export_is_its_own_hit_with_contract_and_medium_one_is_a_hint(lexical_client: Any) -> None:
    await put(lexical_client, [home_package()])
    strong = (await search(lexical_client, {"query": "bond area shades"}))["structuredContent"]["results"]
    assert strong[0]["entity"] == "package:home-controls#bond-area-shades" and strong[0]["type"] == "package-export"
    contract = strong[0]["contract"]
    assert contract["importSpecifier"] == "@alice/home-controls/bond-area-shades"
    assert "setBondAreaShades(params)" in contract["execute"] and contract["signature"].startswith("function setBondAreaShades")
    medium = (await search(lexical_client, {"query": "house lights"}))["structuredContent"]["results"]
    assert [r["entity"] for r in medium] == ["package:home-controls"]
    assert medium[0]["bestActions"][0]["entity"] == "package:home-controls#porch-lights"
    overview = (await search(lexical_client, {"query": "home controls package"}))["structuredContent"]["results"]
    assert all(r["type"] != "package-export" for r in overview)


async def test_hidden_packages_leave_ranked_results_unless_asked(lexical_client: Any) -> None:
    await put(lexical_client, [HIDDEN_PACKAGE])
    assert refs(await search(lexical_client, {"query": "water the garden plants"})) == []
    shown = await search(lexical_client, {"query": "water the garden plants", "includeHiddenPackages": True})
    assert refs(shown) == ["package:secret-garden"] and shown["structuredContent"]["results"][0]["hidden"] is True
    detail = await search(lexical_client, {"entity": "package:secret-garden"})
    assert detail["structuredContent"]["results"][0]["hidden"] is True


async def test_mcp_servers_rank_as_servers_their_tools_stay_out_and_wrapper_packages_rank_with_them(lexical_client: Any) -> None:
    await put(lexical_client, [MCP_HOME, home_package()])
    answer = await search(lexical_client, {"query": "thermostat temperature"})
    assert refs(answer)[0] == "mcp-server:home"
    assert not any(r.startswith("capability:mcp:") for r in refs(answer))
    assert answer["structuredContent"]["results"][0]["instructions"] == "Always confirm before unlocking doors."
    paired = answer["structuredContent"]["results"][1]
    assert paired["entity"] == "package:home-controls" and paired["rankedWith"] == "mcp-server:home"
    assert "Ranked with `mcp-server:home`" in answer["content"]
    scoped = await search(lexical_client, {"query": "thermostat temperature", "domain": "mcp:home"})
    assert set(refs(scoped)) == {"capability:mcp:home:get_temperature", "capability:mcp:home:set_temperature"}
    assert scoped["structuredContent"]["results"][0]["callShape"].startswith('kody.mcp["home"].')


async def test_broad_queries_return_the_domain_index_and_task_queries_rank(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [MCP_HOME])
    for query in ("", "what can you do with email", "what can kody do", "jobs", "list capabilities", "mcp:home"):
        doc = (await search(lexical_client, {"query": query}))["structuredContent"]
        assert doc["kind"] == "domain-index", query
        assert "telemetry" not in doc and "memories" not in doc and "waiting" not in doc
    rows = {r["domain"]: r for r in doc["results"]}
    assert rows["email"] == {
        "type": "domain",
        "entity": None,
        "domain": "email",
        "description": "Send and read email.",
        "capabilityCount": 3,
        "samples": ["emailSend", "emailList", "emailRead"],
        "source": "builtin",
    }
    assert rows["mcp:home"]["capabilityCount"] == 3 and rows["mcp:home"]["source"] == "mcp"
    index = await search(lexical_client, {"query": "what can you do with email"})
    assert index["structuredContent"]["results"][0]["domain"] == "email"
    assert "| `email` | Send and read email. | 3 |" in index["content"]
    assert (await search(lexical_client, {"query": "send an email to Kent"}))["structuredContent"]["kind"] == "ranked"


async def test_domain_scope_ranks_or_lists_one_domain_and_unknown_domains_list_valid_ones(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [home_package(summary="Send email digests of shade changes.")])
    ranked = (await search(lexical_client, {"query": "send email", "domain": "email"}))["structuredContent"]
    assert ranked["kind"] == "ranked" and ranked["domain"] == "email"
    assert refs({"structuredContent": ranked})[0] == "capability:emailSend"
    assert all(r["domain"] == "email" for r in ranked["results"])  # no packages in a domain scope
    listing = await search(lexical_client, {"domain": "email"})
    assert listing["structuredContent"]["kind"] == "domain-listing"
    assert refs(listing) == ["capability:emailSend", "capability:emailList", "capability:emailRead"]
    assert [bool(r.get("callShape")) for r in listing["structuredContent"]["results"]] == [True, True, True]
    assert "telemetry" not in listing["structuredContent"]
    unknown = await search(lexical_client, {"domain": "calendar"}, status=400)
    assert unknown["error"]["code"] == "unknown_domain"
    assert "email, jobs, packages" in unknown["error"]["message"]


async def test_exact_package_identity_by_leaf_uuid_and_urls(lexical_client: Any) -> None:
    package_uuid = str(uuid.uuid4())
    await put(lexical_client, [home_package(), home_package(id=package_uuid, name="@alice/weather-station", summary="Weather readings.")])
    await put(lexical_client, CAPABILITIES, caller=ADMIN)
    queries = [
        ("home-controls", "package:home-controls"),
        ("@alice/home-controls", "package:home-controls"),
        (package_uuid, f"package:{package_uuid}"),
        (f"https://kody.example/account/packages/{package_uuid}", f"package:{package_uuid}"),
        ("/@alice/home-controls", "package:home-controls"),
        ("https://alice.apps.example/weather-station", f"package:{package_uuid}"),
        ("https://alice.apps.example/packages/home-controls", "package:home-controls"),
    ]
    for query, expected in queries:
        doc = (await search(lexical_client, {"query": query}))["structuredContent"]
        assert doc["kind"] == "exact-package", query
        assert [r["entity"] for r in doc["results"]] == [expected] and doc["results"][0]["exact"] is True
        assert "telemetry" not in doc and "phaseTimings" not in doc
    # another user's profile URL does not resolve to alice's package of the same name
    assert (await search(lexical_client, {"query": "/@mallory/home-controls"}))["structuredContent"]["kind"] == "ranked"


async def test_hidden_exact_match_needs_the_flag_and_a_package_naming_an_mcp_server_ranks(lexical_client: Any) -> None:
    await put(lexical_client, [HIDDEN_PACKAGE, MCP_HOME, home_package(id="home", name="@alice/home")])
    hidden = (await search(lexical_client, {"query": "secret-garden"}))["structuredContent"]
    assert hidden["kind"] == "ranked" and hidden["results"] == []
    shown = (await search(lexical_client, {"query": "secret-garden", "includeHiddenPackages": True}))["structuredContent"]
    assert shown["kind"] == "exact-package"
    both = (await search(lexical_client, {"query": "home"}))["structuredContent"]
    assert both["kind"] == "ranked"
    assert {"mcp-server:home", "package:home"} <= {r["entity"] for r in both["results"]}


async def test_search_input_errors_are_400(lexical_client: Any) -> None:
    cases = [
        ({"query": 5}, "query must be a string"),
        ({"query": "x", "limit": 0}, "limit must be between 1 and 50"),
        ({"query": "x", "limit": -51}, "limit must be between 1 and 50"),
        ({"query": "x", "maxResponseSize": 10}, "maxResponseSize must be between"),
        ({"query": "x", "bogus": 1}, "unknown field 'bogus'"),
        ({"query": "x", "entity": "guide:a"}, "cannot be combined"),
        ({"domain": "  "}, "domain must not be empty"),
    ]
    for body, message in cases:
        answer = await search(lexical_client, body, status=400)
        assert message in answer["error"]["message"], (body, answer)
