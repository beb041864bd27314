"""Edits searchable at once: an open workspace's root is watched and changed files are indexed in
the background, so a search finds an edit without walking the tree; a root that is not watched
(the setting off, the root deleted) is revalidated by mtime on search, and the status says which."""

from __future__ import annotations

import shutil
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from service.code.state import workspaces_of
from service.code.workspace import SearchConfig
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ALICE
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_indexed
from tests.helpers import running_app, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Long enough that no search of this module revalidates by mtime after the first: what a search
# finds after an edit, the watch put there.
NO_REVALIDATION_S = 3_600.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(module_settings: Settings) -> AsyncIterator[TestClient[Any, Any]]:
    settings = variant(module_settings, "watch", embeddings_model=None, workspace_watch=True, revalidate_interval_s=NO_REVALIDATION_S)
    async with running_app(settings) as app_client:
        yield app_client


async def watched(client: TestClient[Any, Any], tree: Path) -> str:
    """Register ``tree``, index it, search it once (which opens it) and wait for its watch."""
    wid: str = (await register(client, tree))["id"]
    await wait_indexed(client, wid)
    await search(client, wid, query="hash_password", mode="lexical")
    workspaces = workspaces_of(client.app[ENGINE])

    async def watching() -> bool:
        runtime = workspaces.opened(wid)
        return runtime is not None and runtime.watcher is not None and runtime.watcher.watching

    await wait_until(watching, timeout_s=10)
    return wid


async def found_paths(client: TestClient[Any, Any], wid: str, query: str) -> list[str]:
    answer = await search(client, wid, query=query, mode="lexical")
    return sorted({result["path"] for result in answer["results"]})


async def eventually(client: TestClient[Any, Any], wid: str, query: str, paths: list[str]) -> list[str]:
    """Search until the answer lists exactly ``paths`` (up to 10 s); the last answer's paths."""
    last: list[str] = []

    async def matches() -> bool:
        nonlocal last
        last = await found_paths(client, wid, query)
        return last == paths

    await wait_until(matches, timeout_s=10)
    return last


async def test_an_edit_is_found_by_the_next_searches(client: TestClient[Any, Any], tree: Path) -> None:
    wid = await watched(client, tree)
    state = await status(client, wid)
    assert state["freshness"] == "watch" and state["freshness_reason"] is None
    assert await found_paths(client, wid, "quarantineLedger") == []

    billing = tree / "src" / "pkg" / "billing.py"
    billing.write_text(billing.read_text() + "\n\ndef quarantineLedger(entry):\n    return entry\n")
    assert await eventually(client, wid, "quarantineLedger", ["src/pkg/billing.py"]) == ["src/pkg/billing.py"]
    answer = await search(client, wid, query="quarantineLedger", mode="lexical")
    assert answer["meta"]["index"]["revalidated"] is False, "the watch indexed the edit; the search walked nothing"


async def test_added_and_deleted_files_come_and_go(client: TestClient[Any, Any], tree: Path) -> None:
    wid = await watched(client, tree)
    (tree / "src" / "pkg" / "ledger.py").write_text("def reconcileHarbor(rows):\n    return rows\n")
    assert await eventually(client, wid, "reconcileHarbor", ["src/pkg/ledger.py"]) == ["src/pkg/ledger.py"]

    # A new directory with files in it: the walk of the changed directory finds them.
    fresh = tree / "services" / "intake"
    fresh.mkdir(parents=True)
    (fresh / "main.go").write_text("package intake\n\nfunc reconcileHarbor() {}\n")
    assert await eventually(client, wid, "reconcileHarbor", ["services/intake/main.go", "src/pkg/ledger.py"])

    (tree / "src" / "pkg" / "ledger.py").unlink()
    assert await eventually(client, wid, "reconcileHarbor", ["services/intake/main.go"]) == ["services/intake/main.go"]

    shutil.rmtree(tree / "services")
    assert await eventually(client, wid, "reconcileHarbor", []) == []


