"""Security: tenant isolation over every surface and every field, tokens, planted secrets, confined roots, the admin surface, size and rate limits.

What the surface tests beside each package already hold (one surface's hits, the admin API's
refusals, forged and expired tokens, one rate limit) is not repeated; these tests cross the
surfaces and scan whole answers (bodies and headers) rather than chosen fields.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import string
import time
import warnings
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import orjson
import redis.asyncio as aioredis
import yaml
from aiohttp.test_utils import TestClient

from service.engine.queue import deployment_key_patterns
from service.settings import Settings
from tests.callers import ADMIN, TEST_SECRET, auth, forged
from tests.helpers import REDIS_URL, running_app, wait_until

CONTRACT = yaml.safe_load((Path(__file__).resolve().parents[2] / "service" / "openapi.yaml").read_text())
Client = TestClient[Any, Any]


def _letters(count: int = 10) -> str:
    """Lowercase letters only: the analyzer keeps such a token whole, and no hex request id can hold one."""
    return "".join(random.choices(string.ascii_lowercase, k=count))


async def _call(client: Client, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, str, str]:
    """(status, every header as text, body as text)."""
    response = await client.request(method, path, json=body, headers=headers, allow_redirects=False)
    text = await response.text()
    return response.status, "\n".join(f"{name}: {value}" for name, value in response.headers.items()), text


async def _wait_settled(client: Client) -> None:
    """Every record of every tenant embedded: answers no longer change under the test."""

    async def settled() -> bool:
        surfaces = (await (await client.get("/v1/index/status", headers=ADMIN)).json())["surfaces"]
        return all(counts["pending"] == 0 for counts in surfaces.values())

    await wait_until(settled, timeout_s=180, interval_s=0.5)


# ---- tenant isolation across every surface ----------------------------------------------------------


class Tenant:
    """A caller whose every id, name and text carries tokens no other caller's data holds."""

    def __init__(self, name: str) -> None:
        self.sub = f"{name}{_letters()}"
        self.org = f"org{_letters()}"
        self.team = f"team{_letters()}"
        self.ids = f"idq{_letters()}"  # in ids and names: another caller may type them
        self.text = f"txq{_letters()}"  # only in descriptions, contents, emails: nobody else ever sends it
        self.headers = auth(self.sub, org=self.org, teams=(self.team,), plan="max")

    @property
    def private(self) -> tuple[str, ...]:
        """Tokens that must never reach another caller, even one who asks for this tenant's ids."""
        return (self.text, self.sub, self.org, self.team)

    @property
    def every(self) -> tuple[str, ...]:
        return (self.ids, *self.private)

    def catalog(self) -> list[dict[str, Any]]:
        i, t = self.ids, self.text
        return [
            {
                "type": "package",
                "id": f"{i}-home",
                "name": f"@{i}/home-controls",
                "summary": f"Control the lights and shades of the house {t}",
                "readme": f"# Home controls\n\nThermostat and porch lights {t}.\n\n## Usage\n\nCall it {t}.\n",
                "tags": ["home", "thermostat"],
                "exports": [{"subpath": "./porch-lights", "purpose": f"Turn the porch lights on or off {t}", "signature": f"function porch{t}(): void"}],
                "files": {"src/index.ts": f"// thermostat helper {t}\nexport const x = 1\n"},
            },
            {"type": "package", "id": f"{i}-hidden", "name": f"@{i}/garden", "summary": f"Water the garden {t}", "hidden": True},
            {
                "type": "mcp-server",
                "id": f"{i}srv",
                "description": f"Home automation server for locks and thermostats {t}",
                "instructions": f"Confirm before unlocking {t}",
                "tools": [{"name": f"{i}_set_pin", "description": f"Set the door lock PIN {t}"}],
            },
            {"type": "secret", "id": f"{i}Token", "description": f"Token for the thermostat API {t}"},
            {"type": "integration", "id": f"{i}int", "name": f"{i} spotify", "provider": "spotify", "description": f"Music playlists {t}"},
            {"type": "memory", "id": f"{i}mem", "text": f"Keeps the thermostat at 21 degrees {t}"},
            {"type": "waiting", "id": f"{i}wait", "title": f"Reconnect the home server {t}", "status": "block", "detail": t},
        ]

    def shared_catalog(self) -> list[dict[str, Any]]:
        return [{"type": "package", "id": f"{self.ids}-orgpkg", "name": f"@{self.ids}/shared", "summary": f"Shared thermostat helpers {self.text}"}]

    def team_catalog(self) -> list[dict[str, Any]]:
        return [{"type": "mcp-server", "id": f"{self.ids}team", "description": f"Team lock server {self.text}", "tools": [{"name": "unlock", "description": f"Unlock {self.text}"}]}]

    def instances(self) -> list[dict[str, Any]]:
        i, t = self.ids, self.text
        return [
            {"name": f"{i}-mail", "template": "gmail", "auth": {"type": "oauth", "provider": "google"}, "account_email": f"{t}@example.com"},
            {"name": f"{i}-billing", "template": "stripe", "tier": "org", "auth": {"type": "api_key", "secret_name": f"{i.upper()}_STRIPE_KEY"}},
            {"name": f"{i}-crm", "template": "hubspot", "tier": "team", "owner": self.team, "auth": {"type": "api_key", "secret_name": f"{i.upper()}_CRM"}},
        ]

    def tree(self, base: Path) -> Path:
        root = base / f"{self.ids}-repo"
        (root / "src").mkdir(parents=True)
        (root / "src" / "thermostat.py").write_text(
            f'"""Thermostat control {self.text}."""\n\n\ndef set_thermostat_{self.ids}(degrees):\n    return "{self.text}", degrees\n'
        )
        (root / "README.md").write_text(f"# Thermostat\n\nHome heating {self.text}.\n")
        return root


