"""A caller's visible instances are kept briefly, and a write shows at once to every caller it concerns."""

from __future__ import annotations

import time
from typing import Any

from aiohttp.test_utils import TestClient

from service.actions.model import AuthType, InstanceAuth, InstanceDef, Tier
from service.actions.visibility import VisibleInstances, visible_cache
from service.state import ENGINE
from tests.actions.helpers import HAND_MADE, api_key, oauth, put_instances, put_templates, search, services
from tests.callers import CAROL, SALES_ALICE, auth

Client = TestClient[Any, Any]
# Alice after she joined acme's team "ops" as well: a new grant, so other tenants.
OPS_ALICE = auth("alice", org="acme", teams=("sales", "ops"))


def _long_lived(client: Client) -> VisibleInstances:
    """The app's cache, its entries made to outlive the test: only a write can make them go."""
    cache = visible_cache(client.server.app[ENGINE])
    cache.ttl_s = 3_600.0
    return cache


async def test_a_written_or_deleted_instance_shows_at_once_to_callers_who_searched_before(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    cache = _long_lived(client)
    await put_instances(client, SALES_ALICE, oauth("gmail_work", "gmail", "google"))
    assert services(await search(client, SALES_ALICE, query="")) == ["gmail_work"]
    assert services(await search(client, CAROL, query="")) == []
    assert len(cache) == 2  # both callers' instances are kept

    await put_instances(client, CAROL, api_key("crm", "hubspot", tier="org"))  # acme's: alice reaches it too
    assert sorted(services(await search(client, SALES_ALICE, query=""))) == ["crm", "gmail_work"]
    assert services(await search(client, CAROL, query="")) == ["crm"]

    response = await client.delete("/v1/actions/instances/crm?tier=org", headers=CAROL)
    assert response.status == 200
    assert services(await search(client, SALES_ALICE, query="")) == ["gmail_work"]
    assert services(await search(client, CAROL, query="")) == []


async def test_a_new_team_grant_is_its_own_entry_and_sees_that_team_at_once(client: Client) -> None:
    await put_templates(client, HAND_MADE)
    cache = _long_lived(client)
    await put_instances(client, OPS_ALICE, api_key("pager", "hubspot", tier="team", owner="ops"))
    assert "pager" not in services(await search(client, SALES_ALICE, query=""))
    assert "pager" in services(await search(client, OPS_ALICE, query=""))  # the token with the grant
    assert "pager" not in services(await search(client, SALES_ALICE, query=""))  # the old token, still without it
    assert len(cache) == 2


def _instance(name: str) -> InstanceDef:
    return InstanceDef(name=name, template="gmail", tier=Tier.USER, owner="alice", org=None, auth=InstanceAuth(AuthType.API_KEY, secret_name="K"))


def test_a_read_that_started_before_a_write_is_not_kept() -> None:
    cache = VisibleInstances()
    tenants = ("global", "user:alice")
    started_at = cache.generation
    cache.forget()  # an instance written while the read ran
    cache.put(tenants, started_at, [_instance("old")])
    assert cache.get(tenants) is None
    cache.put(tenants, cache.generation, [_instance("new")])
    found = cache.get(tenants)
    assert found is not None and [i.name for i in found] == ["new"]
    found.clear()  # a caller's copy: the kept entry is not changed by it
    assert [i.name for i in cache.get(tenants) or []] == ["new"]


def test_entries_end_after_the_ttl_and_the_least_recently_used_goes_first() -> None:
    cache = VisibleInstances(maxsize=2, ttl_s=0.05)
    cache.put(("a",), 0, [_instance("a")])
    time.sleep(0.1)
    assert cache.get(("a",)) is None and len(cache) == 0
    cache = VisibleInstances(maxsize=2, ttl_s=60.0)
    for key in ("a", "b"):
        cache.put((key,), 0, [_instance(key)])
    assert cache.get(("a",)) is not None  # a is now the most recently used
    cache.put(("c",), 0, [_instance("c")])
    assert len(cache) == 2 and cache.get(("b",)) is None
    assert cache.get(("a",)) is not None and cache.get(("c",)) is not None
