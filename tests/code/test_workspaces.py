"""Workspace code search over HTTP, on the real app, store, Redis, worker and model: registration,
index state, lexical / regex / hybrid search, scope, fallbacks and bad input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.settings import DEFAULT_MODEL, Settings
from tests.callers import ALICE, auth
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_embedded, wait_indexed, wait_model_ready
from tests.helpers import running_app

SCOPE_NOTICE = "semantic search scope is too large; narrow path or glob"

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def client(shared_client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    return shared_client


async def test_register_reports_index_state_and_skip_counts(client: TestClient[Any, Any], tree: Path) -> None:
    created = await register(client, tree)
    assert created["created"] is True and created["id"].startswith("ws_")
    state = await wait_indexed(client, created["id"])
    # src/pkg/auth.py, billing.py, server.go, client.ts, lib.rs, test_auth.py, guide.md, coverage/report.txt, .gitignore
    assert state["files"] == 9
    assert state["chunks"] >= 12
    assert {"files", "chunks", "embedded", "pending", "warming"} <= set(state)
    assert state["embedded"] == 0 and state["pending"] == 0 and state["warming"] is False, "cold until searched or warmed"
    skipped = state["skipped"]
    assert skipped["binary"] == 1 and skipped["ignored"] == 1
    assert skipped["pruned_dirs"] == 3, "node_modules, vendor and the gitignored build/"
    again = await register(client, tree)
    assert again["id"] == created["id"] and again["created"] is False


async def test_skip_dirs_setting_prunes_directories_by_exact_name(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree, skip_dirs=["docs", "coverage"])
    state = await wait_indexed(client, workspace["id"])
    assert state["files"] == 7 and state["skipped"]["pruned_dirs"] == 5
    found = await search(client, workspace["id"], query="create a session", mode="lexical")
    assert not any(r["path"].startswith("docs/") for r in found["results"])


async def test_lexical_search_answers_path_line_snippet(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    found = await search(client, workspace["id"], query="hash_password", mode="lexical")
    lines = found["output"].splitlines()
    assert lines[0] == "src/pkg/auth.py:6:def hash_password(password: str, salt: str) -> str:"
    assert all(not line.startswith("[") for line in lines), "lexical mode has no source tags"
    first = found["results"][0]
    assert {"path", "line", "snippet", "source", "score"} <= set(first)
    assert first["source"] == "lexical" and first["adjustment"] == {"category": "source", "weight": 1.0}
    paths = [r["path"] for r in found["results"]]
    assert "tests/test_auth.py" in paths and "coverage/report.txt" in paths
    assert not {"build/out.py", "debug.log", "node_modules/left-pad/index.js"} & set(paths), "skipped and ignored files"
    assert paths.index("src/pkg/auth.py") < paths.index("tests/test_auth.py"), "source above tests"
    assert found["meta"]["mode"] == "lexical"
    assert found["meta"]["match_counts"]["literal_chunks"] >= 3
    assert found["meta"]["source_mix"] == {"lexical": len(found["results"]), "semantic": 0, "merged": 0}


async def test_regex_search_is_lexical_with_exact_line_numbers(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    found = await search(client, workspace["id"], query=r"def \w+_session\(", regex=True)
    assert found["output"].splitlines() == [
        "src/pkg/auth.py:17:    def create_session(self, user_id):",
        "src/pkg/auth.py:22:    def drop_session(self, token):",
    ]
    assert found["meta"]["mode"] == "lexical" and found["meta"]["fallback"] == "regex"
    assert found["meta"]["match_counts"]["lines"] == 2
    insensitive = await search(client, workspace["id"], query="HANDLELOGIN", regex=True, ignore_case=True, glob="*.go")
    assert [r["line"] for r in insensitive["results"]] == [5, 6]


async def test_invalid_regex_is_a_400_naming_the_error(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    response = await client.post(f"/v1/workspaces/{workspace['id']}/search", json={"query": "def (broken", "regex": True}, headers=ALICE)
    body = await response.json()
    assert response.status == 400 and body["error"]["code"] == "invalid_regex"
    assert "missing ), unterminated subpattern" in body["error"]["message"] and "position 4" in body["error"]["message"]


async def test_path_and_glob_scope(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    wid = workspace["id"]
    in_src = await search(client, wid, query="session", mode="lexical", path="src")
    assert in_src["results"] and all(r["path"].startswith("src/") for r in in_src["results"])
    go_only = await search(client, wid, query="session", mode="lexical", glob="*.go")
    assert {r["path"] for r in go_only["results"]} == {"src/server.go"}
    relative = await search(client, wid, query="def", mode="lexical", glob="src/pkg/*.py")
    assert {r["path"] for r in relative["results"]} == {"src/pkg/auth.py", "src/pkg/billing.py"}
    one_file = await search(client, wid, query="session", mode="lexical", path="src/pkg/auth.py")
    assert {r["path"] for r in one_file["results"]} == {"src/pkg/auth.py"}
    whole = await search(client, wid, query="session", mode="lexical", path=".")
    assert {"src/pkg/auth.py", "src/server.go", "docs/guide.md"} <= {r["path"] for r in whole["results"]}
    nothing = await search(client, wid, query="session", mode="lexical", glob="*.java")
    assert nothing["results"] == [] and nothing["output"].startswith("no matches")


BAD_SEARCHES: list[tuple[dict[str, Any], int, str]] = [
    ({"query": "x", "path": "../outside"}, 400, "path_outside_workspace"),
    ({"query": "x", "path": "/etc"}, 400, "path_outside_workspace"),
    ({"query": "x", "glob": "**/tests/**"}, 400, "path_outside_workspace"),
    ({"query": "x", "glob": "../*.py"}, 400, "path_outside_workspace"),
    ({"query": "x", "path": "no/such/dir"}, 404, "not_found"),
    ({"query": "   "}, 400, "validation_error"),
    ({"query": ""}, 400, "validation_error"),
    ({"path": "src"}, 400, "validation_error"),
    ({"query": "x", "limit": -100000}, 400, "validation_error"),
    ({"query": "x", "limit": 0}, 400, "validation_error"),
    ({"query": "x", "mode": "fuzzy"}, 400, "validation_error"),
    ({"query": "x", "regex": "yes"}, 400, "validation_error"),
    ({"query": "x", "colour": "red"}, 400, "validation_error"),
    ({"query": "(", "regex": True}, 400, "invalid_regex"),
]


async def test_bad_search_input_is_a_clear_4xx_and_changes_nothing(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    before = await wait_indexed(client, workspace["id"])
    (tree / "src" / "new_module.py").write_text("def brand_new():\n    pass\n")  # a change a bad request must not index
    for body, status_code, code in BAD_SEARCHES:
        response = await client.post(f"/v1/workspaces/{workspace['id']}/search", json=body, headers=ALICE)
        answer = await response.json()
        assert response.status == status_code and answer["error"]["code"] == code, (body, answer)
        assert answer["error"]["message"], body
    after = await status(client, workspace["id"])
    assert (after["files"], after["chunks"], after["embedded"]) == (before["files"], before["chunks"], before["embedded"])
    assert after["last_sync"] == before["last_sync"], "no revalidation ran for a bad request"


async def test_symlink_escape_in_scope_is_refused(client: TestClient[Any, Any], tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "keys.py").write_text("API_KEY = 'x'\n")
    os.symlink(outside, tree / "escape")
    workspace = await register(client, tree)
    response = await client.post(f"/v1/workspaces/{workspace['id']}/search", json={"query": "API_KEY", "path": "escape"}, headers=ALICE)
    assert response.status == 400 and (await response.json())["error"]["code"] == "path_outside_workspace"
    found = await search(client, workspace["id"], query="API_KEY", mode="lexical")
    assert found["results"] == [], "the walker never follows a link out of the root"


async def test_roots_must_lie_under_an_allowed_base(client: TestClient[Any, Any], module_settings: Settings, tmp_path: Path) -> None:
    base = module_settings.allowed_roots[0]
    (tmp_path / "elsewhere").mkdir()
    link = base / f"link-out-{tmp_path.name}"
    os.symlink(tmp_path / "elsewhere", link)
    cases = [
        (str(tmp_path / "elsewhere"), "path_outside_workspace"),
        (str(base / ".." / "elsewhere"), "path_outside_workspace"),
        (str(link), "path_outside_workspace"),
        ("relative/dir", "validation_error"),
        (str(base / "missing"), "validation_error"),
    ]
    for root, code in cases:
        response = await client.post("/v1/workspaces", json={"root": root}, headers=ALICE)
        body = await response.json()
        assert response.status == 400 and body["error"]["code"] == code, (root, body)


BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"prewarm_embeddings": True}, "prewarm_embeddings requires embeddings_model"),
    ({"embeddings_model": "nobody/model"}, "provider 'nobody' is not configured"),
    ({"embeddings_model": "no-slash"}, "provider_id/model_id"),
    ({"embeddings_model": "local/all-MiniLM-L6-v2", "embeddings_dimensions": 1536}, "384 dimensions"),
    ({"embeddings_dimensions": 0}, "between 1 and 8192"),
    ({"skip_dirs": ["src/pkg"]}, "not a directory name"),
    ({"skip_dirs": ["*.tmp"]}, "not a directory name"),
    ({"index_dir": "/etc/agentsearch"}, "must lie under the data directory"),
    ({"colour": "red"}, "unknown field"),
]


async def test_bad_search_settings_are_refused_with_the_reason(client: TestClient[Any, Any], tree: Path) -> None:
    for search_settings, message in BAD_SETTINGS:
        response = await client.post("/v1/workspaces", json={"root": str(tree), "search": search_settings}, headers=ALICE)
        body = await response.json()
        assert response.status == 400 and message in body["error"]["message"], (search_settings, body)
    listed = await (await client.get("/v1/workspaces", headers=ALICE)).json()
    assert str(tree) not in [w["root"] for w in listed["workspaces"]], "nothing registered"


async def test_another_users_workspace_is_a_404_like_a_missing_one(client: TestClient[Any, Any], tree: Path) -> None:
    owner, other = auth("dora", org="acme"), auth("eve", org="acme")
    workspace = await register(client, tree, headers=owner)
    wid = workspace["id"]
    missing = await client.get("/v1/workspaces/ws_00000000000000000000", headers=other)
    foreign = await client.get(f"/v1/workspaces/{wid}", headers=other)
    assert missing.status == foreign.status == 404
    assert (await foreign.json())["error"]["code"] == "not_found" and wid in (await foreign.json())["error"]["message"]
    searched = await client.post(f"/v1/workspaces/{wid}/search", json={"query": "x"}, headers=other)
    deleted = await client.delete(f"/v1/workspaces/{wid}", headers=other)
    assert searched.status == deleted.status == 404
    listed = await client.get("/v1/workspaces", headers=other)
    assert (await listed.json())["workspaces"] == []
    status_bob = await client.get("/v1/index/status", headers=other)
    assert (await status_bob.json())["surfaces"]["code"]["records"] == 0, "an org member sees none of alice's chunks"
    mine = await client.get("/v1/workspaces", headers=owner)
    assert [w["id"] for w in (await mine.json())["workspaces"]] == [wid]
    # bob may register the same root: a separate workspace of his own
    his = await register(client, tree, headers=other)
    assert his["id"] != wid


async def test_hybrid_embeds_a_small_cold_scope_at_query_time(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    wid = workspace["id"]
    before = await wait_indexed(client, wid)
    await wait_model_ready(client)
    found = await search(client, wid, query="give the customer their money back", path="src/pkg")
    assert found["meta"]["mode"] == "hybrid" and found["meta"]["fallback"] is None
    scoped = found["meta"]["scope"]["chunks"]
    assert found["meta"]["embedded_now"] == scoped > 0
    assert found["results"][0]["path"] == "src/pkg/billing.py" and found["results"][0]["symbol"] == "refund_payment"
    rows = [f"{r['path']}:{r['line']}:{r['snippet']}" for r in found["results"]]
    assert found["output"].splitlines()[: len(rows)] == rows, "every result line is path:line:snippet; the source is in results"
    assert sum(found["meta"]["source_mix"].values()) == len(found["results"])
    after = await status(client, wid)
    assert after["embedded"] == before["embedded"] + scoped
    again = await search(client, wid, query="refund a payment", path="src/pkg")
    assert again["meta"]["embedded_now"] == 0, "embedded chunks stay embedded"
    assert again["results"][0]["source"] == "merged"


async def test_broad_cold_fallback_is_lexical_with_the_notice_then_warms(module_settings: Settings, tree: Path) -> None:
    async with running_app(variant(module_settings, "limit5", semantic_scope_limit=5)) as client:
        workspace = await register(client, tree)
        wid = workspace["id"]
        await wait_indexed(client, wid)
        cold = await search(client, wid, query="retry with exponential backoff")
        assert cold["meta"]["mode"] == "lexical" and cold["meta"]["fallback"] == "scope_too_large"
        assert cold["notices"][0] == SCOPE_NOTICE
        assert f"notice: {SCOPE_NOTICE}" in cold["output"].splitlines()
        assert cold["results"] and not cold["output"].startswith("[")
        assert cold["meta"]["warming"] is True
        state = await wait_embedded(client, wid)
        assert state["warm"] is True and state["warming"] is False
        await wait_model_ready(client)
        warm = await search(client, wid, query="retry with exponential backoff")
        assert warm["meta"]["mode"] == "hybrid" and warm["meta"]["fallback"] is None and warm["meta"]["embedded_now"] == 0
        assert warm["results"][0]["path"] == "web/client.ts"
        # a small scope never needed the warm index
        small = await search(client, wid, query="queue full", path="crates")
        assert small["meta"]["mode"] == "hybrid"


async def test_without_embeddings_hybrid_falls_back_to_lexical_with_a_notice(module_settings: Settings, tree: Path) -> None:
    async with running_app(variant(module_settings, "nomodel", embeddings_model=None)) as client:
        workspace = await register(client, tree)
        found = await search(client, workspace["id"], query="hash_password")
        assert found["meta"]["mode"] == "lexical" and found["meta"]["fallback"] == "embeddings_not_configured"
        assert found["notices"] == ["embeddings are not configured; lexical results only"]
        assert found["results"][0]["path"] == "src/pkg/auth.py"


async def test_prewarm_embeds_the_workspace_when_registered(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree, embeddings_model="local/all-MiniLM-L6-v2", prewarm_embeddings=True)
    state = await wait_embedded(client, workspace["id"])
    assert state["warm"] is True and state["cold"] == 0
    found = await search(client, workspace["id"], query="bounded job queue")
    assert found["meta"]["embedded_now"] == 0 and found["results"][0]["path"] == "crates/queue/src/lib.rs"


async def test_workspaces_and_their_index_survive_a_restart(module_settings: Settings, tree: Path) -> None:
    restarted = variant(module_settings, "restart")
    async with running_app(restarted) as first:
        workspace = await register(first, tree)
        await wait_indexed(first, workspace["id"])
        await search(first, workspace["id"], query="money back", path="src/pkg")
        before = await status(first, workspace["id"])
    async with running_app(restarted) as second:
        after = await status(second, workspace["id"])
        assert (after["files"], after["chunks"], after["embedded"]) == (before["files"], before["chunks"], before["embedded"])
        assert after["search"] == before["search"]
        found = await search(second, workspace["id"], query="refund_payment", mode="lexical")
        assert found["results"][0]["path"] == "src/pkg/billing.py"
        assert found["meta"]["index"]["changed_files"] == 0, "nothing re-indexed after the restart"


async def test_delete_removes_the_workspace_and_its_chunks(client: TestClient[Any, Any], tree: Path) -> None:
    """A warmed workspace (every chunk embedded, so every chunk has its point) is deleted: its
    chunks leave the store."""
    owner = auth("frank")
    workspace = await register(client, tree, headers=owner, embeddings_model=DEFAULT_MODEL, prewarm_embeddings=True)
    before = await wait_embedded(client, workspace["id"], owner)
    assert (await (await client.get("/v1/index/status", headers=owner)).json())["surfaces"]["code"]["records"] == before["chunks"]
    response = await client.delete(f"/v1/workspaces/{workspace['id']}", headers=owner)
    assert response.status == 200
    assert (await client.get(f"/v1/workspaces/{workspace['id']}", headers=owner)).status == 404
    counts = await (await client.get("/v1/index/status", headers=owner)).json()
    assert counts["surfaces"]["code"]["records"] == 0


async def test_missing_token_is_401(client: TestClient[Any, Any], tree: Path) -> None:
    response = await client.post("/v1/workspaces", json={"root": str(tree)})
    assert response.status == 401
    other = await client.post("/v1/workspaces", json={"root": str(tree)}, headers=auth("carol"))
    assert other.status == 201
