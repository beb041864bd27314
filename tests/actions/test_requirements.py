"""Action search facts no other test pinned: the per-query blend of keyword and embedding scores (the
documented weights) with the post-rank bonuses, exclude applied before scoring, and search bodies refused
with a 4xx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from service.actions.index import embed_text, query_words
from service.actions.model import ActionDef, SearchRequest
from service.actions.parsing import parse_template
from service.actions.ranking import GAP_HITS, CandidatePairs, fusion_weights, keyword_evidence
from service.actions.state import catalog_for
from service.actions.visibility import select_units, visible_instances
from service.settings import ProviderSettings, Settings
from service.state import ENGINE
from tests.actions.helpers import (
    HAND_MADE,
    action_counts,
    api_key,
    oauth,
    put_instances,
    put_templates,
    search,
)
from tests.callers import SALES_ALICE, caller_of
from tests.code.conftest import variant
from tests.embedding_server import bag_of_words_vector
from tests.helpers import running_app, wait_until

Client = TestClient[Any, Any]

INSTANCES = (
    oauth("gmail_work", "gmail", "google", account_email="alice@example.com"),
    oauth("gmail_personal", "gmail", "google", connected=False),
    api_key("stripe_test", "stripe"),
    api_key("crm", "hubspot", connected=False),
)
QUERIES = ("send an email", "refund a charge to the customer", "list repositories", "post a message to a channel", "create contact")
RISK_BONUS = {"read": 0.02, "write": 0.01, "delete": 0.0}


def bonus(row: dict[str, Any]) -> float:
    return (0.05 if row["auth"]["connected"] else 0.0) + RISK_BONUS[row["risk"]]


TEMPLATES = {raw["template"]: parse_template(raw) for raw in HAND_MADE}


def cosine(query: str, template: str, action: ActionDef) -> float:
    """What the test's embedding endpoint makes of the query and of the action's embedded text."""
    document = embed_text(action, TEMPLATES[template])
    return max(0.0, sum(a * b for a, b in zip(bag_of_words_vector(query), bag_of_words_vector(document), strict=True)))


def row_cosine(query: str, row: dict[str, Any]) -> float:
    template = TEMPLATES[row["template"]]
    action = next(a for a in template.actions if a.name == row["action"])
    return cosine(query, row["template"], action)


def cosine_gap(query: str) -> float:
    """The best cosine over every catalog action minus the mean of the next nine (the module's ``cosine_gap``)."""
    best = sorted((cosine(query, key, a) for key, t in TEMPLATES.items() for a in t.actions), reverse=True)[:GAP_HITS]
    return best[0] - sum(best[1:]) / (len(best) - 1)


async def best_coverage(client: Client, query: str) -> float:
    """The highest keyword coverage of any pair the caller's catalog search scores."""
    engine = client.server.app[ENGINE]
    index = await catalog_for(engine).current()
    units = select_units(index, await visible_instances(engine, caller_of(SALES_ALICE)), SearchRequest(query, include_catalog=True))
    return float(keyword_evidence(index, units, CandidatePairs.of(index, units), query_words(query)).coverage.max())


def row_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row.get("service") or "", row["template"], row["action"])


async def load(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, *INSTANCES)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    """The app without embeddings: these tests need no model, and loading one costs seconds."""
    async with running_app(variant(settings, "plain", embeddings_model=None)) as test_client:
        yield test_client


