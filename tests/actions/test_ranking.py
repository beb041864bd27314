"""Ranking facts with the real model: an exact action name wins, a typo still finds it through
Jaro-Winkler, a paraphrase finds it through embeddings; the per-query weights and the single-channel
rankings (lexical, dense); the connected and read-safer bonuses; and background re-embedding of only
the actions whose text changed, a service's context included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.actions.model import ACTIONS_COLLECTION, action_key
from service.engine.store import point_id
from service.settings import Settings
from service.state import ENGINE
from tests.actions.helpers import (
    HAND_MADE,
    action_counts,
    api_key,
    data_templates,
    oauth,
    pairs,
    put_instances,
    put_templates,
    search,
)
from tests.callers import SALES_ALICE
from tests.helpers import running_app, wait_until

Client = TestClient[Any, Any]

REPORTS = {"template": "reports", "display_name": "Reports", "actions": [{"action": "export_report", "description": "Export the quarterly report", "risk": "read"}]}
REPORTS_ADMIN = dict(REPORTS, template="reports_admin", actions=[dict(REPORTS["actions"][0], risk="delete")])
PARAPHRASE = "what's the temperature outside in Paris"


async def _load_ranking_catalog(client: Client) -> None:
    templates = [*HAND_MADE, REPORTS, REPORTS_ADMIN, *data_templates(30)]
    await put_templates(client, templates)
    await put_instances(
        client,
        SALES_ALICE,
        oauth("gmail_a", "gmail", "google", connected=False),
        oauth("gmail_b", "gmail", "google"),
        oauth("github", "github", "github"),
        api_key("stripe", "stripe"),
        oauth("slack", "slack", "slack"),
        api_key("weather", "openweather"),
        api_key("crm", "hubspot"),
        api_key("reports", "reports"),
        api_key("reports_admin", "reports_admin"),
        *[api_key(f"svc_{i}", t["template"]) for i, t in enumerate(templates[8:])],
    )


async def _embedded(client: Client) -> bool:
    counts = await action_counts(client)
    return counts["records"] > 0 and counts["pending"] == 0


async def test_ranking_facts_with_embeddings(client: Client) -> None:
    await _load_ranking_catalog(client)
    await wait_until(lambda: _embedded(client), timeout_s=240, interval_s=0.5)

    exact = await search(client, SALES_ALICE, query="list_repos")
    assert pairs(exact)[0] == ("github", "list_repos")  # not list_repos_for_org, though both hold every word
    assert exact["meta"]["signals"] == ["keyword", "embedding"] and exact["notices"] == []

    typo = await search(client, SALES_ALICE, query="lsit_repos")
    assert pairs(typo)[0] == ("github", "list_repos")

    paraphrase = await search(client, SALES_ALICE, query=PARAPHRASE)
    assert pairs(paraphrase)[0] == ("weather", "current_weather")

    # Connected bonus: the connected twin outranks the disconnected one (whose name sorts first).
    mail = await search(client, SALES_ALICE, query="send an email")
    assert pairs(mail)[:2] == [("gmail_b", "send_email"), ("gmail_a", "send_email")]
    assert mail["results"][0]["score"] == pytest.approx(mail["results"][1]["score"] + 0.05, abs=1e-3)

    # Read-safer bonus: identical text, read before delete.
    report = await search(client, SALES_ALICE, query="export the quarterly report")
    assert pairs(report)[:2] == [("reports", "export_report"), ("reports_admin", "export_report")]
    assert report["results"][0]["score"] == pytest.approx(report["results"][1]["score"] + 0.02, abs=1e-3)


async def test_adaptive_weights_and_the_single_channel_rankings(client: Client) -> None:
    await _load_ranking_catalog(client)
    await wait_until(lambda: _embedded(client), timeout_s=240, interval_s=0.5)

    # Every word of the query is in one action's name: the keyword side is trusted, and that action stays first.
    exact = await search(client, SALES_ALICE, query="create payment intent")
    assert pairs(exact)[0] == ("stripe", "create_payment_intent")
    # A paraphrase sharing no word with any action: the embedding decides, as it does alone.
    paraphrase = await search(client, SALES_ALICE, query=PARAPHRASE)
    dense = await search(client, SALES_ALICE, query=PARAPHRASE, ranking="dense")
    assert pairs(paraphrase)[0] == pairs(dense)[0] == ("weather", "current_weather")
    weights = [answer["meta"]["weights"] for answer in (exact, paraphrase)]
    assert all(w["keyword"] + w["embedding"] == pytest.approx(1.0) and 0.15 <= w["keyword"] <= 0.9 for w in weights)
    assert weights[0]["keyword"] > weights[1]["keyword"] + 0.1, weights
    # A long request leans on the embedding more than a short one of the same words.
    long_request = await search(client, SALES_ALICE, query="please create a new payment intent so the customer can pay for the order today")
    assert long_request["meta"]["weights"]["keyword"] < weights[0]["keyword"]

    # ranking=lexical: the keyword score alone (no bonuses: the connected and disconnected twins tie).
    lexical = await search(client, SALES_ALICE, query="send an email", ranking="lexical")
    assert lexical["meta"]["signals"] == ["keyword"] and lexical["meta"]["ranking"] == "lexical" and "weights" not in lexical["meta"]
    mail = [row for row in lexical["results"] if row["action"] == "send_email"]
    assert [row["service"] for row in mail] == ["gmail_b", "gmail_a"] and mail[0]["score"] == mail[1]["score"]
    assert ("weather", "current_weather") not in pairs(await search(client, SALES_ALICE, query=PARAPHRASE, ranking="lexical"))[:3]
    # ranking=dense: the cosine alone, no keyword evidence: a typo of a name is not rescued by Jaro-Winkler.
    assert dense["meta"]["signals"] == ["embedding"] and dense["meta"]["ranking"] == "dense" and "weights" not in dense["meta"]
    assert all(0.0 <= row["score"] <= 1.0 for row in dense["results"])
    served = await search(client, SALES_ALICE, query="send an email")
    assert served["meta"]["ranking"] == "served" and served["meta"]["signals"] == ["keyword", "embedding"]


@pytest.fixture
async def keyword_only_client(settings: Settings) -> AsyncIterator[Client]:
    """The app on a deployment without embeddings: the semantic signal is skipped, gracefully."""
    async with running_app(settings, embeddings_model=None) as test_client:
        yield test_client


async def test_without_embeddings_keyword_and_jaro_winkler_still_rank(keyword_only_client: Client) -> None:
    client = keyword_only_client
    await _load_ranking_catalog(client)
    typo = await search(client, SALES_ALICE, query="lsit_repos")
    assert pairs(typo)[0] == ("github", "list_repos")
    assert typo["meta"]["signals"] == ["keyword"] and "weights" not in typo["meta"]
    assert typo["notices"][0] == "embeddings are not configured; lexical results only"
    # The dense ranking has nothing to rank with: no rows, and a notice that says so.
    dense = await search(client, SALES_ALICE, query="lsit_repos", ranking="dense")
    assert dense["results"] == [] and dense["meta"]["signals"] == []
    assert dense["notices"] == ["embeddings are not configured; the dense ranking has no results"]
    # The paraphrase shares no word with its action: keyword scoring alone does not find it.
    paraphrase = await search(client, SALES_ALICE, query=PARAPHRASE)
    assert ("weather", "current_weather") not in pairs(paraphrase)[:3]


async def test_changed_actions_re_embed_and_only_they(client: Client) -> None:
    template = {
        "template": "notes",
        "display_name": "Notes",
        "actions": [
            {"action": "create_note", "description": "Create a note", "risk": "write"},
            {"action": "list_notes", "description": "List notes", "risk": "read"},
            {"action": "delete_note", "description": "Delete a note", "risk": "delete"},
        ],
    }
    first = await put_templates(client, [template])
    assert first["to_embed"] == 3
    await wait_until(lambda: _embedded(client), timeout_s=120, interval_s=0.3)
    engine = client.server.app[ENGINE]
    ids = {name: point_id(ACTIONS_COLLECTION, action_key("notes", name)) for name in ("create_note", "list_notes", "delete_note")}
    before = {p.payload["action"]: p for p in await engine.store.retrieve(ACTIONS_COLLECTION, list(ids.values()), with_vectors=True)}

    changed = dict(template, actions=[dict(template["actions"][0], description="Create a new note in a notebook"), *template["actions"][1:3]])
    changed["actions"][1] = dict(changed["actions"][1], risk="write")  # payload-only change: no re-embedding
    second = await put_templates(client, [changed])
    assert (second["written"], second["to_embed"]) == (2, 1)
    current = {p.payload["action"]: p for p in await engine.store.retrieve(ACTIONS_COLLECTION, list(ids.values()), with_vectors=True)}
    assert current["create_note"].payload["embed_state"] == "pending"
    for name in ("list_notes", "delete_note"):
        assert current[name].payload["embed_state"] == "done"
        assert current[name].vectors == before[name].vectors
    assert current["list_notes"].payload["risk"] == "write"
    await wait_until(lambda: _embedded(client), timeout_s=120, interval_s=0.3)
    after = {p.payload["action"]: p for p in await engine.store.retrieve(ACTIONS_COLLECTION, list(ids.values()), with_vectors=True)}
    assert after["create_note"].vectors != before["create_note"].vectors
    assert after["delete_note"].vectors == before["delete_note"].vectors


async def test_a_changed_service_context_rewrites_every_action_and_re_embeds_changed_texts(client: Client) -> None:
    template = {
        "template": "notes",
        "display_name": "Notes",
        "description": "Notes for teams. Syncs everywhere.",
        "categories": ["collaboration"],
        "actions": [
            {"action": "create_note", "description": "Create a note", "risk": "write"},
            {"action": "list_notes", "description": "List notes", "risk": "read"},
        ],
    }
    assert (await put_templates(client, [template]))["to_embed"] == 2
    await wait_until(lambda: _embedded(client), timeout_s=120, interval_s=0.3)
    # The service summary (the description's first sentence) is in every action's text: all re-embed.
    summary = await put_templates(client, [dict(template, description="Notebooks for teams. Syncs everywhere.")])
    assert (summary["written"], summary["to_embed"]) == (2, 2)
    await wait_until(lambda: _embedded(client), timeout_s=120, interval_s=0.3)
    # A later sentence is lexical context only: every action is rewritten (its terms changed), none re-embedded.
    later = await put_templates(client, [dict(template, description="Notebooks for teams. Syncs on every device.")])
    assert (later["written"], later["to_embed"]) == (2, 0)
    categories = await put_templates(client, [dict(template, description="Notebooks for teams. Syncs on every device.", categories=["productivity"])])
    assert (categories["written"], categories["to_embed"]) == (2, 2)
    engine = client.server.app[ENGINE]
    stored = await engine.store.retrieve(ACTIONS_COLLECTION, [point_id(ACTIONS_COLLECTION, action_key("notes", "create_note"))])
    assert stored[0].payload["embed_text"] == "create note: Create a note (Notes: productivity; Notebooks for teams.)"
    assert "device" in stored[0].payload["terms"].split()


async def test_a_reverted_text_is_embedded_again(client: Client) -> None:
    first = {"template": "notes", "display_name": "Notes", "actions": [{"action": "create_note", "description": "Create a note", "risk": "write"}]}
    second = dict(first, actions=[dict(first["actions"][0], description="Create a new note")])
    for version in (first, second):
        await put_templates(client, [version])
        await wait_until(lambda: _embedded(client), timeout_s=120, interval_s=0.3)
    assert (await put_templates(client, [first]))["to_embed"] == 1
    await wait_until(lambda: _embedded(client), timeout_s=30, interval_s=0.3)
