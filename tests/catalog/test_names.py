"""Answers name only what exists: every tool, endpoint and runtime call an answer names is an MCP
tool of this server, an HTTP path of its contract or a capability of the catalog; the runtime's
name is a setting; every answer has exactly one next step."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from service.catalog.search import SEARCH
from service.engine.deadline import Deadline
from service.health import load_contract
from service.mcp.tools import tools
from service.settings import Settings, SettingsError
from service.settings_loader import load_settings
from tests.callers import ADMIN, auth
from tests.catalog.fixtures import (
    ABSORB_CAPABILITIES,
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
from tests.helpers import running_app

# Names answers used to give that this service does not have.
MISSING = ("metaListCapabilities", "waitingSummary", "packageGet", "secretList", "codingGuideGet")
_TOOLISH = r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*"
_FENCE = re.compile(r"```.*?```", re.S)
# A name in call position (not a member: those are runtime accessors, checked on their own).
_CALL = re.compile(r"(?<![\w$.\]\"'-])([A-Za-z_$][\w$]*)\(")
_PROSE = re.compile(rf"\b(?:call|calls|use|using|via|run|by)\s+(?:the\s+)?`?({_TOOLISH})\b`?")
_TOOL_WORD = re.compile(rf"`?\b({_TOOLISH})`?\s+tool\b")
_PATH = re.compile(r"(?<![\w.])(/(?:v1|mcp|admin|@)[^\s`'\")]*)")

TOOL_NAMES = frozenset(tool.name.value for tool in tools())
PATHS = tuple(re.compile("^" + re.sub(r"\\\{[^}]+\\\}", r"[^/]+", re.escape(p)) + "$") for p in load_contract()["paths"])


def _catalog_callables(entities: Iterable[dict[str, Any]]) -> frozenset[str]:
    """The capability ids, MCP tools and export functions the test catalog holds: what a runtime call may name."""
    names: set[str] = set()
    for entity in entities:
        if entity["type"] == "capability":
            names.add(entity["id"])
        for tool in entity.get("tools") or []:
            names.add(tool["name"])
        for export in entity.get("exports") or []:
            names.update(re.findall(r"([A-Za-z_$][\w$]*)\(", export.get("signature", "") + export.get("example", "")))
    return frozenset(names)


def named_things(text: str, runtime: str) -> tuple[set[str], set[str], set[str]]:
    """(tool-like names, HTTP paths, runtime members) that ``text`` names outside its code blocks."""
    prose = _FENCE.sub("", text)
    tools_named = set(_CALL.findall(prose)) | set(_PROSE.findall(prose)) | set(_TOOL_WORD.findall(prose))
    paths = {p.rstrip(".,;:") for p in _PATH.findall(prose)}
    members: set[str] = set()
    for server, tool, quoted, flat in re.findall(rf"\b{runtime}\.(?:mcp\[\"([^\"]+)\"\](?:\.([\w$]+)|\[\"([^\"]+)\"\])?|([\w$]+))", prose):
        members |= {name for name in (server, tool, quoted, flat) if name}
    return tools_named, paths, members


def assert_names_exist(answer: dict[str, Any], known_callables: frozenset[str], runtime: str = "kody") -> None:
    content = str(answer["content"])
    tools_named, paths, members = named_things(content, runtime)
    unknown = {name for name in tools_named if name not in TOOL_NAMES and name not in known_callables}
    assert not unknown, (unknown, content)
    assert all(any(p.match(path) for p in PATHS) for path in paths), (paths, content)
    assert members <= known_callables | {"home"}, (members - known_callables, content)
    everything = content + orjson.dumps(answer.get("structuredContent")).decode()
    assert not [name for name in MISSING if name in everything], everything
    assert "inputTypeDefinition" not in content and "inputTypeDefinition" not in str(answer["structuredContent"].get("nextStep"))


def assert_one_next_step(answer: dict[str, Any]) -> None:
    content = str(answer["content"])
    assert content.count("Next step:") == 1, content
    assert f"Next step: {answer['structuredContent']['nextStep']}" in content


ALICE_ENTITIES = [
    home_package(fork={"upstream": "@acme/home-controls", "listingPin": "abc", "tipAncestors": ["def"]}),
    MCP_HOME,
    *INTEGRATIONS,
    *SECRETS,
    {"type": "secret", "id": "oldToken", "description": "An API token that ran out.", "expiresAt": "2020-01-31"},
    {"type": "memory", "id": "m1", "text": "Shades close at sunset."},
    *({"type": "waiting", "id": f"w{i}", "title": f"Confirm billing {i}", "status": "degraded", "category": "other"} for i in range(4)),
]
BODIES: list[dict[str, Any]] = [
    {"query": "send an email"},
    {"query": "package subscriptions repository events"},
    {"query": "bond area shades"},
    {"query": "lights and shades in the house"},
    {"query": "spotify playlists and playback"},
    {"query": "github repositories and issues"},
    {"query": "thermostat temperature"},
    {"query": "github personal access token"},
    {"query": "zzzz qqqq"},
    {"query": "home-controls"},
    {"query": ""},
    {"query": "what can you do with email"},
    {"domain": "email"},
    {"domain": "mcp:home"},
    {"query": "lock pin", "domain": "mcp:home"},
    {"entity": "capability:emailSend"},
    {"entity": "capability:mcp:home:set_pin"},
    {"entity": "mcp-server:home"},
    {"entity": "integration:spotify"},
    {"entity": "integration:github"},
    {"entity": "package:home-controls"},
    {"entity": "package:home-controls#bond-area-shades"},
    {"entity": "package:home-controls#src/index.ts#L10"},
    {"entity": "guide:package_authoring"},
    {"entity": "guide:package_subscriptions#repo.pushed"},
    {"entity": "secret:githubPat"},
    {"entity": ["secret:deployKey", "guide:nope", "capability:jobList"]},
]


async def test_every_answer_names_only_tools_paths_and_capabilities_that_exist(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)
    await put(lexical_client, ALICE_ENTITIES)
    known = _catalog_callables(DOMAINS + CAPABILITIES + GUIDES + ALICE_ENTITIES)
    kinds: set[str] = set()
    types: set[str] = set()
    for body in BODIES:
        answer = await search(lexical_client, body)
        doc = answer["structuredContent"]
        kinds.add(doc["kind"])
        types |= {str(r.get("type")) for r in doc.get("results") or []}
        assert_names_exist(answer, known)
        assert_one_next_step(answer)
    assert kinds == {"ranked", "exact-package", "domain-index", "domain-listing", "entity"}
    assert {"capability", "guide", "package", "package-export", "package-file", "integration", "mcp-server", "secret", "domain"} <= types
    waiting_block = (await search(lexical_client, {"query": "send an email"}))["structuredContent"]["waiting"]
    assert waiting_block["more"] > 0  # the "N more" line was among the scanned answers
    for failing in ({"entity": "secret:deployKey"}, {"entity": ["guide:nope", "package:nope"]}):
        failed = await search(lexical_client, failing, status=404)
        assert_names_exist(failed, known)
        assert_one_next_step(failed)
    package_scoped = await search(lexical_client, {"entity": "secret:deployKey"}, status=404)
    assert 'listed in their package\'s detail: search({ entity: "package:<id>" })' in package_scoped["content"]
    assert SEARCH.past_deadline is not None
    assert_names_exist(SEARCH.past_deadline(20.0, Deadline(20.0)).body, known)
    response = await lexical_client.get("/v1/catalog/waiting", headers=auth(sub="alice"))
    listed = await response.json()
    assert response.status == 200 and listed["structuredContent"]["total"] >= 4
    assert_names_exist(listed, known)
    assert_one_next_step(listed)


async def test_absorb_and_fetch_calls_are_named_only_when_the_catalog_has_them(lexical_client: Any) -> None:
    outdated = home_package(fork={"upstream": "@acme/home-controls", "listingPin": "abc", "tipAncestors": ["def"]})
    await put(lexical_client, [outdated, *INTEGRATIONS])
    without = (await search(lexical_client, {"entity": ["package:home-controls", "integration:github"]}))["structuredContent"]["results"]
    assert "absorb the upstream commits" in without[0]["nextStep"] and "communityGet" not in without[0]["nextStep"]
    assert "createAuthenticatedFetch" not in without[1]["tokens"] and "never returned" in without[1]["tokens"]
    fetch = {"type": "capability", "id": "createAuthenticatedFetch", "domain": "integrations", "summary": "A fetch that signs requests with a saved integration's tokens."}
    await put(lexical_client, [*ABSORB_CAPABILITIES, fetch], caller=ADMIN)
    named = (await search(lexical_client, {"entity": ["package:home-controls", "integration:github"]}))["structuredContent"]["results"]
    assert "kody.communityGet for @acme/home-controls, then kody.repoPublishSession" in named[0]["nextStep"]
    assert "kody.createAuthenticatedFetch('github')" in named[1]["tokens"]


async def test_package_detail_lists_its_package_scoped_secret_references(lexical_client: Any) -> None:
    await put(lexical_client, [home_package(), *SECRETS])
    answer = await search(lexical_client, {"entity": "package:home-controls"})
    detail = answer["structuredContent"]["results"][0]
    assert detail["secrets"] == [{"name": "deployKey", "description": "GitHub deploy key used by the package.", "expiresAt": None}]
    assert "- `deployKey` — GitHub deploy key used by the package." in answer["content"]
    ranked = await search(lexical_client, {"query": "github deploy key"})
    assert "secret:deployKey" not in [r["entity"] for r in ranked["structuredContent"]["results"]]  # still never ranked


@pytest.fixture
async def acme_client(settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    async with running_app(settings, embeddings_model=None, runtime_name="acme") as test_client:
        yield test_client


async def test_call_shapes_and_snippets_use_the_configured_runtime_name(acme_client: Any) -> None:
    await put(acme_client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)
    await put(acme_client, [home_package(), MCP_HOME])
    known = _catalog_callables([*CAPABILITIES, MCP_HOME, home_package()])
    ranked = await search(acme_client, {"query": "send an email"})
    assert ranked["structuredContent"]["results"][0]["callShape"].startswith("acme.emailSend(params: ")
    capability = (await search(acme_client, {"entity": "capability:emailSend"}))["structuredContent"]["results"][0]
    assert capability["execute"].startswith("import { acme } from 'acme:runtime'") and "return await acme.emailSend(params)" in capability["execute"]
    server = await search(acme_client, {"entity": "mcp-server:home"})
    assert server["structuredContent"]["results"][0]["tools"][0]["callShape"].startswith('acme.mcp["home"].set_pin(')
    assert 'acme.mcp["home"].<tool>(params)' in server["structuredContent"]["nextStep"]
    for answer in (ranked, server, await search(acme_client, {"domain": "mcp:home"}), await search(acme_client, {"entity": "capability:mcp:home:set_pin"})):
        assert not re.search(r"\bkody\b", answer["content"] + orjson.dumps(answer["structuredContent"]).decode())
        assert_names_exist(answer, known, runtime="acme")


def test_runtime_name_is_a_validated_setting() -> None:
    assert load_settings({}).runtime_name == "kody"
    assert load_settings({"AGENTSEARCH_RUNTIME_NAME": "acme"}).runtime_name == "acme"
    with pytest.raises(SettingsError, match="AGENTSEARCH_RUNTIME_NAME"):
        load_settings({"AGENTSEARCH_RUNTIME_NAME": "not-valid"})