TEMPLATES = [
    {"template": "gmail", "display_name": "Gmail", "auth": {"type": "oauth", "provider": "google"}, "actions": [{"action": "send_email", "description": "Send an email", "risk": "write"}]},
    {"template": "stripe", "display_name": "Stripe", "actions": [{"action": "list_charges", "description": "List the charges", "risk": "read"}]},
    {"template": "hubspot", "display_name": "HubSpot", "actions": [{"action": "search_contacts", "description": "Search contacts", "risk": "read"}]},
]
BUILTINS = [
    {"type": "domain", "id": "email", "description": "Send and read email.", "order": 1},
    {"type": "capability", "id": "emailSend", "domain": "email", "title": "emailSend", "summary": "Send an email message.", "inputType": "{ to: string }"},
    {"type": "guide", "id": "home_guide", "title": "Home automation", "summary": "Thermostats and lights.", "markdown": "# Home\n\n## Thermostat\n\nSet it.\n"},
]


async def _ingest(client: Client, tenant: Tenant, workspaces: Path) -> str:
    for body in ({"entities": tenant.catalog()}, {"entities": tenant.shared_catalog(), "owner": "org"}, {"entities": tenant.team_catalog(), "owner": f"team:{tenant.team}"}):
        response = await client.put("/v1/catalog/entities", json=body, headers=tenant.headers)
        assert response.status == 200, await response.text()
    response = await client.put("/v1/actions/instances", json={"instances": tenant.instances()}, headers=tenant.headers)
    assert response.status == 200, await response.text()
    response = await client.post("/v1/workspaces", json={"root": str(tenant.tree(workspaces))}, headers=tenant.headers)
    assert response.status == 201, await response.text()
    workspace_id: str = (await response.json())["id"]

    async def indexed() -> bool:
        return bool((await (await client.get(f"/v1/workspaces/{workspace_id}", headers=tenant.headers)).json())["state"] == "ready")

    await wait_until(indexed, timeout_s=60)
    return workspace_id


def _blind_probes(viewer_workspace: str) -> list[tuple[str, str, Any]]:
    """Requests a caller makes without naming anything of the other tenant."""
    catalog = [
        {"query": ""},
        {"query": "thermostat"},
        {"query": "home lights and shades"},
        {"query": "set the door lock pin"},
        {"query": "what can you do"},
        {"query": "reconnect the home server"},
        {"query": "thermostat", "includeHiddenPackages": True},
        {"query": "home-controls"},
        {"query": "spotify playlists"},
        {"query": "email"},
        {"domain": "email"},
        {"query": "thermostat", "domain": "email"},
        {"domain": "no-such-domain"},
        {"entity": ["guide:home_guide", "integration:spotify", "package:home-controls"]},
    ]
    actions = [{"query": "send an email"}, {"query": ""}, {"query": "charges", "include_catalog": True}, {"query": "search contacts crm", "include_catalog": True}]
    code = [{"query": "thermostat"}, {"query": "set thermostat", "mode": "lexical"}, {"query": r"thermostat\w*", "regex": True}, {"query": "home heating"}]
    return [
        ("GET", "/v1/index/status", None),
        ("GET", "/v1/workspaces", None),
        ("GET", f"/v1/workspaces/{viewer_workspace}", None),
        *(("POST", "/v1/catalog/search", body) for body in catalog),
        *(("POST", "/v1/actions/search", body) for body in actions),
        *(("POST", f"/v1/workspaces/{viewer_workspace}/search", body) for body in code),
        ("GET", "/admin", None),
        ("GET", "/admin/api/overview", None),
        ("GET", "/admin/api/index", None),
        ("GET", "/admin/api/jobs", None),
        ("GET", "/admin/chart.svg", None),
        ("GET", "/metrics", None),
    ]


def _targeted_probes(owner: Tenant, owner_workspace: str) -> list[tuple[str, str, Any]]:
    """Requests naming the other tenant's ids: each must answer exactly as for an id that never existed."""
    i = owner.ids
    return [
        ("POST", "/v1/catalog/search", {"entity": f"package:{i}-home"}),
        ("POST", "/v1/catalog/search", {"entity": f"package:{i}-home#README.md#usage"}),
        ("POST", "/v1/catalog/search", {"entity": f"package:{i}-hidden"}),
        ("POST", "/v1/catalog/search", {"entity": f"package:{i}-orgpkg"}),
        ("POST", "/v1/catalog/search", {"entity": [f"mcp-server:{i}srv", f"secret:{i}Token", f"integration:{i}int"]}),
        ("POST", "/v1/catalog/search", {"entity": f"capability:mcp:{i}srv:{i}_set_pin"}),
        ("POST", "/v1/catalog/search", {"domain": f"mcp:{i}srv"}),
        ("POST", "/v1/catalog/search", {"domain": f"mcp:{i}team", "query": "unlock"}),
        ("DELETE", f"/v1/catalog/entities/package:{i}-home", None),
        ("DELETE", f"/v1/catalog/entities/package:{i}-orgpkg?owner=org", None),
        ("DELETE", f"/v1/actions/instances/{i}-mail", None),
        ("DELETE", f"/v1/actions/instances/{i}-billing?tier=org", None),
        ("POST", "/v1/actions/search", {"query": "send an email", "exclude": f"{i}-mail"}),
        ("GET", f"/v1/workspaces/{owner_workspace}", None),
        ("POST", f"/v1/workspaces/{owner_workspace}/search", {"query": "thermostat"}),
        ("DELETE", f"/v1/workspaces/{owner_workspace}", None),
    ]


TIMING_KEYS = {"timing", "phaseTimings", "timings_ms", "durationMs", "startedAt", "endedAt"}


def _stable(value: Any) -> Any:
    """An answer without its timings (which differ between any two calls)."""
    if isinstance(value, dict):
        return {key: _stable(item) for key, item in value.items() if key not in TIMING_KEYS}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def _leaks(tokens: tuple[str, ...], *texts: str) -> list[str]:
    joined = "\n".join(texts).lower()
    return [token for token in tokens if token in joined]


