"""Entity lookups: guides and fragments, packages and their exports and files, batches, capability and MCP tool detail, integrations (point 5)."""

from __future__ import annotations

from typing import Any

from service.catalog.markdown import DEFAULT_BUDGET_CHARS
from tests.callers import ADMIN
from tests.catalog.fixtures import (
    ABSORB_CAPABILITIES,
    CAPABILITIES,
    GITHUB_PACKAGE,
    GUIDES,
    INTEGRATIONS,
    MCP_HOME,
    SECRETS,
    home_package,
    put,
    search,
)


async def _results(client: Any, entity: Any, status: int = 200, **extra: Any) -> list[dict[str, Any]]:
    answer = await search(client, {"entity": entity, **extra}, status=status)
    return list(answer["structuredContent"]["results"])


async def test_a_guide_section_over_the_budget_is_refused_at_ingest(lexical_client: Any) -> None:
    """The ``no-oversized-guide-section`` lint: every heading's own text fits the entity budget
    left after its header, so opening any heading answers with text; nothing of the batch is written."""
    guide = {"type": "guide", "id": "limits", "title": "Limits", "summary": "How far it goes."}
    header = len("## `guide:limits#big` — Limits\nHow far it goes.\nPart: section #big (contents)\n")
    room = DEFAULT_BUDGET_CHARS - header
    intro = "# Limits\n\nShort intro.\n\n"
    own = "## Big\n\n" + "x" * (room - len("## Big\n\n"))  # exactly the room left

    await put(lexical_client, [{**guide, "markdown": intro + own + "\n\n### Small\n\nA subsection.\n"}], caller=ADMIN)
    opened = (await _results(lexical_client, "guide:limits#big"))[0]
    assert opened["tableOfContents"] is False and opened["markdown"].startswith("## Big")

    over = {**guide, "id": "limits-over", "markdown": intro + own + "x" + "\n"}
    refused = await put(lexical_client, [GUIDES[0], over], status=400, caller=ADMIN)
    message = refused["error"]["message"]
    assert "no-oversized-guide-section" in message and "entities[1].markdown" in message and "section #big" in message
    assert f"{room + 1:,} characters" in message and "split it under subheadings" in message
    missing = await search(lexical_client, {"entity": "guide:limits-over"}, status=404)
    assert missing["error"]["code"] == "not_found"
    assert (await search(lexical_client, {"entity": "guide:package_subscriptions"}, status=404))["isError"] is True


async def test_guides_whole_or_contents_and_heading_and_line_fragments(lexical_client: Any) -> None:
    await put(lexical_client, GUIDES, caller=ADMIN)
    small = (await _results(lexical_client, "guide:package_subscriptions"))[0]
    assert small["part"] == "whole" and small["markdown"] == GUIDES[0]["markdown"]
    big = (await _results(lexical_client, "guide:package_authoring"))[0]
    assert big["tableOfContents"] is True and "`guide:package_authoring#step-3`" in big["markdown"]
    assert len(big["markdown"]) < len(GUIDES[1]["markdown"])
    section = (await _results(lexical_client, "guide:package_subscriptions#repo.pushed"))[0]
    assert section["markdown"] == "## repo.pushed\n\nFires when a repository is pushed."
    line = (await _results(lexical_client, "guide:package_authoring#L165"))[0]
    assert "L165: " in line["markdown"] and "L160: " in line["markdown"] and "L170: " in line["markdown"]
    span = (await _results(lexical_client, "guide:package_authoring#L165-L167"))[0]["markdown"].split("\n")
    assert [row.split(":")[0] for row in span] == ["L165", "L166", "L167"]
    missing = await search(lexical_client, {"entity": "guide:package_subscriptions#repo.deleted"}, status=404)
    assert missing["isError"] is True and missing["error"]["code"] == "fragment_not_found"
    assert "repo.pushed" in missing["content"] and "Fires when" not in missing["content"]
    past_end = await search(lexical_client, {"entity": "guide:package_subscriptions#L900"}, status=404)
    assert "past the end" in past_end["error"]["message"]


