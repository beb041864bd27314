"""Catalog search facts no other test pinned: which kinds rank, hidden packages, domain listings and
their call shapes, the next steps a hit carries, export detail, batch refs of other owners, the
deadline answer, each plan's rate-limit ceilings, and the rerank stage against a real scorer."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from service.auth import Caller, Plan
from service.catalog import render
from service.catalog.search import SEARCH
from service.engine.deadline import Deadline
from service.engine.runtime import Engine
from service.ratelimit import PLAN_LIMITS, Surface
from service.settings import Settings
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
    refs,
    reranking_app,
    search,
)
from tests.helpers import stand_in, with_settings


async def test_guides_and_user_secrets_rank_but_package_scoped_secrets_never_do(lexical_client: Any) -> None:
    await put(lexical_client, GUIDES, caller=ADMIN)
    await put(lexical_client, [home_package(), *SECRETS])
    guides = (await search(lexical_client, {"query": "subscribe packages to repository events"}))["structuredContent"]["results"]
    assert guides[0]["entity"] == "guide:package_subscriptions" and guides[0]["type"] == "guide"
    secrets = (await search(lexical_client, {"query": "github personal access token"}))["structuredContent"]["results"]
    assert secrets[0]["entity"] == "secret:githubPat" and secrets[0]["type"] == "secret"
    deploy = await search(lexical_client, {"query": "github deploy key used by the package"})
    assert not any("deployKey" in ref for ref in refs(deploy)) and "deployKey" not in deploy["content"]


async def test_exact_entity_lookup_of_a_hidden_package_by_uuid_and_name_leaf(lexical_client: Any) -> None:
    package_uuid = str(uuid.uuid4())
    hidden = {"type": "package", "id": package_uuid, "name": "@alice/night-garden", "summary": "Water the night garden.", "hidden": True}
    await put(lexical_client, [hidden])
    for ref in (f"package:{package_uuid}", "package:night-garden"):
        detail = (await search(lexical_client, {"entity": ref}))["structuredContent"]["results"][0]
        assert detail["ok"] is True and detail["entity"] == f"package:{package_uuid}" and detail["hidden"] is True, ref
    for query in (package_uuid, "night-garden", "water the night garden"):
        assert refs(await search(lexical_client, {"query": query})) == [], query
    shown = (await search(lexical_client, {"query": package_uuid, "includeHiddenPackages": True}))["structuredContent"]
    assert shown["kind"] == "exact-package" and refs({"structuredContent": shown}) == [f"package:{package_uuid}"]


async def test_mcp_tool_hits_in_a_server_scope_carry_the_mcp_domain(lexical_client: Any) -> None:
    await put(lexical_client, [MCP_HOME])
    answer = await search(lexical_client, {"query": "thermostat temperature", "domain": "mcp:home"})
    results = answer["structuredContent"]["results"]
    assert results and all(r["domain"] == "mcp:home" and r["type"] == "capability" for r in results)
    assert "domain `mcp:home`" in answer["content"]


async def test_domain_listing_inlines_call_shapes_on_the_top_three_only(lexical_client: Any) -> None:
    caps = [{"type": "capability", "id": f"reportMake{i}", "domain": "reports", "summary": f"Make report {i}.", "inputType": "{ id: string }", "order": i} for i in range(5)]
    await put(lexical_client, caps, caller=ADMIN)
    listing = (await search(lexical_client, {"domain": "reports"}))["structuredContent"]
    assert [r["entity"] for r in listing["results"]] == [f"capability:reportMake{i}" for i in range(5)]
    assert [bool(r.get("callShape")) for r in listing["results"]] == [True, True, True, False, False]


async def test_unknown_domain_with_a_query_also_lists_the_valid_domains(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [MCP_HOME])
    answer = await search(lexical_client, {"query": "send an email", "domain": "mail"}, status=400)
    assert answer["error"]["code"] == "unknown_domain"
    assert answer["error"]["message"].endswith("available domains: email, jobs, packages, mcp:home")


async def test_ranked_integration_hits_carry_the_reconnect_step_only_when_reconnectable(lexical_client: Any) -> None:
    await put(lexical_client, INTEGRATIONS)
    answer = await search(lexical_client, {"query": "spotify playlists and playback"})
    spotify = answer["structuredContent"]["results"][0]
    assert spotify["entity"] == "integration:spotify" and spotify["nextStep"].startswith("Reconnect Spotify")
    assert "refresh token revoked" in spotify["nextStep"] and f"Next step: {spotify['nextStep']}" in answer["content"]
    assert set(spotify) <= {"type", "entity", "title", "summary", "score", "whyMatched", "scoreFrom", "nextStep"}  # summary-only
    github = (await search(lexical_client, {"query": "github repositories and issues"}))["structuredContent"]["results"][0]
    assert github["entity"] == "integration:github" and "nextStep" not in github and "tokenUrl" not in github


async def test_ranked_package_hits_carry_the_absorb_notice_only_when_the_fork_is_outdated(lexical_client: Any) -> None:
    outdated = home_package(fork={"upstream": "@kody/home-controls", "listingPin": "abc", "tipAncestors": ["def"]})
    current = {
        "type": "package",
        "id": "weather-station",
        "name": "@alice/weather-station",
        "summary": "Weather station readings.",
        "fork": {"upstream": "@kody/weather-station", "listingPin": "abc", "tipAncestors": ["abc", "def"]},
    }
    await put(lexical_client, ABSORB_CAPABILITIES, caller=ADMIN)  # the absorb step names these calls only when the catalog has them
    await put(lexical_client, [outdated, current])
    home = (await search(lexical_client, {"query": "lights and shades"}))["structuredContent"]["results"][0]
    assert home["entity"] == "package:home-controls" and home["listingAhead"] is True
    assert "kody.communityGet" in home["nextStep"] and "absorbed_upstream_commit" in home["nextStep"]
    weather = (await search(lexical_client, {"query": "weather station readings"}))["structuredContent"]["results"][0]
    assert weather["entity"] == "package:weather-station" and "listingAhead" not in weather and "nextStep" not in weather
    detail = (await search(lexical_client, {"entity": "package:weather-station"}))["structuredContent"]["results"][0]
    assert "listingAhead" not in detail


async def test_export_detail_lists_functions_only_for_multi_callable_modules(lexical_client: Any) -> None:
    package = home_package(
        exports=[
            {
                "subpath": "./lights",
                "purpose": "Switch lights.",
                "functions": [
                    {"name": "lightsOn", "signature": "(params: { room: string }) => Promise<void>", "purpose": "Turn a room's lights on."},
                    {"name": "lightsOff", "signature": "(params: { room: string }) => Promise<void>", "purpose": "Turn a room's lights off."},
                ],
                "referencedTypes": ["type Room = 'kitchen' | 'hall'"],
            },
            {"subpath": "./fan", "purpose": "Run the fan.", "functions": [{"name": "fanRun", "purpose": "Run the fan."}]},
        ]
    )
    await put(lexical_client, [package])
    answer = await search(lexical_client, {"entity": ["package:home-controls#lights", "package:home-controls#./fan"]})
    lights, fan = answer["structuredContent"]["results"]
    assert [f["name"] for f in lights["functions"]] == ["lightsOn", "lightsOff"]
    assert lights["referencedTypes"] == "type Room = 'kitchen' | 'hall'"
    assert "import { lightsOn } from '@alice/home-controls/lights'" in lights["execute"]
    assert "functions" not in fan and "import { fanRun } from '@alice/home-controls/fan'" in fan["execute"]
    content = answer["content"]
    assert "- function `lightsOff` (params: { room: string }) => Promise<void> — Turn a room's lights off." in content
    assert "type Room = 'kitchen' | 'hall'" in content


async def test_a_batch_resolves_own_refs_and_gives_another_owners_a_per_entity_error(lexical_client: Any) -> None:
    await put(lexical_client, [home_package()])
    await put(lexical_client, [{"type": "mcp-server", "id": "garage", "description": "Garage door opener."}], caller=auth("bob"))
    answer = await search(lexical_client, {"entity": ["package:home-controls", "mcp-server:garage"]})
    own, foreign = answer["structuredContent"]["results"]
    assert answer["isError"] is False and own["ok"] is True
    assert foreign == {"entity": "mcp-server:garage", "ok": False, "error": {"code": "not_found", "message": foreign["error"]["message"]}}
    assert "bob" not in str(answer) and "Garage door" not in str(answer)
    assert "## mcp-server:garage\nError (not_found)" in answer["content"]


def test_the_default_deadline_answer_says_search_did_not_finish_within_20s() -> None:
    assert Settings.__dataclass_fields__["request_deadline_s"].default == 20.0
    assert SEARCH.past_deadline is not None
    answer = SEARCH.past_deadline(20.0, Deadline(20.0))
    assert answer.status == 200 and answer.body["isError"] is True
    assert answer.body["content"].startswith("Search did not finish within 20s") and answer.body["content"] == render.content_of(answer.body["structuredContent"])


async def test_every_plan_has_its_published_minute_and_day_ceilings(engine: Engine) -> None:
    assert {plan.value: limits for plan, limits in PLAN_LIMITS.items()} == {
        "free": (80, 1_000),
        "standard": (160, 5_000),
        "pro": (200, 10_000),
        "max": (240, 25_000),
    }
    minute_start = (int(time.time()) // 86_400) * 86_400 + 120.0
    for plan, (per_minute, _) in PLAN_LIMITS.items():
        caller = Caller(f"burst-{plan.value}", plan=plan)
        for _ in range(per_minute):
            assert await engine.rate_limiter.check(caller, Surface.CATALOG, now=minute_start) is None
        exceeded = await engine.rate_limiter.check(caller, Surface.CATALOG, now=minute_start)
        assert exceeded is not None and exceeded.window == "minute" and exceeded.limit == per_minute
        assert exceeded.as_dict()["code"] == "rate_limited" and 1 <= exceeded.retry_after_s <= 60
    # the day ceiling trips across minutes: 1,000 free searches spread 50 a minute, then one more
    caller = Caller("daily-free", plan=Plan.FREE)
    for i in range(1_000):
        assert await engine.rate_limiter.check(caller, Surface.CATALOG, now=minute_start + (i // 50) * 60) is None
    exceeded = await engine.rate_limiter.check(caller, Surface.CATALOG, now=minute_start + 20 * 60)
    assert exceeded is not None and exceeded.window == "day" and exceeded.limit == 1_000


# ---- the rerank stage end to end, against a real scoring endpoint the test starts ----------------------


@dataclass
class ZeroScorer:
    """A ``/rerank`` endpoint that judges every text irrelevant (Score 0), so only identity matches survive."""

    url: str = ""
    calls: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        return web.json_response([{"index": i, "score": 0.0} for i in range(len(body["texts"]))])


@pytest.fixture
async def zero_scorer() -> AsyncIterator[ZeroScorer]:
    scorer = ZeroScorer()
    app = web.Application()
    app.router.add_post("/rerank", scorer.handle)
    async with stand_in(app) as url:
        scorer.url = url
        yield scorer


# Twelve packages about shared links; three only mention "dropbox shared link" in their summary.
LINK_PACKAGES = [
    *({"type": "package", "id": f"linkkit-{i}", "name": f"linkkit-{i}", "summary": f"Create a shared link for folder set {i}."} for i in range(8)),
    *({"type": "package", "id": f"previewer-{i}", "name": f"previewer-{i}", "summary": "Preview a dropbox shared link in chat."} for i in range(3)),
    {"type": "package", "id": "dropbox", "name": "@alice/dropbox", "summary": "File storage helpers."},
]


async def test_rerank_keeps_identity_matches_and_empties_the_list_when_nothing_passes(settings: Settings, zero_scorer: ZeroScorer) -> None:
    app_settings = with_settings(settings, embeddings_model=None, rerank_enabled=True, rerank_url=zero_scorer.url)
    async with reranking_app(app_settings) as client:
        await put(client, LINK_PACKAGES)
        assert refs(await search(client, {"query": "dropbox"}, caller=auth("alice", plan="pro"))) == ["package:dropbox"]
        kept = await search(client, {"query": "dropbox shared link"}, caller=auth("alice", plan="pro"))
        jev = kept["structuredContent"]["telemetry"]["jevRerank"]
        assert jev["outcome"] == "applied" and jev["keepPath"] == "kept-identity" and jev["aiCallCount"] >= 1
        assert refs(kept) == ["package:dropbox"]  # the packages that only mention the words stay dropped
        assert "jevRerank" in [tile["name"] for tile in kept["timing"]["serverTiming"]]
        empty = await search(client, {"query": "shared link for a folder"}, caller=auth("alice", plan="pro"))
        doc = empty["structuredContent"]
        assert doc["telemetry"]["jevRerank"]["outcome"] == "fallback-empty-after-drop"
        assert doc["telemetry"]["jevRerank"]["keepPath"] == "empty" and doc["results"] == []
        assert "No matches." in empty["content"] and empty["isError"] is False
        calls = zero_scorer.calls
        free = await search(client, {"query": "shared link for a folder"}, caller=auth("alice", plan="free"))
        assert free["structuredContent"]["telemetry"]["jevRerank"] == {"outcome": "skipped-plan", "keepPath": "hybrid"}
        assert len(free["structuredContent"]["results"]) == 10 and zero_scorer.calls == calls
        assert "jevRerank" not in [tile["name"] for tile in free["timing"]["serverTiming"]]


async def test_inlined_contracts_carry_types_and_whole_signatures_in_markdown_too(lexical_client: Any) -> None:
    long_signature = "function setBondAreaShades(params: { " + "; ".join(f"option{i}?: string" for i in range(30)) + " }): Promise<void>"
    package = home_package()
    package["exports"][0]["signature"] = long_signature
    await put(lexical_client, [package])
    answer = await search(lexical_client, {"query": "bond area shades"})
    top = answer["structuredContent"]["results"][0]
    assert "contract" in top, [(r["entity"], r.get("score"), sorted(r)) for r in answer["structuredContent"]["results"]]
    contract = top["contract"]
    assert top["entity"] == "package:home-controls#bond-area-shades"
    assert contract["typeDefinition"] == "type Params = { position: number }" and contract["signature"] == long_signature
    for fragment in (contract["typeDefinition"], long_signature, contract["importSpecifier"], contract["usage"]):
        assert fragment in answer["content"], fragment


async def test_hidden_package_exports_stay_out_of_ranked_results(lexical_client: Any) -> None:
    await put(lexical_client, [home_package(hidden=True)])
    assert refs(await search(lexical_client, {"query": "bond area shades"})) == []
    shown = await search(lexical_client, {"query": "bond area shades", "includeHiddenPackages": True})
    assert refs(shown)[0] == "package:home-controls#bond-area-shades"


async def test_capability_detail_says_to_pass_empty_params_when_nothing_is_required(lexical_client: Any) -> None:
    await put(lexical_client, CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [MCP_HOME])
    refs_ = ["capability:emailSend", "capability:emailList", "capability:jobList", "capability:mcp:home:set_pin", "capability:mcp:home:get_temperature"]
    answer = await search(lexical_client, {"entity": refs_})
    steps = [r["nextStep"] for r in answer["structuredContent"]["results"]]
    required = "Run the execute snippet with params matching the input type."
    empty = "Run the execute snippet with params {} (no field is required)."
    assert steps == [required, empty, empty, required, empty]
    # One "Next step:" per answer (the first item's own step); the other items' steps read "To do:".
    assert answer["content"].count("Next step:") == 1 and f"Next step: {required}" in answer["content"] and f"To do: {empty}" in answer["content"]
