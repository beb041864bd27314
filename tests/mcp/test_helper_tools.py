"""The tools that answers point at, through the official SDK client: ``register_workspace`` (what
``code_search`` on an unregistered root asks for) and ``waiting_summary`` (the full list behind the
catalog's Waiting block), and the same two through ``agentsearch mcp --url``'s remote backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.mcp.backends import ToolError
from service.mcp.remote import RemoteBackend
from service.settings import Settings
from tests.callers import ALICE_PRO, BOB_PRO, token_of
from tests.catalog.fixtures import put
from tests.code.helpers import register, wait_indexed
from tests.mcp.helpers import WORKSPACE_FILES, http_mcp, text_of


def _tree(root: Path) -> Path:
    for path, text in WORKSPACE_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


async def test_code_search_on_an_unregistered_root_points_at_register_workspace_which_registers_it(client: TestClient[Any, Any], settings: Settings) -> None:
    root = _tree(settings.allowed_roots[0] / "repo")
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        missing = await mcp.call_tool("code_search", {"workspace": str(root), "query": "hash_password"})
        unknown_id = await mcp.call_tool("code_search", {"workspace": "ws_" + "0" * 20, "query": "hash_password"})
        registered = await mcp.call_tool("register_workspace", {"root": str(root), "search": {"skip_dirs": ["docs"]}})
        assert registered.is_error is False and registered.structured_content is not None
        workspace_id = registered.structured_content["id"]
        await wait_indexed(client, workspace_id, ALICE_PRO)
        found = await mcp.call_tool("code_search", {"workspace": str(root), "query": "hash_password", "mode": "lexical"})
        again = await mcp.call_tool("register_workspace", {"root": str(root), "search": {"skip_dirs": ["docs"]}})
        outside = await mcp.call_tool("register_workspace", {"root": str(_tree(settings.data_dir.parent / "elsewhere"))})
        bad = await mcp.call_tool("register_workspace", {"root": str(root), "colour": "red"})
    assert missing.is_error is True and "register it with the register_workspace tool" in text_of(missing) and "POST /v1/workspaces" not in text_of(missing)
    assert unknown_id.is_error is True and "register_workspace tool" in text_of(unknown_id) and "POST /v1/workspaces" not in text_of(unknown_id)
    assert registered.structured_content["created"] is True and registered.structured_content["search"]["skip_dirs"] == ["docs"]
    assert f'call code_search with workspace "{workspace_id}"' in text_of(registered)
    assert found.is_error is False and "auth/passwords.py:1:" in text_of(found)
    assert again.is_error is False and again.structured_content is not None
    assert again.structured_content["id"] == workspace_id and again.structured_content["created"] is False
    assert outside.is_error is True and outside.structured_content is None  # outside the caller's bases: refused, nothing registered
    assert bad.is_error is True and "unknown field 'colour'" in text_of(bad)
    listed = await client.get("/v1/workspaces", headers=ALICE_PRO)
    assert [w["id"] for w in (await listed.json())["workspaces"]] == [workspace_id]


async def test_waiting_summary_lists_the_callers_items_only(client: TestClient[Any, Any]) -> None:
    await put(client, [{"type": "secret", "id": "oldToken", "expiresAt": "2020-01-31"}], caller=ALICE_PRO)
    await put(client, [{"type": "secret", "id": "bobToken", "expiresAt": "2020-01-31"}], caller=BOB_PRO)
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        alice = await mcp.call_tool("waiting_summary", {})
        bad = await mcp.call_tool("waiting_summary", {"limit": 3})
    async with http_mcp(client, token_of(BOB_PRO)) as mcp:
        bob = await mcp.call_tool("waiting_summary", {})
    assert alice.is_error is False and alice.structured_content is not None
    assert [item["id"] for item in alice.structured_content["items"]] == ["secret-expired:oldToken"]
    assert "**Secret oldToken expired** (block, secret-expired)" in text_of(alice) and "bobToken" not in text_of(alice)
    assert bob.structured_content is not None and [item["id"] for item in bob.structured_content["items"]] == ["secret-expired:bobToken"]
    assert bad.is_error is True and "unknown field 'limit'" in text_of(bad)


async def test_the_remote_backend_registers_and_lists_through_the_http_api(client: TestClient[Any, Any], settings: Settings) -> None:
    root = _tree(settings.allowed_roots[0] / "remote-repo")
    await put(client, [{"type": "secret", "id": "oldToken", "expiresAt": "2020-01-31"}], caller=ALICE_PRO)
    async with RemoteBackend.connect(str(client.make_url("")), token_of(ALICE_PRO)) as remote:
        registered = await remote.register_workspace({"root": str(root)})
        waiting = await remote.waiting_summary()
        with pytest.raises(ToolError) as unknown_id:
            await remote.code_search("ws_" + "0" * 20, {"query": "x"})
        with pytest.raises(ToolError) as unregistered:
            await remote.code_search(str(settings.allowed_roots[0] / "nope"), {"query": "x"})
    same = await register(client, root, ALICE_PRO)
    assert registered["created"] is True and same["id"] == registered["id"] and same["created"] is False
    assert [item["id"] for item in waiting["structuredContent"]["items"]] == ["secret-expired:oldToken"]
    for error in (unknown_id.value, unregistered.value):
        assert error.code == "not_found" and "register_workspace tool" in error.message and "POST /v1/workspaces" not in error.message