async def test_package_index_is_slim_and_fragments_open_exports_and_files(lexical_client: Any) -> None:
    await put(lexical_client, ABSORB_CAPABILITIES, caller=ADMIN)  # the absorb step names these calls only when the catalog has them
    await put(lexical_client, [home_package(fork={"upstream": "@kody/home-controls", "listingPin": "abc", "tipAncestors": ["def"]})])
    index = (await _results(lexical_client, "package:home-controls"))[0]
    assert index["exports"][0] == {
        "entity": "package:home-controls#bond-area-shades",
        "subpath": "bond-area-shades",
        "purpose": "Open or close the bond area shades to a position.",
    }
    assert index["jobs"] == ["nightly-shades"] and index["retrievers"] == ["room-state"]
    assert index["intent"] == "Wrap the home MCP server so shades and lights can be scheduled."
    assert index["listingAhead"] is True and "kody.communityGet" in index["nextStep"] and "kody.repoPublishSession" in index["nextStep"]
    assert "typeDefinition" not in str(index)  # no export tree in the index
    for ref in ("package:home-controls#bond-area-shades", "package:home-controls#./bond-area-shades", "package:@alice/home-controls#bond-area-shades"):
        export = (await _results(lexical_client, ref))[0]
        assert export["type"] == "package-export" and export["importSpecifier"] == "@alice/home-controls/bond-area-shades"
        assert export["typeDefinition"] == "type Params = { position: number }" and export["example"].startswith("await")
        assert "setBondAreaShades(params)" in export["execute"]
    readme = (await _results(lexical_client, "package:home-controls#README.md#export-jsdoc"))[0]
    assert readme["text"] == "## Export JSDoc\n\nEach export documents its purpose with JSDoc."
    lines = (await _results(lexical_client, "package:home-controls#src/index.ts#L165-L180"))[0]["text"].split("\n")
    assert lines[0] == "L165: // line 165" and lines[-1] == "L180: // line 180"
    gone = await search(lexical_client, {"entity": "package:home-controls#src/missing.ts"}, status=404)
    assert "no export or file" in gone["error"]["message"]


async def test_arrays_resolve_each_ref_and_fail_only_when_all_fail(lexical_client: Any) -> None:
    await put(lexical_client, GUIDES + CAPABILITIES, caller=ADMIN)
    results = await _results(lexical_client, ["guide:package_subscriptions", "guide:nope", "gadget:x", "capability:emailSend"])
    assert [r["ok"] for r in results] == [True, False, False, True]
    assert results[1]["error"]["code"] == "not_found" and results[2]["error"]["code"] == "invalid_entity"
    answer = await search(lexical_client, {"entity": ["guide:package_subscriptions", "guide:nope"]})
    assert "Error (not_found)" in answer["content"] and answer["isError"] is False
    all_bad = await search(lexical_client, {"entity": ["gadget:x", "guide:"]}, status=400)
    assert all_bad["isError"] is True and all_bad["error"]["code"] == "invalid_entity"
    too_many = await search(lexical_client, {"entity": [f"guide:g{i}" for i in range(11)]}, status=400)
    assert "at most 10" in too_many["error"]["message"]
    for bad in ("guide", "capability:", "guide:x#", "guide:x#L0", 7, []):
        answer = await search(lexical_client, {"entity": bad}, status=400)
        assert answer["error"]["code"] == "invalid_entity", bad


async def test_capability_and_mcp_tool_detail_carry_execute_snippets_and_types(lexical_client: Any) -> None:
    await put(lexical_client, CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [MCP_HOME])
    cap = (await _results(lexical_client, "capability:emailSend"))[0]
    assert cap["execute"] == "import { kody } from 'kody:runtime'\n\nexport default async function main(params) {\n\treturn await kody.emailSend(params)\n}"
    assert cap["inputTypeDefinition"].startswith("{\n  to: string[]") and cap["outputTypeDefinition"] == "{ messageId: string }"
    pair = await _results(lexical_client, ["capability:mcp:home:set_pin", "capability:mcp:home:get_temperature"])
    tool = pair[0]
    assert tool["accessor"] == 'kody.mcp["home"].set_pin' and tool["relatedOperationCount"] == 2
    assert tool["inputTypeDefinition"] == '{ pin: string; door?: "front" | "back" }'
    assert pair[1]["ok"] is True
    server = (await _results(lexical_client, "mcp-server:mcp:home"))[0]
    assert [t["entity"] for t in server["tools"]] == ["capability:mcp:home:set_pin", "capability:mcp:home:get_temperature", "capability:mcp:home:set_temperature"]
    answer = await search(lexical_client, {"entity": "capability:mcp:home:set_pin"})
    assert "Related operations: 2 other tools on `mcp-server:home`" in answer["content"]
    assert "return await kody.mcp[\"home\"].set_pin(params)" in answer["content"]


async def test_integration_detail_has_operational_details_and_related_packages(lexical_client: Any) -> None:
    await put(lexical_client, [*INTEGRATIONS, GITHUB_PACKAGE, home_package(), *SECRETS])
    github = (await _results(lexical_client, "integration:github"))[0]
    assert github["tokenUrl"] == "https://github.com/login/oauth/access_token" and github["apiBaseUrl"] == "https://api.github.com"
    assert github["clientId"] == "gh-client-123" and github["requiredHosts"] == ["api.github.com"]
    assert [p["entity"] for p in github["relatedPackages"]] == ["package:github-helpers"]
    spotify = (await _results(lexical_client, "integration:spotify"))[0]
    assert "Reconnect Spotify" in spotify["nextStep"]
    secret = (await _results(lexical_client, "secret:githubPat"))[0]
    assert secret["hosts"] == ["api.github.com"] and "value" not in secret
    scoped = await search(lexical_client, {"entity": "secret:deployKey"}, status=404)
    assert "package-scoped" in scoped["error"]["message"]
    ranked = await search(lexical_client, {"query": "github deploy key"})
    assert "secret:deployKey" not in str(ranked)
