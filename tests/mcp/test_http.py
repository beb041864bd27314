"""The official MCP SDK client against ``/mcp`` on the running app (Streamable HTTP): the tools, their
answers on ingested data, bad arguments, a missing token, tenants kept apart, rate limits."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient
from mcp import MCPError

from service.ratelimit import Surface
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ALICE_PRO, BOB_PRO, auth, caller_of, token_of
from tests.mcp.helpers import (
    connect_error,
    http_mcp,
    seed_actions,
    seed_catalog,
    seed_workspace,
    text_of,
)


async def test_lists_the_tools_with_schemas_for_inputs_and_outputs(client: TestClient[Any, Any]) -> None:
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        assert mcp.server_info is not None and mcp.server_info.name == "agentsearch"
        assert mcp.protocol_version == "2025-11-25"
        assert mcp.server_capabilities.tools is not None
        listed = (await mcp.list_tools()).tools
    by_name = {tool.name: tool for tool in listed}
    assert set(by_name) == {"search", "code_search", "action_search", "waiting_summary", "register_workspace"}
    for tool in listed:
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.annotations is not None and tool.annotations.read_only_hint is (tool.name != "register_workspace")
    # Descriptions tell a model which tool to pick and what to call next.
    assert "code_search" in by_name["search"].description and "action_search" in by_name["search"].description
    assert "entity" in by_name["search"].description
    assert "never the `template` key" in by_name["action_search"].description
    assert by_name["code_search"].input_schema["required"] == ["workspace", "query"]
    jsonschema.validate({"workspace": "/srv/repo", "query": "hash", "path": None, "glob": "*.py"}, by_name["code_search"].input_schema)
    jsonschema.validate({"query": "", "exclude": ["stripe_test"], "limit": 100}, by_name["action_search"].input_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"entity": ["a"] * 11}, by_name["search"].input_schema)
    assert by_name["search"].input_schema["additionalProperties"] is False


async def test_search_answers_with_markdown_and_structured_content_of_the_same_substance(client: TestClient[Any, Any]) -> None:
    await seed_catalog(client)
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        ranked = await mcp.call_tool("search", {"query": "send an email message"})
        detail = await mcp.call_tool("search", {"entity": "capability:emailSend"})
        index = await mcp.call_tool("search", {"query": ""})
    assert ranked.is_error is False
    doc = ranked.structured_content
    assert doc is not None and doc["kind"] == "ranked"
    top = doc["results"][0]
    assert top["entity"] == "capability:emailSend"
    markdown = text_of(ranked)
    assert "capability:emailSend" in markdown and "email" in markdown  # the ref and the domain in both channels
    assert "timing" not in doc  # timing rides beside the answer, not inside it
    assert ranked.meta is not None and ranked.meta["timing"]["durationMs"] >= 0
    assert detail.is_error is False and detail.structured_content is not None
    assert detail.structured_content["kind"] == "entity" and detail.structured_content["results"][0]["ok"] is True
    assert "kody.emailSend" in text_of(detail)
    assert index.structured_content is not None and index.structured_content["kind"] == "domain-index"
    assert {row["domain"] for row in index.structured_content["results"]} >= {"email", "jobs", "packages"}


async def test_code_search_answers_text_first_lines_and_structured_results(client: TestClient[Any, Any], settings: Settings) -> None:
    workspace_id, root = await seed_workspace(client, settings.allowed_roots[0])
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        by_id = await mcp.call_tool("code_search", {"workspace": workspace_id, "query": "hash_password", "mode": "lexical"})
        by_root = await mcp.call_tool("code_search", {"workspace": str(root), "query": r"def \w+_total", "regex": True})
    assert by_id.is_error is False and by_id.structured_content is not None
    lines = text_of(by_id).splitlines()
    assert lines[0].startswith("auth/passwords.py:1:def hash_password")
    assert by_id.structured_content["results"][0]["path"] == "auth/passwords.py"
    assert by_id.structured_content["output"] == text_of(by_id)
    assert by_id.structured_content["meta"]["mode"] == "lexical"
    assert by_root.is_error is False and by_root.structured_content is not None
    assert text_of(by_root).startswith("billing/invoice.py:1:def compute_invoice_total")


async def test_action_search_answers_its_rows_and_says_them_in_text(client: TestClient[Any, Any]) -> None:
    await seed_actions(client)
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        ranked = await mcp.call_tool("action_search", {"query": "send an email"})
        browse = await mcp.call_tool("action_search", {"query": "", "include_catalog": True})
    assert ranked.is_error is False and ranked.structured_content is not None
    top = ranked.structured_content["results"][0]
    assert (top["service"], top["template"], top["action"], top["risk"]) == ("gmail_work", "gmail", "send_email", "write")
    assert top["account_email"] == "alice@example.com" and top["auth"] == {"type": "oauth", "provider": "google", "connected": True}
    text = text_of(ranked)
    first = text.splitlines()[1]
    for fact in ("service gmail_work", "action send_email", "risk write", "template gmail (Google Gmail)", "tier user", "account alice@example.com"):
        assert fact in first, (fact, first)
    assert "never the template key" in text
    rows = browse.structured_content["results"] if browse.structured_content else []
    assert {row.get("service") for row in rows if not row["setup_required"]} == {"gmail_work", "stripe_live"}
    assert {row["template"] for row in rows if row["setup_required"]} == {"github"}
    assert "template github (GitHub)" in text_of(browse) and "(setup required)" in text_of(browse)


async def test_bad_arguments_are_tool_errors_that_say_what_to_fix(client: TestClient[Any, Any], settings: Settings) -> None:
    workspace_id, _ = await seed_workspace(client, settings.allowed_roots[0])
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        limit = await mcp.call_tool("search", {"query": "email", "limit": 0})
        both = await mcp.call_tool("search", {"query": "email", "entity": "capability:emailSend"})
        unknown_field = await mcp.call_tool("action_search", {"query": "x", "colour": "red"})
        no_workspace = await mcp.call_tool("code_search", {"query": "hash"})
        bad_regex = await mcp.call_tool("code_search", {"workspace": workspace_id, "query": "(unclosed", "regex": True})
        escape = await mcp.call_tool("code_search", {"workspace": workspace_id, "query": "x", "path": "../.."})
        relative = await mcp.call_tool("code_search", {"workspace": "repo", "query": "x"})
        with pytest.raises(MCPError) as unknown_tool:
            await mcp.call_tool("grep", {"query": "x"})
    assert limit.is_error is True and "limit must be between 1 and 50, got 0" in text_of(limit)
    assert limit.structured_content == {"kind": "error", "error": {"code": "validation_error", "message": "limit must be between 1 and 50, got 0"}}
    assert both.is_error is True and "entity cannot be combined with query" in text_of(both)
    assert unknown_field.is_error is True and "unknown field 'colour'" in text_of(unknown_field) and "allowed:" in text_of(unknown_field)
    assert no_workspace.is_error is True and "workspace is required" in text_of(no_workspace)
    assert bad_regex.is_error is True and text_of(bad_regex).startswith("invalid_regex:")
    assert escape.is_error is True and text_of(escape).startswith("path_outside_workspace:")
    assert relative.is_error is True and "neither a workspace id" in text_of(relative)
    assert unknown_tool.value.error.code == -32602 and "search, code_search, action_search, waiting_summary and register_workspace" in unknown_tool.value.error.message


async def test_a_missing_or_bad_token_is_refused_with_a_readable_error(client: TestClient[Any, Any]) -> None:
    missing = await connect_error(client, None)
    assert "missing Authorization header" in missing.error.message and missing.error.data == {"code": "unauthorized"}
    bad = await connect_error(client, "not-a-jwt")
    assert bad.error.message.startswith("malformed token")
    response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    body = await response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32010 and body["id"] is None


async def test_two_tenants_are_kept_apart(client: TestClient[Any, Any], settings: Settings) -> None:
    await seed_catalog(client)
    await seed_actions(client)
    alice_ws, alice_root = await seed_workspace(client, settings.allowed_roots[0], ALICE_PRO, "alice-repo")
    async with http_mcp(client, token_of(BOB_PRO)) as mcp:
        packages = await mcp.call_tool("search", {"query": "control lights and shades home"})
        own = await mcp.call_tool("search", {"query": "rooftop weather station"})
        alice_package = await mcp.call_tool("search", {"entity": "package:home-controls"})
        by_id = await mcp.call_tool("code_search", {"workspace": alice_ws, "query": "hash_password"})
        by_root = await mcp.call_tool("code_search", {"workspace": str(alice_root), "query": "hash_password"})
        actions = await mcp.call_tool("action_search", {"query": "send an email"})
    refs = [hit.get("entity") for hit in (packages.structured_content or {}).get("results", [])]
    assert "package:home-controls" not in refs and "home-controls" not in text_of(packages)
    assert "package:bob-weather" in [hit.get("entity") for hit in (own.structured_content or {})["results"]]
    assert alice_package.is_error is True and "home-controls" in text_of(alice_package)  # as unknown as a package that never existed
    assert by_id.is_error is True and text_of(by_id).startswith("not_found:")
    assert by_root.is_error is True and text_of(by_root).startswith("not_found:")
    assert alice_ws not in text_of(by_root)
    assert "gmail_work" not in text_of(actions) and "stripe_live" not in text_of(actions)
    assert all(row.get("service") != "gmail_work" for row in (actions.structured_content or {})["results"])


async def test_tool_calls_count_in_the_bucket_of_their_http_surface(client: TestClient[Any, Any]) -> None:
    """79 catalog searches over HTTP and one over MCP fill carol's catalog bucket (free: 80 a minute):
    the next MCP ``search`` and the next HTTP search are refused, while ``action_search`` (its own
    bucket) still answers until that bucket is full too."""
    await seed_actions(client)
    carol = auth("carol", plan="free")
    for _ in range(79):
        assert (await client.post("/v1/catalog/search", json={"query": ""}, headers=carol)).status == 200
    async with http_mcp(client, token_of(carol)) as mcp:
        last = await mcp.call_tool("search", {"query": ""})
        catalog = await mcp.call_tool("search", {"query": "send an email"})
        actions = await mcp.call_tool("action_search", {"query": "send an email"})
        assert last.is_error is False and actions.is_error is False
        refused = await client.post("/v1/catalog/search", json={"query": ""}, headers=carol)
        assert refused.status == 429
        limiter = client.server.app[ENGINE].rate_limiter
        for _ in range(79):  # the action bucket: one MCP call above, 79 more
            assert await limiter.check(caller_of(carol), Surface.ACTIONS) is None
        actions_full = await mcp.call_tool("action_search", {"query": "send an email"})
    assert catalog.is_error is True and catalog.structured_content is not None
    limit = catalog.structured_content["rateLimit"]
    assert limit["code"] == "rate_limited" and limit["limit"] == 80 and limit["window"] == "minute" and limit["surface"] == "catalog"
    assert "retry" in text_of(catalog).lower()
    assert actions_full.is_error is True and text_of(actions_full).startswith("rate_limited: free plan allows 80 action searches per minute")


async def test_structured_content_matches_the_output_schemas(client: TestClient[Any, Any], settings: Settings) -> None:
    """The SDK validates each result against its tool's outputSchema; this checks the same by hand."""
    await seed_catalog(client)
    await seed_actions(client)
    workspace_id, _ = await seed_workspace(client, settings.allowed_roots[0])
    async with http_mcp(client, token_of(ALICE_PRO), mode="auto") as mcp:
        schemas = {tool.name: tool.output_schema for tool in (await mcp.list_tools()).tools}
        calls = {
            "search": [{"query": "schedule a background job"}, {"domain": "email"}, {"entity": ["guide:package_subscriptions#repo.pushed", "package:home-controls"]}],
            "code_search": [{"workspace": workspace_id, "query": "where is the invoice total computed"}],
            "action_search": [{"query": "list repositories", "include_catalog": True}, {"query": ""}],
        }
        for name, argument_sets in calls.items():
            for arguments in argument_sets:
                result = await mcp.call_tool(name, arguments)
                assert result.is_error is False, text_of(result)
                jsonschema.validate(result.structured_content, schemas[name])