async def test_no_field_of_any_answer_shows_another_tenant(client: Client, settings: Settings) -> None:
    assert (await client.put("/v1/catalog/entities", json={"entities": BUILTINS}, headers=ADMIN)).status == 200
    assert (await client.put("/v1/actions/templates", json={"templates": TEMPLATES}, headers=ADMIN)).status == 200
    workspaces = settings.allowed_roots[0]
    alice, bob = Tenant("alice"), Tenant("bob")

    bob_workspace = await _ingest(client, bob, workspaces)
    await _wait_settled(client)
    counts_before = await (await client.get("/v1/index/status", headers=bob.headers)).json()
    domains_before = _stable(await (await client.post("/v1/catalog/search", json={"query": ""}, headers=bob.headers)).json())

    alice_workspace = await _ingest(client, alice, workspaces)
    await _wait_settled(client)

    # Counts and the domain index are bob's alone: alice's whole ingest changed nothing in them.
    assert await (await client.get("/v1/index/status", headers=bob.headers)).json() == counts_before
    assert _stable(await (await client.post("/v1/catalog/search", json={"query": ""}, headers=bob.headers)).json()) == domains_before

    for viewer, owner, viewer_ws, owner_ws in ((bob, alice, bob_workspace, alice_workspace), (alice, bob, alice_workspace, bob_workspace)):
        seen = []
        for method, path, body in _blind_probes(viewer_ws):
            status, headers, text = await _call(client, method, path, viewer.headers, body)
            assert status < 500, (path, body, text)
            assert not _leaks(owner.every, headers, text), (viewer.sub, path, body, _leaks(owner.every, headers, text), text[:2000])
            seen.append(text)
        # The same probes do reach data: the viewer's own ids and texts are all over its answers.
        assert set(_leaks((viewer.ids, viewer.text), *seen)) == {viewer.ids, viewer.text}

        fake = Tenant("nobody")
        fake.ids = "idq" + _letters(len(owner.ids) - 3)
        fake_ws = "ws_" + "".join(random.choices("0123456789abcdef", k=len(owner_ws) - 3))
        for (method, path, body), (_, fake_path, fake_body) in zip(_targeted_probes(owner, owner_ws), _targeted_probes(fake, fake_ws), strict=True):
            status, headers, text = await _call(client, method, path, viewer.headers, body)
            assert not _leaks(owner.private, headers, text), (viewer.sub, path, body, text[:2000])
            fake_status, _, fake_text = await _call(client, method, fake_path, viewer.headers, fake_body)
            assert status == fake_status, (path, status, fake_status, text[:500])
            ours = _stable(orjson.loads(text.replace(owner.ids, "ID").replace(owner_ws, "WS")))
            theirs = _stable(orjson.loads(fake_text.replace(fake.ids, "ID").replace(fake_ws, "WS")))
            assert ours == theirs, (path, body, ours, theirs)

    # Nothing the probes tried touched the owners' data: each still finds all of its own.
    for tenant, workspace_id in ((alice, alice_workspace), (bob, bob_workspace)):
        found = await (await client.post("/v1/catalog/search", json={"entity": [f"package:{tenant.ids}-home", f"package:{tenant.ids}-orgpkg"]}, headers=tenant.headers)).json()
        assert all(row.get("ok", True) for row in found["structuredContent"]["results"]), found
        browse = await (await client.post("/v1/actions/search", json={"query": ""}, headers=tenant.headers)).json()
        assert {row["service"] for row in browse["results"]} >= {f"{tenant.ids}-mail", f"{tenant.ids}-billing", f"{tenant.ids}-crm"}
        assert (await client.get(f"/v1/workspaces/{workspace_id}", headers=tenant.headers)).status == 200


async def test_org_and_team_members_share_exactly_what_their_org_and_team_own(client: Client, settings: Settings) -> None:
    assert (await client.put("/v1/actions/templates", json={"templates": TEMPLATES}, headers=ADMIN)).status == 200
    owner = Tenant("olivia")
    await _ingest(client, owner, settings.allowed_roots[0])
    await _wait_settled(client)
    colleague = auth(f"carl{_letters()}", org=owner.org)  # same org, not in the team
    teammate = auth(f"tina{_letters()}", org=owner.org, teams=(owner.team,))  # the team (within its org)
    namesake = auth(f"nina{_letters()}", org=f"org{_letters()}", teams=(owner.team,))  # a team of that name in another org

    shared = await (await client.post("/v1/catalog/search", json={"entity": f"package:{owner.ids}-orgpkg"}, headers=colleague)).json()
    assert shared["structuredContent"]["results"][0].get("ok", True), shared
    personal = await client.post("/v1/catalog/search", json={"entity": f"package:{owner.ids}-home"}, headers=colleague)
    assert personal.status == 404
    team_server = await (await client.post("/v1/catalog/search", json={"entity": f"mcp-server:{owner.ids}team"}, headers=teammate)).json()
    assert team_server["structuredContent"]["results"][0].get("ok", True), team_server
    assert (await client.post("/v1/catalog/search", json={"entity": f"mcp-server:{owner.ids}team"}, headers=colleague)).status == 404
    assert (await client.post("/v1/catalog/search", json={"entity": f"mcp-server:{owner.ids}team"}, headers=namesake)).status == 404
    assert (await client.post("/v1/catalog/search", json={"entity": f"package:{owner.ids}-orgpkg"}, headers=namesake)).status == 404

    rows = {}
    for name, caller in (("colleague", colleague), ("teammate", teammate), ("namesake", namesake)):
        rows[name] = {row["service"] for row in (await (await client.post("/v1/actions/search", json={"query": ""}, headers=caller)).json())["results"]}
    assert rows == {"colleague": {f"{owner.ids}-billing"}, "teammate": {f"{owner.ids}-billing", f"{owner.ids}-crm"}, "namesake": set()}
    for caller in (colleague, teammate, namesake):  # a workspace is its user's alone
        status, headers, text = await _call(client, "GET", "/v1/workspaces", caller)
        assert status == 200 and not _leaks((owner.ids, owner.text), headers, text)


