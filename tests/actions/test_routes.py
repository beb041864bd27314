"""Action search over HTTP: catalog and instances, visibility across tenants, exclude, browse, catalog rows,
the result shape field by field, and bad input that changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

import service
from service.actions.state import catalog_for
from service.settings import Settings
from service.state import ENGINE
from tests.actions.helpers import (
    GITHUB,
    GMAIL,
    HAND_MADE,
    STRIPE,
    api_key,
    data_templates,
    oauth,
    pairs,
    put_instances,
    put_templates,
    search,
    services,
)
from tests.callers import ADMIN, BOB, CAROL, SALES_ALICE
from tests.helpers import running_app, wait_until

Client = TestClient[Any, Any]


async def test_templates_need_an_admin_and_report_what_changed(client: Client) -> None:
    response = await client.put("/v1/actions/templates", json={"templates": [GMAIL]}, headers=SALES_ALICE)
    assert response.status == 403 and "admin" in (await response.json())["error"]["message"]
    first = await put_templates(client, HAND_MADE)
    assert first["templates"] == 6 and first["written"] == first["actions"] == first["to_embed"] == 15
    again = await put_templates(client, HAND_MADE)
    assert (again["written"], again["to_embed"], again["removed"]) == (0, 0, 0)
    shorter = dict(GITHUB, actions=GITHUB["actions"][:2])
    assert (await put_templates(client, [shorter]))["removed"] == 2


async def test_result_rows_carry_exactly_the_documented_fields(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(
        client,
        SALES_ALICE,
        oauth("gmail_work", "gmail", "google", account_email="alice@example.com"),
        api_key("stripe_live", "stripe"),
    )
    answer = await search(client, SALES_ALICE, query="send an email")
    assert answer["query"] == "send an email"
    top = answer["results"][0]
    assert list(top) == ["service", "template", "service_display_name", "account_email", "action", "description", "risk", "tier", "auth", "score"]
    assert top["service"] == "gmail_work" and top["template"] == "gmail" and top["service_display_name"] == "Google Gmail"
    assert (top["action"], top["description"], top["risk"], top["tier"]) == ("send_email", "Send an email message", "write", "user")
    assert top["auth"] == {"type": "oauth", "provider": "google", "connected": True}
    assert isinstance(top["score"], float)
    stripe = (await search(client, SALES_ALICE, query="refund a charge"))["results"][0]
    assert list(stripe) == ["service", "template", "service_display_name", "secret_name", "action", "description", "risk", "tier", "auth", "score"]
    assert stripe["secret_name"] == "STRIPE_LIVE_KEY" and stripe["auth"] == {"type": "api_key", "connected": True}


async def test_browse_lists_every_instance_connected_first_then_by_display_name(client: Client) -> None:
    templates = data_templates(25)
    await put_templates(client, templates)
    instances = [api_key(f"svc_{i:02d}", t["template"], connected=i % 3 != 0) for i, t in enumerate(templates)]
    await put_instances(client, SALES_ALICE, *instances)
    answer = await search(client, SALES_ALICE, query="")
    rows = answer["results"]
    assert len(rows) == 25  # browse mode is not truncated at the default limit of 20
    assert all(set(row) == {"service", "template", "service_display_name", "secret_name", "tier", "auth"} for row in rows)
    connected = [row["auth"]["connected"] for row in rows]
    assert connected == sorted(connected, reverse=True)
    for group in (True, False):
        names = [row["service_display_name"].lower() for row in rows if row["auth"]["connected"] is group]
        assert names == sorted(names)
    limited = await search(client, SALES_ALICE, query="", limit=5)
    assert len(limited["results"]) == 25


async def test_two_orgs_never_see_each_other(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, api_key("acme_crm", "hubspot", tier="org"), oauth("alice_mail", "gmail", "google"))
    await put_instances(client, CAROL, api_key("carol_stripe", "stripe"))
    alice_before = await search(client, SALES_ALICE, query="create contact")
    await put_instances(client, BOB, api_key("globex_crm", "hubspot", tier="org"), oauth("bob_mail", "gmail", "google"))
    await put_instances(client, ADMIN, api_key("weather", "openweather", tier="global"))

    alice_browse = sorted(services(await search(client, SALES_ALICE, query="")))
    carol_browse = sorted(services(await search(client, CAROL, query="")))
    bob_browse = sorted(services(await search(client, BOB, query="")))
    assert alice_browse == ["acme_crm", "alice_mail", "weather"]
    assert carol_browse == ["acme_crm", "carol_stripe", "weather"]
    assert bob_browse == ["bob_mail", "globex_crm", "weather"]

    for query in ["globex_crm", "bob_mail", "create contact", "send email", "hubspot"]:
        answer = await search(client, SALES_ALICE, query=query, limit=100, include_catalog=True)
        assert not {"globex_crm", "bob_mail"} & set(services(answer)), query
    answer = await search(client, BOB, query="acme_crm", limit=100, include_catalog=True)
    assert not {"acme_crm", "alice_mail", "carol_stripe"} & set(services(answer))
    # Another org's instances never show in a count either.
    alice_after = await search(client, SALES_ALICE, query="create contact")
    assert alice_after["meta"]["candidates"] == alice_before["meta"]["candidates"] + 1  # only the new global instance


async def test_team_instances_reach_team_members_and_user_tier_shadows_by_name(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, api_key("deals", "hubspot", tier="team", owner="sales"), api_key("pay", "stripe", tier="org"))
    assert "deals" in services(await search(client, SALES_ALICE, query=""))
    assert "deals" not in services(await search(client, CAROL, query=""))
    await put_instances(client, SALES_ALICE, oauth("pay", "gmail", "google"))  # alice's own "pay" shadows the org's
    alice_rows = {row["service"]: row for row in (await search(client, SALES_ALICE, query=""))["results"]}
    carol_rows = {row["service"]: row for row in (await search(client, CAROL, query=""))["results"]}
    assert (alice_rows["pay"]["template"], alice_rows["pay"]["tier"]) == ("gmail", "user")
    assert (carol_rows["pay"]["template"], carol_rows["pay"]["tier"]) == ("stripe", "org")


async def test_exclude_matches_instance_names_and_template_keys_before_the_limit(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"), oauth("gmail_personal", "gmail", "google"), api_key("stripe_test", "stripe"))
    everything = await search(client, SALES_ALICE, query="send email", limit=100)
    assert {"gmail_work", "gmail_personal"} <= set(services(everything))
    one = await search(client, SALES_ALICE, query="send email", exclude="gmail_work", limit=100)
    assert "gmail_work" not in services(one) and "gmail_personal" in services(one)
    template = await search(client, SALES_ALICE, query="send email", exclude="GMAIL", limit=100)
    assert not {"gmail_work", "gmail_personal"} & set(services(template))
    top_one = await search(client, SALES_ALICE, query="send email", limit=1)
    next_one = await search(client, SALES_ALICE, query="send email", limit=1, exclude=top_one["results"][0]["service"])
    assert len(next_one["results"]) == 1 and next_one["results"][0]["service"] != top_one["results"][0]["service"]
    browse = await search(client, SALES_ALICE, query="", exclude=["stripe_test", "gmail_personal"])
    assert services(browse) == ["gmail_work"]
    catalog = await search(client, SALES_ALICE, query="payment", include_catalog=True, exclude="stripe_test", limit=100)
    assert all(row["template"] != "stripe" for row in catalog["results"])  # configured, so no setup row either


async def test_include_catalog_adds_setup_rows_without_a_service(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"))
    plain = await search(client, SALES_ALICE, query="list repositories")
    assert all("setup_required" not in row and row["template"] == "gmail" for row in plain["results"])
    answer = await search(client, SALES_ALICE, query="list repositories", include_catalog=True)
    github = [row for row in answer["results"] if row["template"] == "github"]
    assert github and github[0]["action"] == "list_repos"
    row = github[0]
    assert "service" not in row and row["setup_required"] is True and row["tier"] == "global"
    assert row["auth"] == {"type": "oauth", "provider": "github", "connected": False}
    assert "account_email" not in row and "secret_name" not in row
    assert all(r["setup_required"] is False for r in answer["results"] if r["template"] == "gmail")
    browse = await search(client, SALES_ALICE, query="", include_catalog=True)
    assert browse["results"][0] == {
        "service": "gmail_work",
        "template": "gmail",
        "service_display_name": "Google Gmail",
        "tier": "user",
        "auth": {"type": "oauth", "provider": "google", "connected": True},
        "setup_required": False,
    }
    setup = [r["template"] for r in browse["results"][1:]]
    assert sorted(setup) == ["github", "hubspot", "openweather", "slack", "stripe"]


async def test_default_limit_is_20_and_the_cap_100(client: Client) -> None:
    templates = data_templates(60)
    await put_templates(client, templates)
    query = "get list create update delete"  # matches over 100 actions by keyword alone
    answer = await search(client, SALES_ALICE, query=query, include_catalog=True)
    assert len(answer["results"]) == 20
    assert len((await search(client, SALES_ALICE, query=query, include_catalog=True, limit=100))["results"]) == 100
    scores = [row["score"] for row in answer["results"]]
    assert scores == sorted(scores, reverse=True)


async def test_bad_input_is_a_clear_4xx_and_changes_nothing(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"))
    before_browse = await search(client, SALES_ALICE, query="", include_catalog=True)
    before_search = await search(client, SALES_ALICE, query="send email", include_catalog=True)
    bad_requests: list[tuple[str, str, dict[str, Any], dict[str, str], int, str]] = [
        ("PUT", "/v1/actions/instances", {"instances": [oauth("x", "gmail", "google", color="red")]}, SALES_ALICE, 400, "unknown field 'color'"),
        ("PUT", "/v1/actions/instances", {"instances": [{"name": "k", "template": "stripe", "auth": {"type": "api_key", "secret_name": "sk_live_4eC39HqLyjWDarjtT1zdp7dc"}}]}, SALES_ALICE, 400, "not the secret's value"),
        ("PUT", "/v1/actions/instances", {"instances": [{"name": "k", "template": "stripe", "auth": {"type": "api_key", "secret_name": "K", "value": "s3cr3t"}}]}, SALES_ALICE, 400, "never accepted"),
        ("PUT", "/v1/actions/instances", {"instances": [api_key("ok", "stripe"), api_key("t", "stripe", tier="galaxy")]}, SALES_ALICE, 400, "tier must be one of"),
        ("PUT", "/v1/actions/instances", {"instances": [api_key("ok", "stripe"), api_key("t", "stripe", tier="org", owner="globex")]}, SALES_ALICE, 403, "your own org"),
        ("PUT", "/v1/actions/instances", {"instances": [api_key("ok", "stripe"), api_key("t", "nonexistent")]}, SALES_ALICE, 400, "unknown template 'nonexistent'"),
        ("PUT", "/v1/actions/instances", {"instances": [api_key("g", "stripe", tier="global")]}, SALES_ALICE, 403, "admin"),
        ("PUT", "/v1/actions/templates", {"templates": [STRIPE, dict(GMAIL, actions=[{"action": "x", "risk": "dangerous"}])]}, ADMIN, 400, "risk must be one of read, write, delete"),
        ("PUT", "/v1/actions/templates", {"templates": [dict(STRIPE, owner="me")]}, ADMIN, 400, "unknown field 'owner'"),
        ("POST", "/v1/actions/search", {"query": "x", "limit": -1}, SALES_ALICE, 400, "between 1 and 100"),
        ("POST", "/v1/actions/search", {"query": "x", "exclude": "a,,b"}, SALES_ALICE, 400, "exclude entry 2 is empty"),
        ("POST", "/v1/actions/search", {"query": "x", "exclude": 7}, SALES_ALICE, 400, "comma-separated"),
        ("POST", "/v1/actions/search", {"query": 7}, SALES_ALICE, 400, "query must be a string"),
        ("POST", "/v1/actions/search", {"query": "x", "include_catalog": "yes"}, SALES_ALICE, 400, "include_catalog must be true or false"),
    ]
    for method, path, body, headers, status, message in bad_requests:
        response = await client.request(method, path, json=body, headers=headers)
        error = (await response.json())["error"]
        assert response.status == status and message in error["message"], (path, body, error)
    response = await client.post("/v1/actions/search", data=b"{not json", headers=SALES_ALICE)
    assert response.status == 400 and (await response.json())["error"]["code"] == "invalid_json"
    assert await search(client, SALES_ALICE, query="", include_catalog=True) == before_browse
    after = await search(client, SALES_ALICE, query="send email", include_catalog=True)
    assert pairs(after) == pairs(before_search)


async def test_deleting_instances_and_templates(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"), api_key("crm", "hubspot", tier="org"))
    response = await client.delete("/v1/actions/instances/crm", headers=BOB)
    assert response.status == 404  # not bob's: indistinguishable from absent
    response = await client.delete("/v1/actions/instances/crm?tier=org", headers=CAROL)
    assert response.status == 200
    assert services(await search(client, SALES_ALICE, query="")) == ["gmail_work"]
    assert (await client.delete("/v1/actions/templates/gmail", headers=SALES_ALICE)).status == 403
    assert (await client.delete("/v1/actions/templates/gmail", headers=ADMIN)).status == 200
    assert services(await search(client, SALES_ALICE, query="")) == []
    assert (await client.delete("/v1/actions/templates/gmail", headers=ADMIN)).status == 404


async def test_rows_match_the_openapi_contract(client: Client) -> None:
    contract = yaml.safe_load((Path(service.__file__).parent / "openapi.yaml").read_text())
    schema = contract["components"]["schemas"]["ActionResult"]
    allowed, required = set(schema["properties"]), set(schema["required"])
    assert {"/v1/actions/search", "/v1/actions/templates", "/v1/actions/instances"} <= set(contract["paths"])
    await put_templates(client, HAND_MADE)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google", account_email="a@example.com"), api_key("pay", "stripe"))
    for body in ({"query": "send email"}, {"query": "payment", "include_catalog": True}, {"query": ""}, {"query": "", "include_catalog": True}):
        answer = await search(client, SALES_ALICE, **body)
        assert set(answer) == {"query", "results", "notices", "meta"}
        for row in answer["results"]:
            assert required <= set(row) <= allowed, row


@pytest.fixture
async def hasty_client(settings: Settings) -> AsyncIterator[Client]:
    """The app with a request deadline far shorter than a big template write takes."""
    async with running_app(settings, request_deadline_s=0.3) as test_client:
        yield test_client


async def test_a_write_past_the_deadline_still_completes(hasty_client: Client) -> None:
    big = {"template": "big", "display_name": "Big", "actions": [{"action": f"op_{i}", "description": f"Operation {i}", "risk": "read"} for i in range(3000)]}
    response = await hasty_client.put("/v1/actions/templates", json={"templates": [big]}, headers=ADMIN)
    assert response.status == 504
    engine = hasty_client.server.app[ENGINE]

    async def complete() -> bool:
        index = await catalog_for(engine).current()
        return "big" in index.template_pos and len(index.blocks[index.template_pos["big"]]) == 3000

    await wait_until(complete, timeout_s=120)
    assert (await engine.records("actions").counts())["records"] == 3000
