"""``ranked_hits`` is the served ranking without the rendering: its hits are the answer's results, in order."""

from __future__ import annotations

from typing import Any

from service.catalog.answers import SearchContext
from service.catalog.ranked import ranked_hits
from service.catalog.search import parse_body
from service.engine.deadline import Deadline
from service.state import ENGINE
from tests.callers import ADMIN, auth, caller_of
from tests.catalog.fixtures import (
    CAPABILITIES,
    DOMAINS,
    GUIDES,
    INTEGRATIONS,
    MCP_HOME,
    home_package,
    put,
    refs,
    search,
)


async def test_ranked_hits_are_the_served_answers_results_in_its_order(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)
    await put(lexical_client, [home_package(), MCP_HOME, *INTEGRATIONS, {"type": "memory", "id": "m1", "text": "Shades close at sunset."}])
    engine = lexical_client.server.app[ENGINE]
    caller = caller_of(auth("alice"))
    compared = 0
    for query in ("send an email", "bond area shades", "house lights", "close the shades at sunset"):
        answer = (await search(lexical_client, {"query": query}))["structuredContent"]
        request = parse_body({"query": query})
        ranked = await ranked_hits(SearchContext(engine, caller, request, Deadline(20.0)), query, None)
        assert [hit.entity for hit in ranked.hits] == refs({"structuredContent": answer}), query
        assert [m["id"] for m in ranked.memories] == [m["id"] for m in answer["memories"]], query
        assert ranked.retrieval.mode == answer["mode"]
        compared += len(ranked.hits)
    assert compared > 0  # some query found something to compare