async def test_a_team_belongs_to_its_org_so_a_same_named_team_elsewhere_sees_nothing(settings: Settings) -> None:
    """alice (org acme, team eng) stores a team package, MCP server and action instance: bob (org
    bobco, team eng) reaches none of it on any surface, in any count, by any id, and cannot delete
    or overwrite it; carol (acme, eng) reaches all of it; dave (team eng, no org) owns no team."""
    async with running_app(settings, embeddings_model=None, worker_in_process=False) as client:
        team, ids, text = f"eng{_letters()}", f"idq{_letters()}", f"txq{_letters()}"
        acme, bobco = f"acme{_letters()}", f"bobco{_letters()}"
        alice = auth(f"alice{_letters()}", org=acme, teams=(team,), plan="max")
        carol = auth(f"carol{_letters()}", org=acme, teams=(team,), plan="max")
        bob = auth(f"bob{_letters()}", org=bobco, teams=(team,), plan="max")
        dave = {"Authorization": "Bearer " + _token({"sub": f"dave{_letters()}", "teams": [team], "plan": "max", "exp": int(time.time()) + 600})}
        entities = [
            {"type": "package", "id": f"{ids}-pkg", "name": f"@{ids}/deploy", "summary": f"Roll out the release train {text}", "exports": [{"subpath": "./rollout", "purpose": f"Start a rollout {text}"}]},
            {"type": "mcp-server", "id": f"{ids}srv", "description": f"Pager for on-call {text}", "tools": [{"name": "page", "description": f"Page the on-call {text}"}]},
        ]
        instance = {"name": f"{ids}-crm", "template": "hubspot", "tier": "team", "owner": team, "auth": {"type": "api_key", "secret_name": "CRM_KEY"}}
        probes: list[tuple[str, str, Any]] = [
            ("GET", "/v1/index/status", None),
            ("POST", "/v1/catalog/search", {"entity": f"package:{ids}-pkg"}),
            ("POST", "/v1/catalog/search", {"entity": f"package:{ids}-pkg#./rollout"}),
            ("POST", "/v1/catalog/search", {"entity": f"mcp-server:{ids}srv"}),
            ("POST", "/v1/catalog/search", {"domain": f"mcp:{ids}srv", "query": "page"}),
            ("POST", "/v1/catalog/search", {"query": "release train rollout"}),
            ("POST", "/v1/catalog/search", {"query": "pager on-call"}),
            ("POST", "/v1/catalog/search", {"query": ""}),
            ("POST", "/v1/actions/search", {"query": ""}),
            ("POST", "/v1/actions/search", {"query": "search contacts", "include_catalog": True}),
        ]
        assert (await client.put("/v1/actions/templates", json={"templates": TEMPLATES}, headers=ADMIN)).status == 200
        bob_before = await (await client.get("/v1/index/status", headers=bob)).json()
        written = await client.put("/v1/catalog/entities", json={"entities": entities, "owner": f"team:{team}"}, headers=alice)
        assert written.status == 200 and (await written.json())["owner"] == f"team:{acme}/{team}", await written.text()
        assert (await client.put("/v1/actions/instances", json={"instances": [instance]}, headers=alice)).status == 200

        for method, path, body in probes:
            status, headers, answer = await _call(client, method, path, bob, body)
            assert status < 500 and not _leaks((text, acme), headers, answer), (path, body, answer[:1000])
            if body and "entity" in body:
                assert status == 404, (path, body, answer[:500])
        assert await (await client.get("/v1/index/status", headers=bob)).json() == bob_before, "alice's team records count for nobody in bobco"
        seen = [(await _call(client, method, path, carol, body))[2] for method, path, body in probes]
        assert text in "\n".join(seen) and all(f"{ids}-crm" in answer for answer in seen[-2:]), "acme's eng reaches its team's records"
        for method, path, body in probes[1:5]:
            assert (await _call(client, method, path, carol, body))[0] == 200, (path, body)

        # bob's "team:<name>" is bobco's team: his delete finds nothing, his write makes his own copy.
        assert (await client.delete(f"/v1/catalog/entities/package:{ids}-pkg?owner=team:{team}", headers=bob)).status == 404
        assert (await client.delete(f"/v1/actions/instances/{ids}-crm?tier=team&owner={team}", headers=bob)).status == 404
        mine = {**entities[0], "summary": "Bob's own deploy helper"}
        assert (await (await client.put("/v1/catalog/entities", json={"entities": [mine], "owner": f"team:{team}"}, headers=bob)).json())["owner"] == f"team:{bobco}/{team}"
        kept = await (await client.post("/v1/catalog/search", json={"entity": f"package:{ids}-pkg"}, headers=carol)).text()
        assert text in kept and "Bob's own" not in kept
        assert "Bob's own" in await (await client.post("/v1/catalog/search", json={"entity": f"package:{ids}-pkg"}, headers=bob)).text()

        # A team claim without an org ties the team to no org: it owns nothing and writes nothing.
        for method, path, body in probes:
            status, headers, answer = await _call(client, method, path, dave, body)
            assert status < 500 and not _leaks((text,), headers, answer), (path, body, answer[:1000])
        refused = await client.put("/v1/catalog/entities", json={"entities": entities[:1], "owner": f"team:{team}"}, headers=dave)
        assert refused.status == 400 and "org claim" in (await refused.json())["error"]["message"]


# ---- tokens --------------------------------------------------------------------------------------


def _token(claims: dict[str, Any], *, secret: str = TEST_SECRET, algorithm: str = "HS256", headers: dict[str, Any] | None = None) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jwt.warnings.InsecureKeyLengthWarning)  # HS384/HS512 want longer keys: these tokens are refused anyway
        return jwt.encode({"sub": "tom", "plan": "free", **claims}, secret, algorithm=algorithm, headers=headers)