async def test_files_the_walk_skips_stay_out(client: TestClient[Any, Any], tree: Path) -> None:
    wid = await watched(client, tree)
    (tree / "node_modules" / "left-pad" / "extra.js").write_text("function zephyrCompass() {}\n")
    (tree / "trace.log").write_text("zephyrCompass\n")  # *.log is git-ignored
    (tree / "build" / "gen.py").write_text("def zephyrCompass(): pass\n")  # build/ is git-ignored
    (tree / "src" / "blob.bin").write_bytes(b"zephyrCompass\x00\x01")  # binary
    # A file the walk lists, written last: once it is found the batch before it was applied too.
    (tree / "docs" / "compass.md").write_text("zephyrCompass, the marker\n")
    assert await eventually(client, wid, "zephyrCompass", ["docs/compass.md"]) == ["docs/compass.md"]

    # A .gitignore edit changes which files are listed: the tree is revalidated whole.
    (tree / ".gitignore").write_text("*.log\nbuild/\ndocs/\n")
    assert await eventually(client, wid, "zephyrCompass", []) == []


async def test_the_data_directory_inside_a_root_is_never_indexed(module_settings: Settings, tree: Path) -> None:
    """The machine's owner may register a root holding the service's data directory (the walk prunes
    it): the store and cache files written there while the watch runs are never indexed."""
    settings = replace(
        variant(module_settings, "inside", embeddings_model=None, workspace_watch=True, revalidate_interval_s=NO_REVALIDATION_S),
        data_dir=tree / "var" / "agentsearch",
    )
    async with running_app(settings) as app_client:
        workspaces = workspaces_of(app_client.app[ENGINE])
        workspace, _ = await workspaces.register("user:alice", tree.resolve(), SearchConfig())
        await workspaces.revalidate(workspace, force=True)
        await search(app_client, workspace.id, query="hash_password", mode="lexical")
        (tree / "src" / "pkg" / "notes.py").write_text("def driftwoodBeacon():\n    return 1\n")
        assert await eventually(app_client, workspace.id, "driftwoodBeacon", ["src/pkg/notes.py"]) == ["src/pkg/notes.py"]
        assert (settings.data_dir / "index").is_dir(), "the store writes under the root"
        indexed = workspaces.opened(workspace.id)
        assert indexed is not None
        assert not [path for path in indexed.cache.paths() if path.startswith("var/")]
        found = await found_paths(app_client, workspace.id, "agentsearch keeps its data here; it is never indexed")
        assert not [path for path in found if path.startswith("var/")], found


async def test_a_deleted_root_switches_to_revalidation(client: TestClient[Any, Any], tree: Path) -> None:
    wid = await watched(client, tree)
    shutil.rmtree(tree)

    async def switched() -> bool:
        return (await status(client, wid))["freshness"] == "revalidate"

    await wait_until(switched, timeout_s=10)
    state = await status(client, wid)
    assert state["state"] == "missing" and state["freshness_reason"]
    await search(client, wid, query="hash_password", mode="lexical", expect=409)
    health = await client.get("/healthz")
    assert health.status == 200


async def test_deleting_the_workspace_stops_its_watch(client: TestClient[Any, Any], tree: Path) -> None:
    wid = await watched(client, tree)
    name = f"watch {tree.resolve()}"
    assert any(thread.name == name for thread in threading.enumerate())
    response = await client.delete(f"/v1/workspaces/{wid}", headers=ALICE)
    assert response.status == 200

    async def stopped() -> bool:
        return not any(thread.name == name and thread.is_alive() for thread in threading.enumerate())

    await wait_until(stopped, timeout_s=10)


async def test_with_the_setting_off_a_search_revalidates_by_mtime(module_settings: Settings, tree: Path) -> None:
    settings = variant(module_settings, "nowatch", embeddings_model=None, workspace_watch=False, revalidate_interval_s=0.0)
    async with running_app(settings) as app_client:
        wid = (await register(app_client, tree))["id"]
        await wait_indexed(app_client, wid)
        state = await status(app_client, wid)
        assert state["freshness"] == "revalidate" and "workspace_watch" in state["freshness_reason"]
        assert await found_paths(app_client, wid, "kindleLanterns") == []
        runtime = workspaces_of(app_client.app[ENGINE]).opened(wid)
        assert runtime is not None and runtime.watcher is None

        (tree / "web" / "lanterns.ts").write_text("export function kindleLanterns() {}\n")
        answer = await search(app_client, wid, query="kindleLanterns", mode="lexical")
        assert answer["meta"]["index"]["revalidated"] is True and answer["meta"]["index"]["changed_files"] == 1
        assert [r["path"] for r in answer["results"]] == ["web/lanterns.ts"]