async def test_score_blends_keyword_and_cosine_with_the_querys_documented_weights_plus_bonuses(
    settings: Settings, embedding_endpoint: TestServer
) -> None:
    # Keyword scores alone, from a deployment without embeddings: there a row scores keyword + bonuses.
    keyword: dict[str, dict[tuple[str, str, str], float]] = {}
    async with running_app(variant(settings, "keyword", embeddings_model=None)) as client:
        await load(client)
        for query in QUERIES:
            answer = await search(client, SALES_ALICE, query=query, include_catalog=True, limit=100)
            assert answer["meta"]["signals"] == ["keyword"] and "weights" not in answer["meta"]
            keyword[query] = {row_key(row): row["score"] - bonus(row) for row in answer["results"]}

    provider = ProviderSettings(id="acme", base_url=str(embedding_endpoint.make_url("/v1")), api_key="sk-test")
    async with running_app(variant(settings, "blend", embeddings_model="acme/bow", providers=(provider,))) as client:
        await load(client)

        async def embedded() -> bool:
            counts = await action_counts(client)
            return counts["records"] == 15 and counts["pending"] == 0

        await wait_until(embedded, timeout_s=60)
        keyword_weights = []
        for query in QUERIES:
            answer = await search(client, SALES_ALICE, query=query, include_catalog=True, limit=100)
            assert answer["meta"]["signals"] == ["keyword", "embedding"], answer["notices"]
            weights = answer["meta"]["weights"]
            expected = fusion_weights(await best_coverage(client, query), cosine_gap(query), len(query_words(query)))
            assert weights == {"keyword": pytest.approx(expected.keyword, abs=1e-4), "embedding": pytest.approx(expected.embedding, abs=1e-4)}
            keyword_weights.append(weights["keyword"])
            compared = []
            for row in answer["results"]:
                if row_key(row) not in keyword[query]:
                    continue
                k, c = keyword[query][row_key(row)], row_cosine(query, row)
                assert row["score"] == pytest.approx(weights["keyword"] * k + weights["embedding"] * c + bonus(row), abs=1e-3), (query, row, k, c)
                compared.append((k, c))
            # Rows with both signals in different proportions: no other pair of weights fits this query's scores.
            both = {(round(k, 2), round(c, 2)) for k, c in compared if k > 0.05 and c > 0.05}
            assert len(both) >= 2 and len({round(k / c, 1) for k, c in both}) >= 2, (query, compared)
    # The weights follow each query: not one fixed blend.
    assert len({round(w, 3) for w in keyword_weights}) >= 3, keyword_weights


async def test_exclude_is_applied_before_scoring(client: Client) -> None:
    await load(client)
    everything = await search(client, SALES_ALICE, query="send an email", limit=100)
    one = await search(client, SALES_ALICE, query="send an email", limit=100, exclude="gmail_work")
    template = await search(client, SALES_ALICE, query="send an email", limit=100, exclude="gmail")
    # Gmail has three actions: one excluded instance takes its three pairs out of what is scored, the template six.
    assert one["meta"]["candidates"] == everything["meta"]["candidates"] - 3
    assert template["meta"]["candidates"] == everything["meta"]["candidates"] - 6
    assert {row["service"] for row in template["results"]} <= {"stripe_test", "crm"}


BAD_SEARCHES: list[tuple[dict[str, Any], str]] = [
    ({"query": "x", "colour": "red"}, "unknown field 'colour'"),
    ({"query": "x", "limit": 0}, "between 1 and 100"),
    ({"query": "x", "limit": "20"}, "limit must be an integer"),
    ({"query": "x", "exclude": ["gmail", 3]}, "exclude entry 2 must be a string"),
    ({"query": "x", "exclude": "gmail_work,,stripe"}, "exclude entry 2 is empty"),
    ({}, "query is required"),
    ({"query": "x", "ranking": "hybrid"}, "ranking must be one of served, lexical, dense (served is the default); got 'hybrid'"),
    ({"query": "x", "ranking": 2}, "ranking must be a string"),
]


async def test_bad_search_bodies_are_4xx(client: Client) -> None:
    await load(client)
    before = await search(client, SALES_ALICE, query="", include_catalog=True)
    for body, message in BAD_SEARCHES:
        response = await client.post("/v1/actions/search", json=body, headers=SALES_ALICE)
        error = (await response.json())["error"]
        assert response.status == 400 and error["code"] == "validation_error" and message in error["message"], (body, error)
    assert await search(client, SALES_ALICE, query="", include_catalog=True) == before