async def test_tokens_need_the_pinned_algorithm_a_live_window_and_the_audience(settings: Settings) -> None:
    async with running_app(settings, jwt_audience="agentsearch-tests", jwt_issuer="agentsearch-iss", jwt_max_ttl_s=3600, embeddings_model=None, worker_in_process=False) as client:
        now = int(time.time())
        good = {"aud": "agentsearch-tests", "iss": "agentsearch-iss", "exp": now + 60}
        refused = {
            "HS384 with the right secret": _token(good, algorithm="HS384"),
            "HS512 with the right secret": _token(good, algorithm="HS512"),
            "alg none": jwt.encode({"sub": "tom", **good}, None, algorithm="none"),
            "RS256 header on an HMAC signature": _forge_alg(_token(good), "RS256"),
            "none header on a valid signature": _forge_alg(_token(good), "none"),
            "expired a second ago": _token({**good, "exp": now - 1}),
            "not valid before next minute": _token({**good, "nbf": now + 60}),
            "issued in the future": _token({**good, "iat": now + 3600}),
            "exp not a number": _token({**good, "exp": "tomorrow"}),
            "no exp (never expires)": _token({key: value for key, value in good.items() if key != "exp"}),
            "exp past the maximum lifetime from now": _token({**good, "exp": now + 3600 + 120}),
            "exp - iat past the maximum lifetime": _token({**good, "iat": now - 3000, "exp": now + 1000}),
            "no issuer": _token({key: value for key, value in good.items() if key != "iss"}),
            "another issuer": _token({**good, "iss": "someone-else"}),
            "no audience": _token({"iss": "agentsearch-iss", "exp": now + 60}),
            "another audience": _token({**good, "aud": "another-service"}),
            "audience list without ours": _token({**good, "aud": ["a", "b"]}),
            "no subject": jwt.encode({"aud": "agentsearch-tests", "iss": "agentsearch-iss", "exp": now + 60}, TEST_SECRET, algorithm="HS256"),
            "the wrong secret": _token(good, secret="x" * 48),
            "admin claim a string": _token({**good, "admin": "true"}),
            "garbage": "eyJhbGciOiJIUzI1NiJ9.t7e3.garbage",
        }
        # What each refusal says: the fault in plain words, never the JWT library's own wording.
        says = {
            "HS384 with the right secret": "HS256",
            "alg none": "HS256",
            "expired a second ago": "expired",
            "not valid before next minute": "not valid yet",
            "exp not a number": "claim exp must be a number",
            "no exp (never expires)": "no exp claim",
            "exp past the maximum lifetime from now": "maximum lifetime",
            "exp - iat past the maximum lifetime": "over this service's maximum of 3600s",
            "no issuer": "no iss claim",
            "another issuer": "issuer (iss) does not match",
            "no audience": "no aud claim",
            "another audience": "audience (aud) does not match",
            "the wrong secret": "bad signature",
            "garbage": "malformed token",
        }
        for reason, token in refused.items():
            for path in ("/v1/index/status", "/admin/api/overview"):
                response = await client.get(path, headers={"Authorization": f"Bearer {token}"})
                body = await response.json()
                assert response.status == 401, (reason, path, body)
                assert body["error"]["code"] == "unauthorized" and body["error"]["message"], (reason, body)
                assert says.get(reason, "") in body["error"]["message"], (reason, body)
                assert not re.search(r"codec|Invalid header|Signature verification|segments|padding", body["error"]["message"]), (reason, body)
        for token in (_token(good), _token({**good, "aud": ["other", "agentsearch-tests"]}), _token(good, headers={"kid": "../../etc/passwd", "jku": "http://evil.example"})):
            assert (await client.get("/v1/index/status", headers={"Authorization": f"Bearer {token}"})).status == 200
        admin = _token({**good, "admin": True})
        assert (await client.get("/admin/api/overview", headers={"Authorization": f"Bearer {admin}"})).status == 200
        login = await client.post("/admin/login", data={"token": _token({"admin": True, "exp": now + 60})}, allow_redirects=False)
        assert login.status == 401 and "agentsearch_admin" not in login.cookies, "the dashboard login checks the audience too"
        for reason in ("no exp (never expires)", "another issuer", "exp past the maximum lifetime from now"):
            login = await client.post("/admin/login", data={"token": _token({**jwt.decode(refused[reason], options={"verify_signature": False}), "admin": True})}, allow_redirects=False)
            assert login.status == 401 and "agentsearch_admin" not in login.cookies, (reason, "the dashboard verifies as the API does")


