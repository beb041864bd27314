"""Ranking on real agent requests (real model): several intents in one request, parent evidence, channel modes."""

from __future__ import annotations

from typing import Any

from tests.callers import ADMIN
from tests.catalog.fixtures import put, refs, search, wait_embedded

TOOLS = [
    {"type": "domain", "id": "weather", "description": "Weather forecasts, rain, temperature and climate for any city"},
    {"type": "domain", "id": "markets", "description": "Stock markets: share prices, tickers and company financials"},
    {"type": "domain", "id": "files", "description": "Files and documents: save, read and share text files"},
    {"type": "capability", "id": "forecastCity", "domain": "weather", "title": "forecastCity", "summary": "The weather forecast for a city for the next days."},
    {"type": "capability", "id": "rainAlerts", "domain": "weather", "title": "rainAlerts", "summary": "Severe weather and rain warnings in effect for a region."},
    {"type": "capability", "id": "stockQuote", "domain": "markets", "title": "stockQuote", "summary": "The current share price of a company by its ticker."},
    {"type": "capability", "id": "companyNews", "domain": "markets", "title": "companyNews", "summary": "Latest news articles about a listed company."},
    {"type": "capability", "id": "saveFile", "domain": "files", "title": "saveFile", "summary": "Write text to a file in the workspace.", "inputType": "{ path: string; text: string }"},
    {"type": "capability", "id": "readFile", "domain": "files", "title": "readFile", "summary": "Read a text file from the workspace."},
    {"type": "capability", "id": "listSnapshots", "domain": "files", "title": "listSnapshots", "summary": "List the stored snapshots of a folder with their dates."},
]


async def _loaded(client: Any) -> Any:
    await put(client, TOOLS, caller=ADMIN)
    await wait_embedded(client)
    return client


async def test_each_intent_of_a_long_request_reaches_the_top(client: Any) -> None:
    """A request for three things ranks a tool for each of them in the first three, and says which intent each answers."""
    await _loaded(client)
    query = "What will the weather be like in Lisbon tomorrow? Then get me the current share price of Apple and save a short summary to a file"
    answer = await search(client, {"query": query, "limit": 5})
    doc = answer["structuredContent"]
    assert len(doc["intents"]) == 3 and doc["intents"][0].startswith("What will the weather")
    top = refs(answer)[:3]
    assert {"capability:forecastCity", "capability:stockQuote", "capability:saveFile"} == set(top), top
    stock = next(r for r in doc["results"] if r["entity"] == "capability:stockQuote")
    assert any(line.startswith("intent: get me the current share price") for line in stock["whyMatched"])
    assert stock["scoreFrom"]["intents"] and stock["scoreFrom"]["cosine"] is not None


async def test_a_short_request_is_one_intent(client: Any) -> None:
    await _loaded(client)
    doc = (await search(client, {"query": "weather forecast for Paris"}))["structuredContent"]
    assert "intents" not in doc and refs({"structuredContent": doc})[0] == "capability:forecastCity"


async def test_the_parent_domain_that_matches_the_request_lifts_its_members(client: Any) -> None:
    """"Snapshots" alone would fit any listing; the request is about stock prices, so the markets domain's
    members gain on the files domain's, and whyMatched shows the parent's match."""
    await _loaded(client)
    answer = await search(client, {"query": "share price history of a listed company"})
    results = answer["structuredContent"]["results"]
    assert refs(answer)[0] in {"capability:stockQuote", "capability:companyNews"}
    top = results[0]
    assert top["scoreFrom"]["parent"]["entity"] == "domain:markets"
    assert any(line.startswith("parent domain:markets matches the query") for line in top["whyMatched"])
    files = [r for r in results if r["domain"] == "files"]
    assert all(r["scoreFrom"]["parent"]["cosine"] < top["scoreFrom"]["parent"]["cosine"] for r in files)


async def test_ranking_asks_for_one_channel_alone_and_a_bad_value_is_400(client: Any) -> None:
    await _loaded(client)
    lexical = (await search(client, {"query": "rain warnings", "ranking": "lexical"}))["structuredContent"]
    assert lexical["ranking"] == "lexical" and lexical["mode"] == "lexical" and refs({"structuredContent": lexical})[0] == "capability:rainAlerts"
    dense = (await search(client, {"query": "is a storm coming", "ranking": "dense"}))["structuredContent"]
    assert dense["ranking"] == "dense" and dense["mode"] == "dense" and dense["results"]
    assert all(r.get("scoreFrom") is None for r in dense["results"])  # a channel alone: nothing of the served ranking
    error = await search(client, {"query": "rain", "ranking": "bm25"}, status=400)
    assert "ranking must be one of served, lexical, dense" in error["error"]["message"]
    empty = await search(client, {"query": "rain", "ranking": ""}, status=400)  # empty is not the default
    assert "got ''" in empty["error"]["message"]
