"""Workspace roots as a trust boundary, on the real app (store, Redis, worker, files): the service's own
directories are never searchable, roots lie under bases named after their owners, another user's
root is refused, index directories stay in the data or index directory, registrations have a
quota shared by a deployment's front ends, and a workspace whose root or cache is gone answers a clear 4xx and can always be deleted."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient

from service.code.state import workspaces_of
from service.code.workspace import REGISTRY_DIR, SearchConfig, Workspace, WorkspaceRegistry, new_workspace, workspace_id
from service.engine.queue import forget_deployment
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ADMIN, ALICE, BOB_ENG, CAROL, auth
from tests.helpers import REDIS_URL, running_app, wait_until, with_settings

Client = TestClient[Any, Any]


async def _post(client: Client, path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    response = await client.post(path, json=body, headers=headers)
    return response.status, await response.json()


async def _register(client: Client, root: Path | str, headers: dict[str, str], **search: Any) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"root": str(root)}
    if search:
        body["search"] = search
    return await _post(client, "/v1/workspaces", body, headers)


async def _ready(client: Client, workspace: str, headers: dict[str, str]) -> None:
    async def ready() -> bool:
        return bool((await (await client.get(f"/v1/workspaces/{workspace}", headers=headers)).json())["state"] == "ready")

    await wait_until(ready, timeout_s=60)


async def _lexical(client: Client, workspace: str, headers: dict[str, str], query: str, **extra: Any) -> dict[str, Any]:
    status, body = await _post(client, f"/v1/workspaces/{workspace}/search", {"query": query, "mode": "lexical", **extra}, headers)
    assert status == 200, body
    return body


def _repo(path: Path, text: str = "def handler():\n    return 'ok'\n") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "app.py").write_text(text)
    return path


# ---- the data directory is never a workspace ----------------------------------------------------------


async def test_the_data_directory_and_its_secret_are_never_searchable_from_any_root(settings: Settings, tmp_path: Path) -> None:
    """An allowed base that holds the data directory (``--allow-root /tmp`` with data under /tmp), a
    single-tenant deployment whose secret is the generated dev secret: registering the data directory,
    its parent, a directory inside it or another deployment's data directory is refused; a tree with
    links into it, and a root registered before these checks, never yield a file from it."""
    base = tmp_path / "base"
    base.mkdir()
    data = base / "data"
    other_data = base / "other-deployment"
    other_data.mkdir()
    (other_data / ".agentsearch-noindex").write_text("")
    (other_data / "jwt-secret").write_text("othersecretvalueqq\n")
    repo = _repo(base / "repo")
    os.symlink(data, repo / "peek")
    os.symlink(data / "jwt-secret", repo / "key.txt")
    app_settings = with_settings(settings, data_dir=data, jwt_secret=None, allowed_roots=(base,), embeddings_model=None, revalidate_interval_s=0.0)
    async with running_app(app_settings) as client:
        secret = (data / "jwt-secret").read_text().strip()
        user = auth("mallory", secret=secret)
        for root in (data, base, data / "index", other_data):
            status, body = await _register(client, root, user)
            assert status == 400 and body["error"]["code"] == "path_outside_workspace", (root, body)
            assert secret not in json.dumps(body)

        status, registered = await _register(client, repo, user)
        assert status == 201, registered
        await _ready(client, registered["id"], user)
        # A root registered before the checks (its entry already saved): the walk still prunes the data.
        engine = client.app[ENGINE]
        legacy, _ = await workspaces_of(engine).register("user:mallory", base.resolve(), SearchConfig())
        for workspace, app_path in ((registered["id"], "app.py"), (legacy.id, "repo/app.py")):
            for query, extra in ((secret, {}), (re.escape(secret[:24]), {"regex": True}), ("othersecretvalueqq", {})):
                found = await _lexical(client, workspace, user, query, **extra)
                # The generated secret is random: a piece of it may be a word of app.py ("ok"), which
                # ranked search may then find there. Nothing else is ever a result.
                assert {r["path"] for r in found["results"]} <= {app_path}, (workspace, found)
                assert secret not in found["output"] and "othersecretvalueqq" not in found["output"], (workspace, found)
        state = await (await client.get(f"/v1/workspaces/{legacy.id}", headers=user)).json()
        assert state["files"] == 1, "the legacy root lists repo/app.py alone: nothing of either data directory"


# ---- roots belong to someone ---------------------------------------------------------------------------


async def test_multi_tenant_roots_lie_under_their_owners_bases_and_a_second_tenant_is_refused(settings: Settings, tmp_path: Path) -> None:
    ws, orgs, teams, shared = (tmp_path / name for name in ("ws", "orgs", "teams", "shared"))
    for directory in (ws, orgs, teams, shared):
        directory.mkdir()
    alice_repo = _repo(ws / "alice" / "repo")
    (alice_repo / "src").mkdir()
    org_repo = _repo(orgs / "acme" / "repo")
    team_repo = _repo(teams / "acme" / "eng" / "repo")
    other_team_repo = _repo(teams / "bobco" / "eng" / "repo")
    shared_repo = _repo(shared / "repo")
    (shared_repo / "sub").mkdir()
    app_settings = with_settings(
        settings,
        allowed_roots=(ws / "{user}", orgs / "{org}", teams / "{org}" / "{team}", shared),
        single_tenant=False,
        embeddings_model=None,
    )
    alice, carol, bob = ALICE, CAROL, BOB_ENG  # acme's eng, acme in no team, bobco's eng
    sneaky = auth("../alice", org="acme")
    first_admin, second_admin = auth("root1", admin=True), auth("root2", admin=True)
    async with running_app(app_settings) as client:

        async def expect(root: Path, headers: dict[str, str], status: int, code: str | None = None) -> dict[str, Any]:
            got, body = await _register(client, root, headers)
            assert got == status and (code is None or body["error"]["code"] == code), (root, got, body)
            return body

        own = await expect(alice_repo, alice, 201)
        # Another user: the same answer for alice's existing tree, a path in it, and nothing at all.
        refusals = [await expect(path, bob, 400, "path_outside_workspace") for path in (alice_repo, alice_repo / "src", ws / "alice" / "no-such-dir")]
        messages = {body["error"]["message"].replace(str(path), "<root>") for body, path in zip(refusals, (alice_repo, alice_repo / "src", ws / "alice" / "no-such-dir"), strict=True)}
        assert len(messages) == 1, messages
        await expect(alice_repo, sneaky, 400, "path_outside_workspace")  # a sub with '/' and '..' stays one segment
        # A plain base is for admins in a multi-tenant deployment; a second admin cannot take a root of the first.
        await expect(shared_repo, alice, 400, "path_outside_workspace")
        await expect(shared_repo, first_admin, 201)
        for path in (shared_repo, shared_repo / "sub", shared):
            await expect(path, second_admin, 403, "forbidden")
        # An org base is its members': each registers its own workspace of the same tree.
        await expect(org_repo, alice, 201)
        await expect(org_repo, carol, 201)
        await expect(org_repo, bob, 400, "path_outside_workspace")
        # A team base is the team's within its org: bobco's eng is not acme's.
        await expect(team_repo, alice, 201)
        await expect(team_repo, bob, 400, "path_outside_workspace")
        await expect(other_team_repo, bob, 201)
        listed = await (await client.get("/v1/workspaces", headers=bob)).json()
        assert [w["root"] for w in listed["workspaces"]] == [str(other_team_repo.resolve())]
        found = await _lexical(client, own["id"], alice, "handler")
        assert [r["path"] for r in found["results"]] == ["app.py"]


# ---- index directories and the registration quota --------------------------------------------------------


async def test_index_dirs_stay_in_the_service_directories_and_registrations_have_a_quota(settings: Settings, tmp_path: Path) -> None:
    base = settings.allowed_roots[0]
    repos = [_repo(base / f"repo{i}") for i in range(3)]
    caches = tmp_path / "caches"
    app_settings = with_settings(settings, embeddings_model=None, index_dir=caches, max_workspaces_per_user=2, workspace_registrations_per_minute=3)
    user = auth("quinn")
    async with running_app(app_settings) as client:
        status, body = await _register(client, repos[0], auth("ivy"), index_dir=str(repos[1]))  # someone's checkout
        assert status == 400 and str(settings.data_dir) in body["error"]["message"] and str(caches) in body["error"]["message"], body
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        (settings.data_dir / "a-file").write_text("x")
        status, body = await _register(client, repos[0], auth("ivy"), index_dir=str(settings.data_dir / "a-file"))
        assert status == 400 and "not a directory" in body["error"]["message"], body
        status, body = await _register(client, repos[0], auth("ivy"), index_dir=str(caches / "ivy"))
        assert status == 201, body
        assert not [p for p in repos[1].rglob("*") if p.name != "app.py"], "nothing written into the other tree"

        status, first = await _register(client, repos[0], user)
        assert status == 201
        assert (await _register(client, repos[1], user))[0] == 201
        status, body = await _register(client, repos[2], user)
        assert status == 409 and "max_workspaces_per_user" in body["error"]["message"], body

        await _ready(client, first["id"], user)
        engine = client.app[ENGINE]
        workspace = workspaces_of(engine).registry.get(first["id"])
        assert workspace is not None
        runtime = await workspaces_of(engine).runtime(workspace)
        synced_at = runtime.last_sync_at
        assert synced_at is not None
        for _ in range(10):  # unchanged: no re-index, not counted
            status, body = await _register(client, repos[0], user)
            assert status == 200 and body["created"] is False
        assert runtime.last_sync_at == synced_at, "an unchanged re-registration re-indexes nothing"
        assert (await _register(client, repos[0], user, skip_dirs=["docs"]))[0] == 200  # the third counted one
        response = await client.post("/v1/workspaces", json={"root": str(repos[0]), "search": {"skip_dirs": ["build"]}}, headers=user)
        assert response.status == 429, await response.text()
        assert 1 <= int(response.headers["Retry-After"]) <= 60
        assert (await _register(client, repos[0], auth("other")))[0] == 201, "the quota is per caller"


async def test_front_ends_of_one_deployment_share_the_registration_quota_and_another_deployment_does_not(
    settings: Settings, tmp_path: Path
) -> None:
    """Three registrations a minute: two front ends on one Redis and one prefix answer three between
    them and refuse the fourth on either; a second deployment on the same Redis keeps its own count."""
    base = settings.allowed_roots[0]
    repos = [_repo(base / f"shared{i}") for i in range(5)]
    app_settings = with_settings(settings, embeddings_model=None, workspace_registrations_per_minute=3)
    other_prefix = f"{settings.queue_prefix}-other"
    user = auth("rhea")
    try:
        async with (
            running_app(app_settings) as first,
            running_app(app_settings, data_dir=tmp_path / "second-front-end", worker_in_process=False) as second,
            running_app(app_settings, data_dir=tmp_path / "other-deployment", queue_prefix=other_prefix, worker_in_process=False) as other,
        ):
            for client, repo in ((first, repos[0]), (second, repos[1]), (first, repos[2])):
                status, body = await _register(client, repo, user)
                assert status == 201, body
            for client in (second, first):
                response = await client.post("/v1/workspaces", json={"root": str(repos[3])}, headers=user)
                assert response.status == 429, await response.text()
                error = (await response.json())["error"]
                retry_after = int(response.headers["Retry-After"])
                assert 1 <= retry_after <= 60 and error["code"] == "rate_limited", error
                assert error["details"]["rateLimit"] == {"limit": 3, "window_s": 60, "retryAfterSeconds": retry_after}, error
                assert error["message"].startswith("3 workspace registrations in the last minute"), error
                assert "(workspace_registrations_per_minute)" in error["message"] and f"retry in {retry_after}s" in error["message"]
            redis = aioredis.from_url(REDIS_URL)
            try:
                assert await redis.exists(f"{settings.queue_prefix}:ratelimit:registration:rhea:minute") == 1
                assert await redis.exists(f"{other_prefix}:ratelimit:registration:rhea:minute") == 0
            finally:
                await redis.aclose()
            for repo in repos[3:]:
                status, body = await _register(other, repo, user)
                assert status == 201, body
            assert (await _register(other, repos[0], user))[0] == 201, "the other deployment's third"
            assert (await _register(other, repos[1], user))[0] == 429
    finally:
        redis = aioredis.from_url(REDIS_URL)
        try:
            await forget_deployment(redis, other_prefix)
        finally:
            await redis.aclose()


# ---- a workspace whose root or cache is gone ----------------------------------------------------------------


async def test_a_workspace_whose_root_is_gone_answers_409_shows_missing_and_can_be_deleted(settings: Settings) -> None:
    base = settings.allowed_roots[0]
    root = _repo(base / "vanishing")
    loop = base / "loop"
    os.symlink(loop, loop)
    app_settings = with_settings(settings, embeddings_model=None)  # revalidation every 10 s: a stale index would still answer
    user = auth("gina")
    async with running_app(app_settings) as client:
        status, registered = await _register(client, root, user)
        assert status == 201
        workspace = registered["id"]
        await _ready(client, workspace, user)
        assert (await _lexical(client, workspace, user, "handler"))["results"]
        elsewhere = _repo(base / "elsewhere", "def handler():\n    return 'someone else'\n")

        def swap_for_a_link() -> None:
            root.unlink()
            os.symlink(elsewhere, root)

        for replace_root in (lambda: shutil.rmtree(root), lambda: root.write_text("now a file\n"), swap_for_a_link):
            replace_root()
            for body in ({"query": "handler", "mode": "lexical"}, {"query": "handler", "path": "app.py"}, {"query": "hand.*", "regex": True}):
                status, answer = await _post(client, f"/v1/workspaces/{workspace}/search", body, user)
                assert status == 409 and answer["error"]["code"] == "workspace_missing", (body, answer)
                assert "re-register" in answer["error"]["message"] or "register the new location" in answer["error"]["message"]
            state = await (await client.get(f"/v1/workspaces/{workspace}", headers=user)).json()
            assert state["state"] == "missing" and state["problem"], state
            dashboard = await (await client.get("/admin/api/index", headers=ADMIN)).json()
            assert [(w["id"], w["state"]) for w in dashboard["workspaces"]] == [(workspace, "missing")]
        mcp = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "code_search", "arguments": {"workspace": str(loop / "x"), "query": "x"}}},
            headers={**user, "Accept": "application/json, text/event-stream"},
        )
        reply = orjson.loads(await mcp.read())
        assert mcp.status == 200 and reply["jsonrpc"] == "2.0" and reply["id"] == 1, reply
        assert reply.get("error") or reply["result"]["isError"] is True, reply
        gone = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "code_search", "arguments": {"workspace": workspace, "query": "x"}}},
            headers={**user, "Accept": "application/json, text/event-stream"},
        )
        reply = orjson.loads(await gone.read())
        assert gone.status == 200 and reply["result"]["isError"] is True and "workspace_missing" in json.dumps(reply), reply
        assert (await client.delete(f"/v1/workspaces/{workspace}", headers=user)).status == 200
        assert (await client.get(f"/v1/workspaces/{workspace}", headers=user)).status == 404


async def test_a_broken_workspace_says_so_and_can_always_be_deleted(settings: Settings, tmp_path: Path) -> None:
    """A cache directory replaced by a file, and an entry saved before index directories were
    confined whose index_dir is a file (the secret's): status says ``broken``, search is a 409,
    DELETE works and removes nothing but what is the workspace's."""
    base = settings.allowed_roots[0]
    caches = tmp_path / "caches"
    app_settings = with_settings(settings, embeddings_model=None, index_dir=caches)
    user = auth("hal")
    root = _repo(base / "breaking")
    async with running_app(app_settings) as client:
        status, registered = await _register(client, root, user)
        assert status == 201
        await _ready(client, registered["id"], user)
    cache = caches / registered["id"]
    shutil.rmtree(cache)
    cache.write_text("not a directory\n")
    secret = settings.data_dir / "secret-file"
    secret.write_text("keep me\n")
    legacy_root = _repo(base / "legacy").resolve()
    legacy = Workspace(id=workspace_id("user:hal", legacy_root), tenant="user:hal", root=legacy_root, search=SearchConfig(index_dir=str(secret)), created_at=time.time())
    entry = settings.data_dir / REGISTRY_DIR / legacy.id / "workspace.json"
    entry.parent.mkdir(parents=True)
    entry.write_text(json.dumps(legacy.as_dict()))
    async with running_app(app_settings) as client:
        for workspace in (registered["id"], legacy.id):
            state = await (await client.get(f"/v1/workspaces/{workspace}", headers=user)).json()
            assert state["state"] == "broken" and "DELETE" in state["problem"], state
            status, answer = await _post(client, f"/v1/workspaces/{workspace}/search", {"query": "handler"}, user)
            assert status == 409 and answer["error"]["code"] == "workspace_broken", answer
            dashboard = await (await client.get("/admin/api/index", headers=ADMIN)).json()
            assert (workspace, "broken") in [(w["id"], w["state"]) for w in dashboard["workspaces"]], dashboard
            again = await client.post("/v1/workspaces", json={"root": str(root if workspace == registered["id"] else legacy_root)}, headers=user)
            assert again.status == 200, await again.text()  # unchanged (still broken) or new settings (rebuilt): never a 500
            assert (await client.delete(f"/v1/workspaces/{workspace}", headers=user)).status == 200
            assert (await client.get(f"/v1/workspaces/{workspace}", headers=user)).status == 404
    assert secret.read_text() == "keep me\n", "deleting the broken entry left the file its index_dir named alone"
    assert not cache.exists(), "the file in the cache's place (named by the workspace id, under index_dir) is gone"


def test_a_registry_entry_is_read_again_only_when_its_file_changes(tmp_path: Path) -> None:
    """A search's lookup reuses the entry it read while the file is unchanged; another process's
    save or delete of the entry is seen at the next lookup."""
    registry, other_process = WorkspaceRegistry(tmp_path), WorkspaceRegistry(tmp_path)
    workspace = new_workspace("user:ann", tmp_path / "root", SearchConfig())
    registry.save(workspace)
    first = registry.get(workspace.id)
    assert first == workspace
    assert registry.get(workspace.id) is first, "read once while the file is unchanged"
    warmed = replace(workspace, warm=True)
    other_process.save(warmed)
    assert registry.get(workspace.id) == warmed
    other_process.delete(workspace.id)
    assert registry.get(workspace.id) is None
    registry.save(workspace)
    assert registry.get(workspace.id) == workspace
