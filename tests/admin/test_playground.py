"""The search playground (``/admin/playground`` and ``/admin/api/playground``) over real data on all three surfaces.

One app for the module (the real model, embedded Qdrant, real Redis), loaded over HTTP as the
callers load it: the catalog's built-ins, alice's and bob's packages, the hand-made action catalog
with each one's instances, and a workspace each. Each trace must show the result that caller's own
search answers, in the same order with the same scores, with its channel scores and timings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from service.engine.queue import forget_deployment
from service.settings import Settings
from tests.actions.helpers import HAND_MADE, oauth, put_instances, put_templates
from tests.admin.helpers import get_page
from tests.callers import ADMIN, auth
from tests.catalog.fixtures import put, seed_builtins
from tests.code.helpers import register, wait_indexed, wait_model_ready
from tests.helpers import REDIS_URL, running_app, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ALICE = auth("alice", org="acme")
BOB = auth("bob", org="bobco")
ALICE_PACKAGE = {"type": "package", "id": "garden-sprinklers", "name": "garden-sprinklers", "summary": "Water the garden lawn with the sprinklers on a schedule.", "tags": ["garden"]}
ACME_PACKAGE = {"type": "package", "id": "acme-handbook", "name": "acme-handbook", "summary": "The garden club handbook of the acme organization.", "tags": ["garden"]}
BOB_PACKAGE = {"type": "package", "id": "lawn-robot", "name": "lawn-robot", "summary": "Mow the garden lawn with a robot mower.", "tags": ["garden"]}
ALICE_CODE = {
    "thermostat.py": "def set_thermostat(temperature: float) -> None:\n    \"\"\"Set the home thermostat to a temperature.\"\"\"\n    print(temperature)\n",
    "docs/notes.md": "# Notes\n\nThe thermostat is set each morning.\n",
}
BOB_CODE = {"mower.py": "def start_mower(zone: str) -> None:\n    \"\"\"Start the lawn mower in one zone of the garden.\"\"\"\n    print(zone)\n"}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def loaded(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    """The app with every surface's data loaded and embedded; the workspace ids by user."""
    base = tmp_path_factory.mktemp("playground")
    workspaces = base / "workspaces"
    prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    settings = Settings(
        data_dir=base / "data",
        redis_url=REDIS_URL,
        queue_prefix=prefix,
        jwt_secret="test-secret-for-agentsearch-tests-0123456789",
        allowed_roots=(workspaces,),
        single_tenant=True,
        sweep_interval_s=60,
        worker_health_check_s=5,
        job_timeout_s=60,
    )
    try:
        async with running_app(settings) as client:
            await seed_builtins(client)
            await put(client, [ALICE_PACKAGE], caller=ALICE)
            await put(client, [ACME_PACKAGE], caller=ALICE, owner="org")
            await put(client, [BOB_PACKAGE], caller=BOB)
            await put_templates(client, HAND_MADE)
            await put_instances(client, ALICE, oauth("alice-mail", "gmail", "google"))
            await put_instances(client, BOB, oauth("bob-slack", "slack", "slack"))
            ids = {
                "alice": (await register(client, _write(workspaces / "alice-repo", ALICE_CODE), headers=ALICE))["id"],
                "bob": (await register(client, _write(workspaces / "bob-repo", BOB_CODE), headers=BOB))["id"],
            }
            await _wait_all_embedded(client)
            for user, headers in (("alice", ALICE), ("bob", BOB)):
                await wait_indexed(client, ids[user], headers)
            await wait_model_ready(client)  # a hybrid code search embeds its small scope then
            yield client, ids
    finally:
        redis = aioredis.from_url(REDIS_URL)
        try:
            await forget_deployment(redis, prefix)
        finally:
            await redis.aclose()


async def _wait_all_embedded(client: TestClient[Any, Any]) -> None:
    async def done() -> bool:
        surfaces = (await (await client.get("/v1/index/status", headers=ADMIN)).json())["surfaces"]
        return all(surfaces[name]["records"] and surfaces[name]["pending"] == 0 for name in ("catalog", "actions"))

    await wait_until(done, timeout_s=240)


async def _trace(client: TestClient[Any, Any], status: int = 200, **params: Any) -> dict[str, Any]:
    response = await client.get("/admin/api/playground?" + urlencode(params), headers=ADMIN)
    body: dict[str, Any] = await response.json()
    assert response.status == status, body
    return body


def _page_rows(html: str) -> list[str]:
    body = re.search(r'<table class="playground" id="pg-results">(.*?)</table>', html, re.S)
    assert body, "the page shows the results table"
    return re.findall(r'<tr data-rank="\d+" data-id="([^"]+)"', body.group(1))


def _cell(html: str, rank: int, channel: str) -> str:
    row = re.search(rf'<tr data-rank="{rank}" data-id="[^"]*">(.*?)</tr>', html, re.S)
    assert row, f"the table has a row {rank}"
    cell = re.search(rf'data-channel="{channel}">(.*?)</td>', row.group(1), re.S)
    assert cell, (rank, channel)
    return cell.group(1).strip()