async def test_a_dev_token_of_another_data_directory_is_told_so_and_the_token_command_mints_only_expiring_tokens(
    settings: Settings, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    from service.cli import main

    monkeypatch.setenv("AGENTSEARCH_JWT_ISSUER", "agentsearch-dev")
    monkeypatch.setenv("AGENTSEARCH_JWT_MAX_TTL_S", "7200")
    other = tmp_path / "other-data"
    refusals = {
        ("--ttl", "0"): "every token expires",
        ("--ttl", "7201"): "over the maximum of 7200s",
        ("--teams", "eng"): "teams need an org",
    }
    for extra, message in refusals.items():
        assert main(["token", "--data-dir", str(other), "--sub", "ann", *extra]) == 2
        assert message in capsys.readouterr().err, extra
    assert main(["token", "--data-dir", str(other), "--sub", "ann", "--json"]) == 2, "no secret there: none is invented"
    assert "no secret at" in capsys.readouterr().err and not (other / "jwt-secret").exists()
    assert main(["token", "--data-dir", str(other), "--sub", "ann", "--json", "--new-secret"]) == 0
    minted = orjson.loads(capsys.readouterr().out)
    claims = minted["claims"]
    assert claims["iss"] == "agentsearch-dev" and claims["exp"] - claims["iat"] == 7200, claims

    dev = replace(settings, jwt_secret=None, jwt_issuer="agentsearch-dev", jwt_max_ttl_s=7200, embeddings_model=None, worker_in_process=False)
    async with running_app(dev) as client:
        answer = await client.get("/v1/index/status", headers={"Authorization": f"Bearer {minted['token']}"})
        message = (await answer.json())["error"]["message"]
        assert answer.status == 401 and "bad signature" in message and f"agentsearch token --data-dir {dev.data_dir.resolve()}" in message, message
        assert main(["token", "--data-dir", str(dev.data_dir), "--sub", "ann"]) == 0
        own = capsys.readouterr().out.strip()
        assert (await client.get("/v1/index/status", headers={"Authorization": f"Bearer {own}"})).status == 200
    async with running_app(dev, jwt_secret=TEST_SECRET, data_dir=tmp_path / "configured") as configured:
        answer = await configured.get("/v1/index/status", headers={"Authorization": f"Bearer {minted['token']}"})
        assert "data directory" not in (await answer.json())["error"]["message"], "a configured secret names no data directory"


def _forge_alg(token: str, algorithm: str) -> str:
    """The same payload and signature under another header ``alg``."""
    import base64

    _, payload, signature = token.split(".")
    header = base64.urlsafe_b64encode(orjson.dumps({"alg": algorithm, "typ": "JWT"})).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


# ---- no secret value is ever stored ---------------------------------------------------------------


def _secret_payloads(secret: str, label: str) -> list[tuple[str, str, dict[str, Any], dict[str, str]]]:
    """Ingest requests that carry ``secret`` in a field meant for a value: every one must be refused."""
    user = auth("sam", org="acme")
    ok_package = {"type": "package", "id": f"{label}-ok", "summary": "fine"}
    catalog = [
        {"type": "secret", "id": "stripeKey", "description": "Stripe", field: secret}
        for field in ("value", "secretValue", "secret", "plaintext", "token", "accessToken", "refreshToken")
    ]
    catalog += [
        {"type": "secret", "id": "nested", "description": "Stripe", "metadata": {"value": secret}},
        {"type": "integration", "id": "github", "name": "GitHub", "clientSecret": secret},
        {"type": "integration", "id": "github", "name": "GitHub", "accessToken": secret},
        {"type": "integration", "id": "github", "name": "GitHub", "refreshToken": secret},
        {"type": "package", "id": "pkg", "summary": "x", "secrets": {"API_KEY": secret}},
        {"type": "mcp-server", "id": "srv", "description": "x", "token": secret},
    ]
    requests = [("PUT", "/v1/catalog/entities", {"entities": [ok_package, entity]}, user) for entity in catalog]
    instance = {"name": f"{label}-billing", "template": "stripe"}
    auths = [{"type": "api_key", "secret_name": "STRIPE_KEY", field: secret} for field in ("value", "secret_value", "api_key", "key", "token", "password", "client_secret")]
    auths += [{"type": "api_key", "secret_name": secret}, {"type": "oauth", "provider": "google", "access_token": secret}, {"type": "oauth", "provider": "google", "refresh_token": secret}]
    requests += [("PUT", "/v1/actions/instances", {"instances": [{**instance, "auth": auth_block}]}, user) for auth_block in auths]
    requests += [("PUT", "/v1/actions/instances", {"instances": [{**instance, "auth": {"type": "api_key", "secret_name": "K"}, "api_key": secret}]}, user)]
    requests += [("PUT", "/v1/actions/templates", {"templates": [{"template": f"{label}-t", "display_name": "T", "auth": {"type": "api_key", "value": secret}, "actions": []}]}, ADMIN)]
    return [(method, path, body, headers) for method, path, body, headers in requests]


async def _redis_values(prefix: str) -> list[bytes]:
    """Every key and value under this run's prefix (and its arq job keys), whatever the key's type."""
    client = aioredis.from_url(REDIS_URL)
    found: list[bytes] = []
    try:
        for pattern in deployment_key_patterns(prefix):
            async for key in client.scan_iter(match=pattern, count=1000):
                found.append(key)
                kind = (await client.type(key)).decode()
                if kind == "string":
                    found.append(await client.get(key) or b"")
                elif kind == "hash":
                    found.extend(item for pair in (await client.hgetall(key)).items() for item in pair)
                elif kind == "list":
                    found.extend(await client.lrange(key, 0, -1))
                elif kind == "set":
                    found.extend(await client.smembers(key))
                elif kind == "zset":
                    found.extend(await client.zrange(key, 0, -1))
                elif kind == "stream":
                    found.extend(str(entry).encode() for entry in await client.xrange(key))
    finally:
        await client.aclose()
    return found


def _files_holding(directory: Path, needle: bytes) -> list[Path]:
    holding = []
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            holding.append(path)
    return holding


async def test_a_planted_secret_value_is_refused_everywhere_and_stored_nowhere(client: Client, settings: Settings) -> None:
    label = f"plant{_letters(6)}"
    secret = f"sk_live_{_letters(8)}{random.randrange(10**12)}{_letters(8)}"
    marker = f"harmless{_letters()}"  # the positive control: stored text, found by the same scans
    assert (await client.put("/v1/actions/templates", json={"templates": TEMPLATES}, headers=ADMIN)).status == 200
    before = await (await client.get("/v1/index/status", headers=ADMIN)).json()

    for method, path, body, headers in _secret_payloads(secret, label):
        status, response_headers, text = await _call(client, method, path, headers, body)
        assert 400 <= status < 500, (path, body, status, text)
        assert secret not in text and secret not in response_headers, "a refusal never echoes the value"
        assert orjson.loads(text)["error"]["message"]
    after_refusals = await (await client.get("/v1/index/status", headers=ADMIN)).json()
    assert after_refusals == before, "a refused batch writes nothing, not even its valid entities"

    control = {"type": "package", "id": f"{marker}-pkg", "summary": f"Shows the scans can see stored text {marker}"}
    assert (await client.put("/v1/catalog/entities", json={"entities": [control]}, headers=auth("sam"))).status == 200
    await _wait_settled(client)

    redis_values = await _redis_values(settings.queue_prefix)
    assert any(marker.encode() in value for value in redis_values), "the control reached Redis (its embed job)"
    assert not [value[:200] for value in redis_values if secret.encode() in value]
    assert _files_holding(settings.data_dir, marker.encode()), "the control is on disk"
    assert _files_holding(settings.data_dir, secret.encode()) == []


# ---- workspace roots and scopes stay confined -------------------------------------------------------


async def test_roots_and_scopes_refuse_every_way_out(settings: Settings, tmp_path: Path) -> None:
    base = settings.allowed_roots[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials.py").write_text(f"PLANTED = '{_letters()}'\n")
    root = base / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handler():\n    return 'ok'\n")
    (root / "src" / "notes.py").write_text("NOTES = 'harmless'\n")
    os.symlink(root / "loop", root / "loop")
    os.symlink("..", root / "src" / "up")
    os.symlink(base / "loop-root", base / "loop-root")
    os.symlink(outside, base / "door")
    async with running_app(settings, embeddings_model=None, revalidate_interval_s=0.0) as client:
        user = auth("walt")
        refused_roots = {
            str(base / "loop-root"): "validation_error",  # a symlink loop
            str(base / ("x" * 300)): "validation_error",  # a name the file system refuses
            str(base / "repo" / "src" / "app.py"): "validation_error",  # a file
            str(base) + "/repo\x00/etc": "validation_error",
            "~/": "path_outside_workspace",
            "/proc/self/root" + str(outside): "path_outside_workspace",
            str(base / "door"): "path_outside_workspace",
            str(base / "repo" / "src" / "up" / ".." / ".."): "path_outside_workspace",
            str(base.parent): "path_outside_workspace",
            "/": "path_outside_workspace",
        }
        for raw, code in refused_roots.items():
            status, _, text = await _call(client, "POST", "/v1/workspaces", user, {"root": raw})
            assert status == 400 and orjson.loads(text)["error"]["code"] == code, (raw, status, text)
        assert (await (await client.get("/v1/workspaces", headers=user)).json())["workspaces"] == []

        response = await client.post("/v1/workspaces", json={"root": str(root)}, headers=user)
        workspace_id = (await response.json())["id"]
        await wait_until(lambda: _state_is(client, workspace_id, user, "ready"), timeout_s=60)
        refused_paths = {
            "loop": (400, "path_outside_workspace"),
            str(outside): (400, "path_outside_workspace"),
            "/proc/self/root" + str(outside): (400, "path_outside_workspace"),
            "x" * 300: (404, "not_found"),
            "src/" + "y" * 300 + "/z": (404, "not_found"),
            "src/" + "y" * 5000: (400, "validation_error"),
            "..\\..\\etc": (404, "not_found"),  # a backslash is part of a name here, not a separator
            "%2e%2e/%2e%2e": (404, "not_found"),
            "src/\x00": (400, "path_outside_workspace"),
        }
        for path, (status_code, code) in refused_paths.items():
            status, _, text = await _call(client, "POST", f"/v1/workspaces/{workspace_id}/search", user, {"query": "handler", "path": path})
            assert (status, orjson.loads(text)["error"]["code"]) == (status_code, code), (path, text)

        # ".." is read lexically first ("src/up/.." is "src"), so a link named on the way cannot lead out.
        inside = await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "handler", "path": "src/up/.."}, headers=user)).json()
        assert inside["meta"]["query_scope"]["path"] == "src" and all(r["path"].startswith("src/") for r in inside["results"])
        whole = await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "handler", "path": "src/up/../.."}, headers=user)).json()
        assert whole["meta"]["query_scope"]["path"] == "."

        # A file swapped for a link out after indexing is dropped at the next revalidation, never read.
        (root / "src" / "notes.py").unlink()
        os.symlink(outside / "credentials.py", root / "src" / "notes.py")
        found = await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "PLANTED", "mode": "lexical"}, headers=user)).json()
        assert found["results"] == [], found
        regex = await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "PLANTED = '", "regex": True}, headers=user)).json()
        assert regex["results"] == [], regex
        assert [r["path"] for r in (await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "handler", "mode": "lexical"}, headers=user)).json())["results"]] == ["src/app.py"]


