"""Markdown ``content`` and ``structuredContent`` carry the same actionable substance for every answer kind (point 6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.callers import ADMIN
from tests.catalog.fixtures import (
    CAPABILITIES,
    DOMAINS,
    GUIDES,
    INTEGRATIONS,
    MCP_HOME,
    SECRETS,
    home_package,
    put,
    search,
)


def _substance(doc: dict[str, Any]) -> Iterator[str]:
    """Every actionable string of a structured answer that the markdown must also carry."""
    yield from doc.get("notices") or []
    if doc.get("nextStep"):
        yield doc["nextStep"]
    for memory in doc.get("memories") or []:
        yield f"memory:{memory['id']}"
    for item in (doc.get("waiting") or {}).get("items", []):
        yield item["title"]
    for result in doc.get("results") or []:
        for key in ("entity", "callShape", "nextStep", "rankedWith", "domain", "importSpecifier", "accessor", "execute"):
            if result.get(key):
                yield str(result[key])
        yield from result.get("whyMatched") or []
        for action in result.get("bestActions") or []:
            yield action["entity"]
        contract = result.get("contract") or {}
        for key in ("importSpecifier", "usage", "execute"):
            if contract.get(key):
                yield contract[key]
        for export in result.get("exports") or []:
            yield export["entity"]
        for tool in result.get("tools") or []:
            yield tool["entity"]
            yield tool["callShape"]
        for package in result.get("relatedPackages") or []:
            yield package["entity"]
        if result.get("error"):
            yield result["error"]["message"]
    if doc.get("rateLimit"):
        yield doc["rateLimit"]["code"]


def _assert_equivalent(answer: dict[str, Any]) -> None:
    content = answer["content"]
    for fragment in _substance(answer["structuredContent"]):
        if "\n" in fragment:  # code blocks are indented inside list items
            assert all(line.strip() in content for line in fragment.split("\n")), fragment
        else:
            assert fragment in content, (fragment, content)


async def test_every_answer_kind_says_the_same_in_both_channels(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)
    await put(
        lexical_client,
        [
            home_package(),
            MCP_HOME,
            *INTEGRATIONS,
            *SECRETS,
            {"type": "memory", "id": "m1", "text": "Shades close at sunset."},
            {"type": "waiting", "id": "w1", "title": "Reconnect Spotify", "status": "block", "nextStep": "Open the Spotify connection page."},
        ],
    )
    bodies = [
        {"query": "send an email"},
        {"query": "bond area shades"},
        {"query": "house lights"},
        {"query": "thermostat temperature"},
        {"query": "spotify playlists"},
        {"query": "shades sunset"},
        {"query": "home-controls"},
        {"query": ""},
        {"domain": "email"},
        {"domain": "mcp:home"},
        {"query": "lock pin", "domain": "mcp:home"},
        {"entity": ["capability:emailSend", "capability:mcp:home:set_pin", "mcp-server:home", "integration:spotify", "integration:github"]},
        {"entity": ["package:home-controls", "package:home-controls#bond-area-shades", "guide:nope", "secret:githubPat"]},
        {"query": "zzzz qqqq"},
    ]
    kinds = set()
    for body in bodies:
        answer = await search(lexical_client, body)
        kinds.add(answer["structuredContent"]["kind"])
        _assert_equivalent(answer)
    assert kinds == {"ranked", "exact-package", "domain-index", "domain-listing", "entity"}
    failed = await search(lexical_client, {"entity": "guide:nope"}, status=404)
    _assert_equivalent(failed)
    assert failed["structuredContent"]["kind"] == "entity" and failed["isError"] is True
