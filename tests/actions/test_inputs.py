"""Action search inputs an agent sends as they come: a whole task as the query, a limit over the hard
cap, and an exclude list with a trailing comma. Each is answered, with a notice where it changed."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from service.actions.parsing import MAX_QUERY_CHARS
from tests.actions.helpers import (
    HAND_MADE,
    api_key,
    data_templates,
    oauth,
    pairs,
    put_instances,
    put_templates,
    search,
)
from tests.callers import SALES_ALICE

Client = TestClient[Any, Any]

TASK = "send an email message " + " ".join(f"background{i} about the customer" for i in range(300))


async def test_a_long_query_is_searched_by_its_prefix_with_a_notice(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"), api_key("stripe_live", "stripe"))
    assert len(TASK) > 5 * MAX_QUERY_CHARS
    answer = await search(client, SALES_ALICE, query=TASK)
    assert pairs(answer)[0] == ("gmail_work", "send_email")
    searched = answer["query"]
    assert len(searched) <= MAX_QUERY_CHARS and TASK.startswith(searched) and TASK[len(searched)] == " "
    assert answer["notices"][0].startswith(f"query is {len(TASK):,} characters; only its first {len(searched):,} were searched")
    short = await search(client, SALES_ALICE, query="send an email message")
    assert not any("characters" in notice for notice in short["notices"])


async def test_a_limit_over_the_hard_cap_is_clamped_with_a_notice(client: Client) -> None:
    templates = data_templates(60)
    await put_templates(client, templates)
    await put_instances(client, SALES_ALICE, *(api_key(f"svc{i}", t["template"]) for i, t in enumerate(templates)))
    answer = await search(client, SALES_ALICE, query="list get create", limit=5_000)
    at_cap = await search(client, SALES_ALICE, query="list get create", limit=100)
    assert answer["meta"]["candidates"] > 100 and answer["results"] == at_cap["results"] and len(at_cap["results"]) > 50
    assert answer["notices"][0] == "limit is over its maximum of 100; answered with 100." and at_cap["notices"] == answer["notices"][1:]
    browse = await search(client, SALES_ALICE, query="", limit=5_000)
    assert browse["notices"] == [] and len(browse["results"]) == len(templates)  # browse is a listing: nothing to clamp
    response = await client.post("/v1/actions/search", json={"query": "x", "limit": 0}, headers=SALES_ALICE)
    assert response.status == 400 and "between 1 and 100" in (await response.json())["error"]["message"]


async def test_a_trailing_comma_in_exclude_is_ignored(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"), oauth("gmail_home", "gmail", "google"))
    answer = await search(client, SALES_ALICE, query="send an email", exclude="gmail_work,", limit=100)
    assert {service for service, _ in pairs(answer)} == {"gmail_home"}
    both = await search(client, SALES_ALICE, query="send an email", exclude="gmail_work, gmail_home, ,", limit=100)
    assert both["results"] == []