async def _state_is(client: Client, workspace_id: str, headers: dict[str, str], state: str) -> bool:
    return bool((await (await client.get(f"/v1/workspaces/{workspace_id}", headers=headers)).json())["state"] == state)


# ---- the admin surface and every /v1 operation need the right token ----------------------------------


def _operations() -> list[tuple[str, str]]:
    concrete = {"{id}": "ws_00000000000000000000", "{job_id}": "some-job", "{ref}": "package:x", "{template}": "t", "{name}": "n", "{tab}": "dead", "{action}": "retry"}
    found = []
    for path, item in CONTRACT["paths"].items():
        for method in item:
            if method in {"get", "put", "post", "delete"}:
                url = path
                for placeholder, value in concrete.items():
                    url = url.replace(placeholder, value)
                found.append((method.upper(), url))
    return found


ADMIN_ONLY_V1 = {("PUT", "/v1/actions/templates"), ("DELETE", "/v1/actions/templates/t")}
PUBLIC = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/admin/login"}


async def test_every_operation_refuses_callers_without_the_right_token(client: Client) -> None:
    """Driven by the contract: an operation added to openapi.yaml is covered without editing this test."""
    user = auth("ursula", org="acme")
    forged_admin = forged("root", admin=True)
    checked = 0
    for method, path in _operations():
        if path in PUBLIC or path.startswith("/admin/static"):
            continue
        is_page = path in ("/admin", "/admin/playground") or path.startswith("/admin/jobs/")
        for headers, expected in (({}, 401), (forged_admin, 401)):
            status, _, text = await _call(client, method, path, headers, {})
            if is_page:
                assert status == 303, (method, path, status)  # a browser without a valid session goes to the login form
            else:
                assert status == expected, (method, path, status, text[:300])
            if not is_page:
                assert set(orjson.loads(text)) == {"error"}, (method, path, text[:300])
        if path.startswith("/admin") or (method, path) in ADMIN_ONLY_V1:
            status, _, text = await _call(client, method, path, user, {})
            assert status == 403, (method, path, status, text[:300])
            assert "admin" in text, (method, path)
        checked += 1
    assert checked >= 25
    global_instance = {"instances": [{"name": "shared", "template": "gmail", "tier": "global", "auth": {"type": "oauth", "provider": "google"}}]}
    assert (await client.put("/v1/actions/instances", json=global_instance, headers=user)).status in (400, 403)
    scope = (await (await client.get("/v1/index/status", headers=user)).json())["scope"]
    assert scope == "caller", "only an admin gets every tenant's counts"