async def test_tools_answer_what_the_v1_routes_answer(client: TestClient[Any, Any], settings: Settings) -> None:
    """One search function behind each route and tool: the same results for the same input."""
    await seed_catalog(client)
    await seed_actions(client)
    workspace_id, _ = await seed_workspace(client, settings.allowed_roots[0])
    headers = ALICE_PRO
    async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
        catalog = await mcp.call_tool("search", {"domain": "email"})
        code = await mcp.call_tool("code_search", {"workspace": workspace_id, "query": "invoice", "mode": "lexical"})
        actions = await mcp.call_tool("action_search", {"query": "list repositories", "include_catalog": True})
    v1_catalog = await (await client.post("/v1/catalog/search", json={"domain": "email"}, headers=headers)).json()
    v1_code = await (await client.post(f"/v1/workspaces/{workspace_id}/search", json={"query": "invoice", "mode": "lexical"}, headers=headers)).json()
    v1_actions = await (await client.post("/v1/actions/search", json={"query": "list repositories", "include_catalog": True}, headers=headers)).json()
    assert catalog.structured_content == v1_catalog["structuredContent"] and text_of(catalog) == v1_catalog["content"]
    assert code.structured_content is not None and code.structured_content["results"] == v1_code["results"]
    assert text_of(code) == v1_code["output"]
    assert actions.structured_content is not None and actions.structured_content["results"] == v1_actions["results"]
