"""``ranked_hits`` is the served ranking without the rendering: its hits are the answer's results, in order."""

from __future__ import annotations

from typing import Any

from service.catalog.answers import SearchContext
from service.catalog.ranked import ranked_filter, ranked_hits, read_whole
from service.catalog.ranking import RANK_FIELDS, retrieve
from service.catalog.search import parse_body
from service.catalog.state import catalog_index
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


async def test_candidates_carry_the_ranking_fields_and_the_hits_shown_carry_every_field(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    await put(lexical_client, [home_package()])
    engine = lexical_client.server.app[ENGINE]
    caller = caller_of(auth("alice"))
    retrieval = await retrieve(engine, "send an email", ranked_filter(caller, None, False), fields=RANK_FIELDS)
    assert retrieval.hits and all(set(hit.payload) <= set(RANK_FIELDS) for hit in retrieval.hits)
    ranked = await ranked_hits(SearchContext(engine, caller, parse_body({"query": "send an email"}), Deadline(20.0)), "send an email", None)
    stored = await catalog_index(engine).get_many([str(hit.payload["key"]) for hit in ranked.hits])
    assert ranked.hits and all(dict(hit.payload) == dict(stored[str(hit.payload["key"])]) for hit in ranked.hits)
    assert all("embed_text" in hit.payload for hit in ranked.hits)  # a field ranking never reads
    answer = (await search(lexical_client, {"query": "send an email"}))["structuredContent"]
    top = answer["results"][0]
    assert top["entity"] == "capability:emailSend" and "to: string[]" in str(top)  # its input type, read whole


async def test_a_record_deleted_between_ranking_and_reading_drops_out(lexical_client: Any) -> None:
    await put(lexical_client, [home_package(), home_package(id="porch-controls", name="@alice/porch-controls", summary="Porch lights and shades.", exports=[])])
    engine = lexical_client.server.app[ENGINE]
    caller = caller_of(auth("alice"))
    retrieval = await retrieve(engine, "porch lights shades", ranked_filter(caller, None, False), fields=RANK_FIELDS)
    entities = [hit.entity for hit in retrieval.hits]
    assert {"package:home-controls", "package:porch-controls"} <= set(entities)
    response = await lexical_client.delete("/v1/catalog/entities/package:home-controls", headers=auth())
    assert response.status == 200
    left = [hit.entity for hit in await read_whole(engine, retrieval.hits)]
    assert left == [e for e in entities if not e.startswith("package:home-controls")]  # the package and its exports
    assert "package:porch-controls" in left
