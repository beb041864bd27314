"""Incremental indexing with counts: an unchanged tree re-embeds nothing, a touched file re-embeds
only its changed chunks, moved chunks keep their vectors, deleted and renamed files leave the
index (store and trigram index), and revalidation happens at most every interval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.settings import Settings
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_embedded, wait_indexed
from tests.code.trees import edit, touch
from tests.helpers import running_app

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODEL = "local/all-MiniLM-L6-v2"


@pytest.fixture
def client(shared_client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    return shared_client


async def revalidated(client: TestClient[Any, Any], workspace_id: str) -> dict[str, Any]:
    """Run a search (which revalidates: the interval is 0 here) and return the last revalidation."""
    await search(client, workspace_id, query="anything", mode="lexical")
    last_sync: dict[str, Any] = (await status(client, workspace_id))["last_sync"]
    return last_sync


async def test_only_changed_chunks_are_embedded_again(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree, embeddings_model=MODEL, prewarm_embeddings=True)
    wid = workspace["id"]
    start = await wait_embedded(client, wid)

    unchanged = await revalidated(client, wid)
    assert (unchanged["files_changed"], unchanged["files_added"], unchanged["files_deleted"]) == (0, 0, 0)
    assert unchanged["to_embed"] == 0 and unchanged["files_unchanged"] == start["files"]

    touch(tree / "src" / "pkg" / "billing.py")  # mtime moves, text does not
    touched = await revalidated(client, wid)
    assert touched["files_changed"] == 1 and touched["chunks_added"] == touched["chunks_removed"] == 0
    assert touched["to_embed"] == 0 and touched["chunks_kept"] >= 2

    edit(tree / "src" / "pkg" / "billing.py", '"status": "refunded"', '"status": "refunded", "audited": True')
    edited = await revalidated(client, wid)
    assert (edited["files_changed"], edited["chunks_added"], edited["chunks_removed"], edited["to_embed"]) == (1, 1, 1, 1)
    after_edit = await wait_embedded(client, wid)
    assert after_edit["chunks"] == start["chunks"] and after_edit["embedded"] == start["chunks"]
    found = await search(client, wid, query="audited", mode="lexical")
    assert [(r["path"], r["line"]) for r in found["results"]] == [("src/pkg/billing.py", 12)]

    # Lines inserted above: the first chunk's text changes, every chunk below moves but keeps its key.
    edit(tree / "src" / "pkg" / "auth.py", '"""Authentication helpers."""', '"""Authentication helpers.\n\nPasswords and sessions.\n"""')
    shifted = await revalidated(client, wid)
    assert shifted["chunks_added"] == shifted["to_embed"] == 1 and shifted["chunks_removed"] == 1
    assert shifted["chunks_moved"] == 2, "hash_password and the SessionStore class moved down, kept their keys"
    moved = await search(client, wid, query="def hash_password", mode="lexical")
    assert moved["results"][0]["line"] == 9

    # An undo brings back a text embedded before: it is embedded again, not dropped as a duplicate job.
    edit(tree / "src" / "pkg" / "billing.py", '"status": "refunded", "audited": True', '"status": "refunded"')
    reverted = await revalidated(client, wid)
    assert reverted["to_embed"] == 1
    final = await wait_embedded(client, wid)
    assert final["embedded"] == final["chunks"] == start["chunks"]


async def test_deleted_and_renamed_files_leave_the_index(client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(client, tree)
    wid = workspace["id"]
    before = await wait_indexed(client, wid)
    found = await search(client, wid, query="parseRetryAfter", mode="lexical")
    assert found["results"][0]["path"] == "src/server.go" and found["meta"]["match_counts"]["literal_chunks"] == 1

    (tree / "src" / "server.go").unlink()
    gone = await search(client, wid, query="parseRetryAfter", mode="lexical")
    assert "src/server.go" not in {r["path"] for r in gone["results"]} and gone["meta"]["match_counts"]["literal_chunks"] == 0
    assert gone["meta"]["index"]["changed_files"] == 1
    regex_gone = await search(client, wid, query=r"func \w+Login", regex=True)
    assert regex_gone["results"] == [], "the trigram index and chunk cache forgot the file too"
    after_delete = await status(client, wid)
    assert after_delete["files"] == before["files"] - 1 and after_delete["chunks"] < before["chunks"]

    (tree / "web" / "client.ts").rename(tree / "web" / "retry_client.ts")
    renamed = await search(client, wid, query="fetchWithRetry", mode="lexical")
    assert {r["path"] for r in renamed["results"] if "fetchWithRetry" in r["snippet"]} == {"web/retry_client.ts"}
    assert "web/client.ts" not in {r["path"] for r in renamed["results"]}
    regex_renamed = await search(client, wid, query=r"export async function \w+", regex=True)
    assert [r["path"] for r in regex_renamed["results"]] == ["web/retry_client.ts"]
    assert (await status(client, wid))["files"] == after_delete["files"]


async def test_revalidation_happens_at_most_every_interval(module_settings: Settings, tree: Path) -> None:
    async with running_app(variant(module_settings, "interval", revalidate_interval_s=30.0)) as client:
        workspace = await register(client, tree)
        wid = workspace["id"]
        await wait_indexed(client, wid)
        first = await search(client, wid, query="compute_invoice_total", mode="lexical")
        assert first["results"]
        (tree / "src" / "pkg" / "extra.py").write_text("def zebra_quokka():\n    pass\n")
        second = await search(client, wid, query="zebra_quokka", mode="lexical")
        assert second["meta"]["index"]["revalidated"] is False
        assert second["results"] == [], "within the interval the cache is trusted"