# ---- request size and rate limits -----------------------------------------------------------------------


BODY_ENDPOINTS = [
    ("PUT", "/v1/catalog/entities"),
    ("POST", "/v1/catalog/search"),
    ("PUT", "/v1/actions/instances"),
    ("PUT", "/v1/actions/templates"),
    ("POST", "/v1/actions/search"),
    ("POST", "/v1/workspaces"),
    ("POST", "/v1/workspaces/{id}/search"),
    ("POST", "/admin/api/warm"),
]


async def _chunks(data: bytes, size: int = 65_536) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_request_size_limits_hold_on_every_body(settings: Settings) -> None:
    limit = 64 * 1024
    async with running_app(settings, client_max_size=limit, embeddings_model=None) as client:
        response = await client.post("/v1/workspaces", json={"root": str(settings.allowed_roots[0])}, headers=ADMIN)
        workspace_id = (await response.json())["id"]
        before = await (await client.get("/v1/index/status", headers=ADMIN)).json()
        filler = "x" * (limit + 1024)
        big = orjson.dumps({"entities": [{"type": "package", "id": "big", "summary": filler}], "query": filler, "instances": [], "templates": []})
        deep = b"[" * 100_000 + b"]" * 100_000  # too big before it is too deep
        nested = b'{"query": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"  # within the size, past the JSON parser's depth
        for method, path in BODY_ENDPOINTS:
            path = path.replace("{id}", workspace_id)
            for body in (big, deep):
                for data in (body, _chunks(body)):  # with a Content-Length, and chunked without one
                    response = await client.request(method, path, data=data, headers={**ADMIN, "Content-Type": "application/json"})
                    answer = await response.json()
                    assert response.status == 413 and answer["error"]["code"] == "payload_too_large", (method, path, answer)
            response = await client.request(method, path, data=nested, headers={**ADMIN, "Content-Type": "application/json"})
            answer = await response.json()
            assert response.status == 400 and answer["error"]["message"], (method, path, answer)
        long_header = await client.get("/v1/index/status", headers={**ADMIN, "X-Padding": "p" * 10_000})
        assert long_header.status in (400, 431)
        long_query = await client.get("/admin/api/jobs?kind=" + "k" * 10_000, headers=ADMIN)
        assert long_query.status in (400, 414)
        assert await (await client.get("/v1/index/status", headers=ADMIN)).json() == before, "nothing refused was written"


async def test_rate_limits_hold_per_surface_across_concurrent_calls_and_front_ends(settings: Settings, tmp_path: Path) -> None:
    """Two front ends on one Redis, each surface its own bucket: a free caller gets 80 catalog, 30
    action and 20 code searches a minute (the last two set for this test), however they are spread."""
    lexical = replace(settings, embeddings_model=None, code_search_rate_limits=(("free", 20, 1_000),), action_search_rate_limits=(("free", 30, 1_000),))
    async with running_app(lexical) as first, running_app(lexical, data_dir=tmp_path / "second-front-end", worker_in_process=False) as second:
        caller, bystander = auth(f"busy{_letters()}", plan="free"), auth(f"calm{_letters()}", plan="free")
        (settings.allowed_roots[0] / "repo").mkdir()
        (settings.allowed_roots[0] / "repo" / "a.py").write_text("def a():\n    return 1\n")
        response = await first.post("/v1/workspaces", json={"root": str(settings.allowed_roots[0] / "repo")}, headers=caller)
        workspace_id = (await response.json())["id"]
        calls = []
        for n in range(180):
            front_end = (first, second)[n % 2]
            if n < 100:
                calls.append(("catalog", front_end.post("/v1/catalog/search", json={"query": "email"}, headers=caller)))
            elif n < 140:
                calls.append(("actions", front_end.post("/v1/actions/search", json={"query": "email"}, headers=caller)))
            else:
                calls.append(("code", first.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "a", "mode": "lexical"}, headers=caller)))
        responses = await asyncio.gather(*(call for _, call in calls))
        for surface, allowed, sent in (("catalog", 80, 100), ("actions", 30, 40), ("code", 20, 40)):
            statuses = sorted(r.status for (s, _), r in zip(calls, responses, strict=True) if s == surface)
            assert statuses == [200] * allowed + [429] * (sent - allowed), (surface, statuses)
        for (surface, _), response in zip(calls, responses, strict=True):
            if response.status == 429:
                body = await response.json()
                limit = body["structuredContent"]["rateLimit"] if surface == "catalog" else body["error"]["details"]["rateLimit"]
                assert body["error"]["code"] == "rate_limited" and limit["surface"] == surface
                assert 1 <= int(response.headers["Retry-After"]) == limit["retryAfterSeconds"] <= 60
        for front_end in (first, second):
            assert (await front_end.post("/v1/catalog/search", json={"query": "email"}, headers=bystander)).status == 200
            assert (await front_end.post("/v1/catalog/search", json={"query": "email"}, headers=caller)).status == 429
        # Refused bad input is not counted against anyone, and never reaches the limiter as a 5xx.
        bad = await first.post("/v1/catalog/search", json={"limit": "ten"}, headers=auth(f"fresh{_letters()}"))
        assert bad.status == 400