async def test_catalog_trace_shows_what_the_caller_gets_with_channel_scores(loaded: Any) -> None:
    client, _ = loaded
    query = "send an email message to recipients"
    served = await (await client.post("/v1/catalog/search", json={"query": query, "limit": 5}, headers=ALICE)).json()
    trace = await _trace(client, surface="catalog", sub="alice", org="acme", query=query, limit=5)
    assert trace["caller"]["tenants"] == ["global", "user:alice", "org:acme"]
    assert [r["id"] for r in trace["results"]] == [c["entity"] for c in served["structuredContent"]["results"]], "the caller's own answer, in its order"
    assert [r["score"] for r in trace["results"]] == [c["score"] for c in served["structuredContent"]["results"]]
    top = trace["results"][0]
    assert top["id"] == "capability:emailSend"
    assert top["dense"] > 0.3 and top["lexical"] > 0 and top["fused"] is not None
    assert trace["mode"] == "hybrid" and trace["kind"] == "ranked"
    assert trace["timings"]["totalMs"] > 0 and "loadAndRank" in trace["timings"]["phases"]
    assert "scoreFrom" in served["structuredContent"]["results"][0] and "identity" not in served["structuredContent"]["results"][0]["scoreFrom"], "the normal answer is unchanged"

    # The query naming an entity exactly: its name bonus shows, and the fused score is the score less the bonuses.
    named = await _trace(client, surface="catalog", sub="alice", org="acme", query="emailSend")
    first = named["results"][0]
    assert first["id"] == "capability:emailSend" and first["bonuses"]["name"] == 0.5
    assert first["fused"] == pytest.approx(first["score"] - sum(v for k, v in first["bonuses"].items() if k != "rerank"), abs=1e-3)

    html = await get_page(client, "/admin/playground?" + urlencode({"surface": "catalog", "sub": "alice", "org": "acme", "query": query, "limit": 5}))
    assert _page_rows(html)[0] == "capability:emailSend"
    assert float(_cell(html, 1, "dense")) == pytest.approx(top["dense"], abs=1e-4)
    assert float(_cell(html, 1, "lexical")) == pytest.approx(top["lexical"], abs=1e-4)
    assert re.search(r'<b id="pg-total">[\d.]+ ms</b>', html) and 'data-phase="loadAndRank"' in html
    assert 'aria-current="page">Playground</a>' in html, "the nav marks the playground"


async def test_code_trace_shows_each_chunks_evidence(loaded: Any) -> None:
    client, ids = loaded
    query = "set the thermostat temperature"
    served = await (await client.post(f"/v1/workspaces/{ids['alice']}/search", json={"query": query, "limit": 5}, headers=ALICE)).json()
    # The workspace names its owner: the sub may be left out.
    trace = await _trace(client, surface="code", workspace=ids["alice"], query=query, limit=5)
    assert trace["caller"]["sub"] == "alice"
    assert [r["id"] for r in trace["results"]] == [f"{r['path']}:{r['line']}" for r in served["results"]]
    assert [r["score"] for r in trace["results"]] == [r["score"] for r in served["results"]]
    top = trace["results"][0]
    assert top["id"].startswith("thermostat.py:") and trace["mode"] == "hybrid"
    assert top["lexical"] > 0 and top["dense"] > 0 and top["fused"] > 0, top
    assert top["score"] == pytest.approx(top["fused"] * top["evidence"]["pathWeight"], abs=1e-5)
    docs = next(r for r in trace["results"] if r["id"].startswith("docs/notes.md"))
    assert docs["bonuses"] == {"path (docs)": "×0.8"}
    assert {"revalidate", "lexical", "semantic"} <= set(trace["timings"]["phases"])
    assert "fusion" in trace["meta"]


async def test_actions_trace_shows_keyword_cosine_and_bonuses(loaded: Any) -> None:
    client, _ = loaded
    query = "send an email"
    served = await (await client.post("/v1/actions/search", json={"query": query, "limit": 5}, headers=ALICE)).json()
    trace = await _trace(client, surface="actions", sub="alice", org="acme", query=query, limit=5)
    assert [r["score"] for r in trace["results"]] == [r["score"] for r in served["results"]]
    top = trace["results"][0]
    assert top["id"] == "alice-mail.send_email", trace["results"]
    assert top["lexical"] > 0.5 and top["dense"] > 0.3
    assert top["bonuses"] == {"connected": 0.05, "risk": 0.01}
    assert top["score"] == pytest.approx(top["fused"] + 0.06, abs=1e-3)
    assert set(trace["meta"]["weights"]) == {"keyword", "embedding"}
    assert "keyword" not in served["results"][0] and "cosine" not in served["results"][0], "the normal rows are unchanged"


