"""Parsing action-surface requests: every bad input is a clear 400 (or 403), never a partial write."""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.actions.model import AuthType, RankingMode, Risk, Tier
from service.actions.parsing import (
    looks_like_secret_value,
    parse_exclude,
    parse_instances_body,
    parse_search_body,
    parse_templates_body,
)
from service.auth import Caller
from service.errors import Forbidden, ValidationError
from tests.callers import ADMIN, SALES_ALICE, caller_of


def template(**overrides: Any) -> dict[str, Any]:
    body = {
        "template": "gmail",
        "display_name": "Google Gmail",
        "actions": [{"action": "send_email", "description": "Send an email message", "risk": "write", "method": "post", "path": "/send"}],
    }
    body.update(overrides)
    return body


def instance(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "gmail_work", "template": "gmail", "auth": {"type": "oauth", "provider": "google"}}
    body.update(overrides)
    return body


def test_template_parses_with_defaults() -> None:
    [parsed] = parse_templates_body({"templates": [template()]})
    assert parsed.key == "gmail" and parsed.auth.type is AuthType.API_KEY
    assert parsed.actions[0].risk is Risk.WRITE and parsed.actions[0].method == "POST"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"actions": [{"action": "x", "risk": "dangerous"}]}, "templates[0].actions[0].risk must be one of read, write, delete"),
        ({"actions": [{"action": "x", "risk": "read", "verb": "GET"}]}, "unknown field 'verb'"),
        ({"actions": [{"action": "x", "risk": "read"}, {"action": "x", "risk": "read"}]}, "repeated: 'x'"),
        ({"template": "a,b"}, "not a valid template key"),
        ({"template": "a#b"}, "not a valid template key"),
        ({"display_name": "  "}, "display_name must not be empty"),
        ({"auth": {"type": "oauth"}}, "provider is required for oauth"),
        ({"owner": "me"}, "unknown field 'owner'"),
        ({"actions": "send_email"}, "actions must be a list"),
    ],
)
def test_bad_templates_are_refused_with_the_place_to_fix(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        parse_templates_body({"templates": [template(**change)]})


def test_duplicate_template_keys_in_one_request() -> None:
    with pytest.raises(ValidationError, match="repeated: 'gmail'"):
        parse_templates_body({"templates": [template(), template()]})


def test_instance_owner_defaults_and_tenants() -> None:
    parsed = parse_instances_body(
        {
            "instances": [
                instance(),
                instance(name="crm", tier="org", auth={"type": "api_key", "secret_name": "CRM_API_KEY"}),
                instance(name="deals", tier="team", auth={"type": "api_key", "secret_name": "DEALS_KEY"}),
            ]
        },
        caller_of(SALES_ALICE),
    )
    assert [i.tenant for i in parsed] == ["user:alice", "org:acme", "team:acme/sales"]  # a team within its org
    assert parsed[0].connected is True and parsed[0].tier is Tier.USER


def test_a_team_instance_needs_the_teams_org_and_admins_name_another_orgs_team_with_it() -> None:
    team = instance(name="deals", tier="team", owner="sales", auth={"type": "api_key", "secret_name": "DEALS_KEY"})
    with pytest.raises(ValidationError, match="needs a token with an org claim"):
        # Teams without an org: no token minted here says that, so the caller is built directly.
        parse_instances_body({"instances": [team]}, Caller(sub="ann", teams=("sales",)))
    admin = caller_of(ADMIN)
    seeded = parse_instances_body({"instances": [{**team, "owner": "globex/sales"}]}, admin)
    assert [(i.tenant, i.owner, i.org) for i in seeded] == [("team:globex/sales", "sales", "globex")]
    with pytest.raises(ValidationError, match="<org>/<team>"):
        parse_instances_body({"instances": [team]}, admin)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"colour": "blue"}, ValidationError, "unknown field 'colour'"),
        ({"tier": "planet"}, ValidationError, "tier must be one of global, org, team, user"),
        ({"tier": "global"}, Forbidden, "global instances need an admin token"),
        ({"tier": "org", "owner": "globex"}, Forbidden, "only be written for your own org"),
        ({"tier": "team", "owner": "support"}, Forbidden, "only be written for your own team"),
        ({"tier": "user", "owner": "bob"}, Forbidden, "only be written for your own user"),
        ({"name": "has space"}, ValidationError, "not a valid instance name"),
        ({"auth": {"type": "api_key"}}, ValidationError, "secret_name is required"),
        ({"auth": {"type": "api_key", "secret_name": "sk_live_4eC39HqLyjWDarjtT1zdp7dc"}}, ValidationError, "not the secret's value"),
        ({"auth": {"type": "api_key", "secret_name": "X", "value": "hunter2"}}, ValidationError, "secret values are never accepted"),
        ({"api_key": "abc"}, ValidationError, "secret values are never accepted"),
        ({"auth": {"type": "oauth", "provider": "google", "token": "ya29.a0"}}, ValidationError, "secret values are never accepted"),
        ({"auth": {"type": "basic"}}, ValidationError, "auth.type must be one of oauth, api_key"),
        ({"account_email": "not-an-email"}, ValidationError, "is not an email address"),
        ({"connected": "yes"}, ValidationError, "connected must be true or false"),
    ],
)
def test_bad_instances_are_refused(change: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        parse_instances_body({"instances": [instance(**change)]}, caller_of(SALES_ALICE))


def test_account_email_only_for_oauth() -> None:
    with pytest.raises(ValidationError, match="only for oauth"):
        parse_instances_body({"instances": [instance(auth={"type": "api_key", "secret_name": "K"}, account_email="a@b.co")]}, caller_of(SALES_ALICE))


def test_admin_writes_global_and_any_tenant() -> None:
    parsed = parse_instances_body({"instances": [instance(tier="global"), instance(name="x", tier="org", owner="globex")]}, caller_of(ADMIN))
    assert [i.tenant for i in parsed] == ["global", "org:globex"]


@pytest.mark.parametrize(
    "value", ["sk_live_4eC39HqLyjWDarjtT1zdp7dc", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "AKIAIOSFODNN7EXAMPLE", "a8f5f167f44f4964e6c998dee827110c",
              "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", "xoxb-123456789012-abcdefghij"]
)
def test_credential_shapes_are_recognised(value: str) -> None:
    assert looks_like_secret_value(value)


@pytest.mark.parametrize("label", ["STRIPE_API_KEY", "github/deploy-token", "OPENAI_API_KEY_V2_BACKUP_01", "StripeProductionSecretKey2", "prod.db.password"])
def test_labels_are_not_mistaken_for_values(label: str) -> None:
    assert not looks_like_secret_value(label)


def test_search_defaults_and_limits() -> None:
    parsed = parse_search_body({"query": "send an email"})
    assert (parsed.limit, parsed.include_catalog, parsed.exclude, parsed.browse) == (20, False, (), False)
    assert parse_search_body({"query": "", "limit": 100}).browse
    for limit in (0, -1):
        with pytest.raises(ValidationError, match="between 1 and 100"):
            parse_search_body({"query": "x", "limit": limit})
    for limit in (101, 1000):
        clamped = parse_search_body({"query": "x", "limit": limit})
        assert clamped.limit == 100 and clamped.notices == ("limit is over its maximum of 100; answered with 100.",)
    assert parse_search_body({"query": "", "limit": 500}).notices == ()  # browse mode has no limit to clamp
    with pytest.raises(ValidationError, match="query is required"):
        parse_search_body({"limit": 5})
    with pytest.raises(ValidationError, match="unknown field 'domain'"):
        parse_search_body({"query": "x", "domain": "mail"})


def test_search_ranking_is_served_lexical_or_dense() -> None:
    assert parse_search_body({"query": "x"}).ranking is RankingMode.SERVED
    assert parse_search_body({"query": "x", "ranking": None}).ranking is RankingMode.SERVED
    for mode in RankingMode:
        assert parse_search_body({"query": "x", "ranking": mode.value}).ranking is mode
    for bad in ("hybrid", "Dense", "", "x" * 150):
        with pytest.raises(ValidationError, match=re.escape("ranking must be one of served, lexical, dense (served is the default); got")):
            parse_search_body({"query": "x", "ranking": bad})
    with pytest.raises(ValidationError, match="ranking must be a string"):
        parse_search_body({"query": "x", "ranking": 1})


def test_exclude_forms() -> None:
    assert parse_exclude("gmail_work, stripe ,gmail_work") == ("gmail_work", "stripe")
    assert parse_exclude(["a", "b"]) == ("a", "b")
    assert parse_exclude("") == ()
    assert parse_exclude("a,b,") == parse_exclude("a, b , ,") == ("a", "b")  # trailing commas are ignored
    assert parse_exclude(",") == ()
    assert parse_exclude(",".join("x" * 100) + ",") == ("x",)
    for bad, message in [("a,,b", "entry 2 is empty"), (",a", "entry 1 is empty"), (42, "comma-separated string"), (["a", 1], "entry 2 must be a string"), (",".join("x" * 101), "limit is 100")]:
        with pytest.raises(ValidationError, match=re.escape(message)):
            parse_exclude(bad)
