"""``agentsearch mcp`` over stdio, driven by the official MCP SDK's client: the embedded engine on a data
directory, and a remote service through ``--url``; the raw line protocol; a missing token."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient
from mcp import Client, StdioServerParameters

from service.settings import Settings
from tests.callers import ALICE_PRO, BOB_PRO, TEST_SECRET, token_of
from tests.helpers import REDIS_URL, running_app
from tests.mcp.helpers import WORKSPACE_FILES, seed_actions, seed_catalog, seed_workspace, text_of

ROOT = Path(__file__).resolve().parents[2]


def server_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The process's settings, from the environment as a host would give them."""
    return {
        "AGENTSEARCH_DATA_DIR": str(settings.data_dir),
        "REDIS_URL": REDIS_URL,
        "AGENTSEARCH_QUEUE_PREFIX": settings.queue_prefix,
        "AGENTSEARCH_JWT_SECRET": TEST_SECRET,
        "AGENTSEARCH_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **extra,
    }


def stdio_server(settings: Settings, *args: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "service", "mcp", *args], env=server_env(settings, **env), cwd=ROOT)


def refs(result: Any) -> list[str]:
    return [str(hit.get("entity")) for hit in (result.structured_content or {}).get("results", [])]


async def test_embedded_stdio_server_searches_the_data_directory(settings: Settings, tmp_path: Path) -> None:
    async with running_app(settings) as app:
        await seed_catalog(app)
        await seed_actions(app)
    # The app has closed: the stdio process can own the data directory now.
    root = tmp_path / "local-checkout"
    for path, text in WORKSPACE_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    params = stdio_server(settings, "--data-dir", str(settings.data_dir), AGENTSEARCH_TOKEN=token_of(ALICE_PRO))
    async with Client(params, read_timeout_seconds=120) as mcp:  # mode auto: discover, then initialize
        assert mcp.server_info is not None and mcp.server_info.name == "agentsearch"
        assert {tool.name for tool in (await mcp.list_tools()).tools} == {"search", "code_search", "action_search", "waiting_summary", "register_workspace"}
        packages = await mcp.call_tool("search", {"query": "control lights and shades in the house"})
        code = await mcp.call_tool("code_search", {"workspace": str(root), "query": "hash_password", "mode": "lexical"})
        actions = await mcp.call_tool("action_search", {"query": "send an email"})
        bad = await mcp.call_tool("action_search", {"query": "x", "limit": 0})
    assert packages.is_error is False and "package:home-controls" in refs(packages)
    assert code.is_error is False and text_of(code).splitlines()[0].startswith("auth/passwords.py:1:def hash_password")
    assert code.structured_content is not None and code.structured_content["results"][0]["path"] == "auth/passwords.py"
    assert actions.structured_content is not None and actions.structured_content["results"][0]["service"] == "gmail_work"
    assert bad.is_error is True and "limit must be between 1 and 100" in text_of(bad)


async def test_remote_stdio_server_calls_the_service_with_its_token(client: TestClient[Any, Any], settings: Settings) -> None:
    await seed_catalog(client)
    await seed_actions(client)
    alice_ws, alice_root = await seed_workspace(client, settings.allowed_roots[0], ALICE_PRO, "alice-repo")
    bob_ws, bob_root = await seed_workspace(client, settings.allowed_roots[0], BOB_PRO, "bob-repo")
    url = str(client.make_url("")).rstrip("/")
    params = stdio_server(settings, "--url", url, AGENTSEARCH_DATA_DIR=str(settings.data_dir.parent / "remote-client"), AGENTSEARCH_TOKEN=token_of(BOB_PRO))
    async with Client(params, mode="legacy", read_timeout_seconds=120) as mcp:
        own = await mcp.call_tool("search", {"query": "rooftop weather station"})
        foreign = await mcp.call_tool("search", {"query": "control lights and shades in the house"})
        by_root = await mcp.call_tool("code_search", {"workspace": str(bob_root), "query": "compute_invoice_total", "mode": "lexical"})
        alice_by_id = await mcp.call_tool("code_search", {"workspace": alice_ws, "query": "hash_password"})
        alice_by_root = await mcp.call_tool("code_search", {"workspace": str(alice_root), "query": "hash_password"})
        actions = await mcp.call_tool("action_search", {"query": "", "include_catalog": True})
        bad = await mcp.call_tool("search", {"domain": "nosuchdomain"})
    assert "package:bob-weather" in refs(own)
    assert "package:home-controls" not in refs(foreign) and "home-controls" not in text_of(foreign)
    assert by_root.is_error is False and text_of(by_root).startswith("billing/invoice.py:1:def compute_invoice_total")
    assert bob_ws != alice_ws
    assert alice_by_id.is_error is True and text_of(alice_by_id).startswith("not_found:")
    assert alice_by_root.is_error is True and text_of(alice_by_root).startswith("not_found:")
    services = {row.get("service") for row in (actions.structured_content or {})["results"]}
    assert "bob_github" in services and "gmail_work" not in services and "stripe_live" not in services
    assert bad.is_error is True and "nosuchdomain" in text_of(bad) and "email" in text_of(bad)  # lists the valid domains


async def test_remote_mode_without_a_token_stops_with_what_to_do(settings: Settings) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "mcp", "--url", "http://127.0.0.1:9",
        cwd=ROOT, env={**server_env(settings), "PATH": "/usr/bin:/bin"},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2 and stdout == b""
    assert "--url needs a token" in stderr.decode() and "AGENTSEARCH_TOKEN" in stderr.decode()


async def test_the_line_protocol_answers_requests_and_errors_and_ends_with_stdin(client: TestClient[Any, Any], settings: Settings) -> None:
    url = str(client.make_url("")).rstrip("/")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "mcp", "--url", url, "--token", token_of(ALICE_PRO),
        cwd=ROOT, env={**server_env(settings), "PATH": "/usr/bin:/bin"},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    lines = [
        b"{not json\n",
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}}}\n',
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n',
        b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n',
        b'{"jsonrpc": "2.0", "id": 3, "method": "prompts/list"}\n',
        b'[{"jsonrpc": "2.0", "id": 4, "method": "ping"}, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search", "arguments": {"limit": "ten"}}}]\n',
    ]
    process.stdin.write(b"".join(lines))
    await process.stdin.drain()
    replies = [orjson.loads(await asyncio.wait_for(process.stdout.readline(), timeout=60)) for _ in range(5)]
    process.stdin.close()
    assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    batch = next(reply for reply in replies if isinstance(reply, list))
    parse_error, initialized, listed, missing = ({reply.get("id"): reply for reply in replies if isinstance(reply, dict)}[key] for key in (None, 1, 2, 3))
    assert parse_error["error"]["code"] == -32700 and parse_error["id"] is None
    assert initialized["id"] == 1 and initialized["result"]["protocolVersion"] == "2024-11-05"
    assert listed["id"] == 2 and all("outputSchema" not in tool for tool in listed["result"]["tools"])
    assert missing["id"] == 3 and missing["error"]["code"] == -32601
    by_id = {reply["id"]: reply for reply in batch}
    assert by_id[4]["result"] == {}
    result = by_id[5]["result"]
    assert result["isError"] is True and "limit must be an integer" in result["content"][0]["text"] and "structuredContent" not in result