async def test_a_tenant_sees_only_its_own_data(loaded: Any) -> None:
    client, ids = loaded
    as_alice = await _trace(client, surface="catalog", sub="alice", org="acme", query="garden lawn")
    as_bob = await _trace(client, surface="catalog", sub="bob", org="bobco", query="garden lawn")
    assert "package:garden-sprinklers" in [r["id"] for r in as_alice["results"]]
    assert "package:lawn-robot" in [r["id"] for r in as_bob["results"]]
    assert "package:lawn-robot" not in [r["id"] for r in as_alice["results"]]
    assert "package:garden-sprinklers" not in [r["id"] for r in as_bob["results"]]
    assert "package:acme-handbook" in [r["id"] for r in as_alice["results"]], "the org's records reach its member"
    alone = await _trace(client, surface="catalog", sub="alice", query="garden lawn")
    assert "package:acme-handbook" not in [r["id"] for r in alone["results"]], "without the org claim they do not"

    bob_actions = await _trace(client, surface="actions", sub="bob", org="bobco", query="send an email", limit=50)
    assert not any(r["id"].startswith("alice-mail.") for r in bob_actions["results"])
    assert any(r["id"].startswith("bob-slack.") for r in (await _trace(client, surface="actions", sub="bob", org="bobco", query="post a message"))["results"])

    refused = await _trace(client, 400, surface="code", sub="bob", workspace=ids["alice"], query="thermostat")
    assert "belongs to user:alice, not user:bob" in refused["error"]["message"]
    bob_code = await _trace(client, surface="code", workspace=ids["bob"], query="thermostat mower")
    assert all(r["id"].startswith("mower.py") for r in bob_code["results"]) and bob_code["results"]


async def test_only_an_admin_may_use_the_playground(loaded: Any) -> None:
    client, _ = loaded
    params = urlencode({"surface": "catalog", "sub": "alice", "query": "email"})
    page = await client.get(f"/admin/playground?{params}", headers=ALICE)
    assert page.status == 403 and "admin" in await page.text()
    bare = await client.get(f"/admin/playground?{params}", allow_redirects=False)
    assert bare.status == 303 and bare.headers["Location"] == "/admin/login"
    api = await client.get(f"/admin/api/playground?{params}", headers=ALICE)
    assert api.status == 403 and "admin" in (await api.json())["error"]["message"]
    assert (await client.get(f"/admin/api/playground?{params}")).status == 401


BAD_INPUT = [
    ({"surface": "books", "sub": "alice", "query": "email"}, "surface must be one of actions, catalog, code"),
    ({"surface": "catalog", "sub": "alice", "query": "  "}, "query is empty"),
    ({"surface": "catalog", "sub": "alice", "query": "q" * 2001}, "at most 2000"),
    ({"surface": "code", "sub": "alice", "query": "thermostat"}, "code search needs a workspace"),
    ({"surface": "code", "workspace": "ws_00000000000000000000", "query": "thermostat"}, "no workspace 'ws_00000000000000000000'"),
    ({"surface": "catalog", "sub": "nobody", "query": "email"}, "unknown tenant: no surface holds a record or workspace of user:nobody;"),
    ({"surface": "catalog", "sub": "nobody", "org": "acmee", "query": "email"}, "of user:nobody or org:acmee;"),
    ({"surface": "catalog", "sub": "alice", "teams": "eng", "query": "email"}, "teams need an org"),
    ({"surface": "catalog", "sub": "", "query": "email"}, "sub is empty"),
    ({"surface": "catalog", "sub": "alice", "query": "email", "limit": "0"}, "limit must be between 1 and 50"),
    ({"surface": "catalog", "sub": "alice", "query": "email", "plan": "gold"}, "plan must be one of"),
    ({"surface": "actions", "sub": "alice", "workspace": "ws_x", "query": "email"}, "workspace is for code search only"),
    ({"surface": "catalog", "sub": "alice", "query": "email", "tenant": "x"}, "unknown query parameter(s) tenant"),
]


async def test_bad_input_is_a_400_saying_what_to_fix(loaded: Any) -> None:
    client, _ = loaded
    for params, message in BAD_INPUT:
        body = await _trace(client, 400, **params)
        assert message in body["error"]["message"], (params, body)
        html = await get_page(client, "/admin/playground?" + urlencode(params), status=400)
        error = re.search(r'<p id="playground-error" class="error" role="alert">(.*?)</p>', html, re.S)
        assert error and message.replace("'", "&#39;") in error.group(1), (params, html[-2000:])
        assert 'id="playground-form"' in html and "pg-results" not in html, "the form again, no results"
    assert "known tenants: org:acme, user:alice, user:bob" in (await _trace(client, 400, surface="catalog", sub="nobody", query="x"))["error"]["message"]
    typo = await _trace(client, surface="catalog", sub="alice", org="acmee", query="email")
    assert "org:acmee holds no records on any surface (a typo?); the search ran without it" in typo["notices"]
    empty = await get_page(client, "/admin/playground")
    assert 'id="playground-form"' in empty and "playground-error" not in empty, "the first visit is the empty form"
