"""The Streamable HTTP transport and JSON-RPC on the wire: version negotiation, sessions, notifications,
batches, protocol errors with their codes and statuses, the deadline. Never a 5xx."""

from __future__ import annotations

import time
from typing import Any

from aiohttp.test_utils import TestClient

from service.catalog.state import catalog_state
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ADMIN, ALICE_PRO, BOB_PRO
from tests.catalog.fixtures import put
from tests.catalog.test_answers import REPORTS, RerankServer
from tests.helpers import running_app, with_settings
from tests.mcp.helpers import seed_actions

HEADERS = {**ALICE_PRO, "Accept": "application/json, text/event-stream"}


def rpc(method: str, params: dict[str, Any] | None = None, request_id: int | str | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not None:
        message["id"] = request_id
    return message


async def post(client: TestClient[Any, Any], body: Any, headers: dict[str, str] | None = None, *, raw: bytes | None = None) -> tuple[int, Any, Any]:
    response = await client.post("/mcp", json=None if raw is not None else body, data=raw, headers={**HEADERS, **(headers or {})})
    text = await response.text()
    assert response.status < 500, text
    payload = await response.json() if text else None
    return response.status, payload, response.headers


async def initialize(client: TestClient[Any, Any], version: str = "2025-06-18") -> tuple[str, dict[str, Any]]:
    status, body, headers = await post(client, rpc("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
    assert status == 200, body
    return headers["Mcp-Session-Id"], body["result"]


async def test_initialize_negotiates_the_version_and_issues_a_session(client: TestClient[Any, Any]) -> None:
    session, result = await initialize(client, "2025-06-18")
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "agentsearch" and "code_search" in result["instructions"]
    assert all(0x21 <= ord(ch) <= 0x7E for ch in session)
    _, newest = await initialize(client, "2099-01-01")
    assert newest["protocolVersion"] == "2025-11-25"  # unknown: our newest, the client decides
    status, body, _ = await post(client, rpc("notifications/initialized", request_id=None), {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
    assert status == 202 and body is None
    status, body, _ = await post(client, rpc("ping", request_id="p-1"), {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
    assert (status, body) == (200, {"jsonrpc": "2.0", "id": "p-1", "result": {}})
    status, body, _ = await post(client, rpc("initialize", {"capabilities": {}}))
    assert status == 200 and body["error"]["code"] == -32602 and "protocolVersion" in body["error"]["message"]


async def test_versions_before_2025_06_18_get_text_without_structured_content(client: TestClient[Any, Any]) -> None:
    await seed_actions(client)
    session, result = await initialize(client, "2025-03-26")
    assert result["protocolVersion"] == "2025-03-26"
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-03-26"}
    _, listed, _ = await post(client, rpc("tools/list"), headers)
    assert all("outputSchema" not in tool for tool in listed["result"]["tools"])
    _, called, _ = await post(client, rpc("tools/call", {"name": "action_search", "arguments": {"query": "send an email"}}), headers)
    assert "structuredContent" not in called["result"] and called["result"]["isError"] is False
    assert "service gmail_work · action send_email" in called["result"]["content"][0]["text"]
    # Without a session or a version header, the transport's rule: 2025-03-26.
    _, stateless, _ = await post(client, rpc("tools/list"))
    assert all("outputSchema" not in tool for tool in stateless["result"]["tools"])
    _, stated, _ = await post(client, rpc("tools/list"), {"MCP-Protocol-Version": "2025-11-25"})
    assert all("outputSchema" in tool for tool in stated["result"]["tools"])


async def test_sessions_are_bound_to_their_user_and_end_with_delete(client: TestClient[Any, Any]) -> None:
    session, _ = await initialize(client)
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    status, body, _ = await post(client, rpc("ping"), {**headers, **BOB_PRO})
    assert status == 404 and "initialize" in body["error"]["message"]  # bob cannot ride alice's session
    status, body, _ = await post(client, rpc("ping"), {"Mcp-Session-Id": session[:-1] + ("A" if session[-1] != "A" else "B")})
    assert status == 404, body
    status, body, _ = await post(client, rpc("ping"), {**headers, "MCP-Protocol-Version": "2025-11-25"})
    assert status == 400 and "negotiated 2025-06-18" in body["error"]["message"]
    response = await client.delete("/mcp", headers={**HEADERS, **headers})
    assert response.status == 204
    status, body, _ = await post(client, rpc("ping"), headers)
    assert status == 404 and body["error"]["code"] == -32600
    response = await client.delete("/mcp", headers=HEADERS)
    assert response.status == 400 and "Mcp-Session-Id" in (await response.json())["error"]["message"]
    response = await client.get("/mcp", headers=HEADERS)
    assert response.status == 405 and set(response.headers["Allow"].replace(" ", "").split(",")) >= {"POST", "DELETE"}


async def test_protocol_errors_are_json_rpc_errors_with_the_right_codes(client: TestClient[Any, Any]) -> None:
    status, body, _ = await post(client, None, raw=b"{not json")
    assert status == 400 and body["error"]["code"] == -32700 and body["id"] is None
    status, body, _ = await post(client, None, raw=b"")
    assert status == 400 and body["error"]["code"] == -32700
    status, body, _ = await post(client, {"jsonrpc": "1.0", "id": 7, "method": "ping"})
    assert status == 400 and body["error"]["code"] == -32600 and body["id"] == 7
    status, body, _ = await post(client, {"jsonrpc": "2.0", "id": 8})
    assert status == 400 and body["error"]["code"] == -32600 and "method" in body["error"]["message"]
    status, body, _ = await post(client, rpc("tools/list", request_id=None) | {"params": [1, 2]})
    assert status == 400 and body["error"]["code"] == -32602
    status, body, _ = await post(client, rpc("resources/list", request_id=3))
    assert status == 200 and body["error"]["code"] == -32601 and body["id"] == 3
    status, body, _ = await post(client, rpc("server/discover", {}, request_id=4))
    assert status == 200 and body["error"]["code"] == -32601  # how a 2026 client learns to fall back to initialize
    status, body, _ = await post(client, rpc("tools/call", {"name": "nope"}))
    assert body["error"]["code"] == -32602 and "unknown tool 'nope'" in body["error"]["message"]
    status, body, _ = await post(client, rpc("tools/call", {"name": "search", "arguments": "query=email"}))
    assert body["error"]["code"] == -32602 and "arguments must be an object" in body["error"]["message"]
    status, body, _ = await post(client, rpc("tools/call", {"arguments": {}}))
    assert body["error"]["code"] == -32602 and "params.name" in body["error"]["message"]
    status, body, _ = await post(client, rpc("ping"), {"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400 and "2025-06-18" in body["error"]["message"]
    status, body, _ = await post(client, rpc("ping"), {"Accept": "text/html"})
    assert status == 406 and body["error"]["code"] == -32600
    status, body, _ = await post(client, None, raw=b'"just a string"')
    assert status == 400 and body["error"]["code"] == -32600
    status, body, _ = await post(client, {"jsonrpc": "2.0", "id": 2, "result": {}})
    assert status == 202 and body is None  # a response to a request of ours: nothing to answer


async def test_batches_answer_each_request_and_skip_notifications(client: TestClient[Any, Any]) -> None:
    batch = [rpc("ping", request_id=1), rpc("notifications/initialized", request_id=None), {"jsonrpc": "2.0", "id": 2}, rpc("tools/list", request_id=3), rpc("initialize", {"protocolVersion": "2025-03-26"}, request_id=4)]
    status, body, _ = await post(client, batch)
    assert status == 200
    by_id = {reply["id"]: reply for reply in body}
    assert set(by_id) == {1, 2, 3, 4}
    assert by_id[1]["result"] == {} and by_id[2]["error"]["code"] == -32600
    assert len(by_id[3]["result"]["tools"]) == 5 and "on its own" in by_id[4]["error"]["message"]
    status, body, _ = await post(client, [rpc("notifications/initialized", request_id=None)])
    assert status == 202 and body is None
    status, body, _ = await post(client, [])
    assert status == 400 and body["error"]["code"] == -32600


async def test_a_search_past_the_deadline_answers_the_did_not_finish_tool_error(settings: Settings, rerank_server: RerankServer) -> None:
    """A real rerank endpoint that never answers keeps the search past a 1.5 s request deadline."""
    rerank_server.mode = "slow"
    changed = with_settings(settings, embeddings_model=None, rerank_enabled=True, rerank_url=rerank_server.url, rerank_budget_s=30.0, request_deadline_s=1.5)
    async with running_app(changed) as slow:
        try:
            await put(slow, REPORTS, caller=ADMIN)
            started = time.perf_counter()
            status, body, _ = await post(slow, rpc("tools/call", {"name": "search", "arguments": {"query": "quarterly report"}}), {"MCP-Protocol-Version": "2025-06-18"})
            assert time.perf_counter() - started < 3.0
        finally:
            scorer = catalog_state(slow.server.app[ENGINE]).scorer
            if scorer is not None:
                await scorer.aclose()  # type: ignore[attr-defined]
    assert status == 200, body
    result = body["result"]
    assert result["isError"] is True and result["content"][0]["text"].startswith("Search did not finish within 1.5s")
    assert result["structuredContent"]["error"]["code"] == "deadline_exceeded"
    assert rerank_server.calls >= 1


async def test_the_services_own_refusals_keep_their_status_with_a_json_rpc_body(settings: Settings) -> None:
    """A 2 KiB body limit and a 1 ms request deadline, both real settings of the app."""
    async with running_app(settings, embeddings_model=None, client_max_size=2048, request_deadline_s=0.001) as strict:
        status, body, _ = await post(strict, rpc("tools/call", {"name": "search", "arguments": {"query": "x" * 4000}}))
        assert status == 413 and body["error"]["code"] == -32600 and "too large" in body["error"]["message"]
        response = await strict.post("/mcp", json=rpc("tools/call", {"name": "search", "arguments": {"query": "send an email to Kent"}}), headers=HEADERS)
        body = await response.json()
        assert response.status == 504 and body["error"]["code"] == -32001 and body["error"]["data"] == {"code": "deadline_exceeded"}
        assert "retry once" in body["error"]["message"]
