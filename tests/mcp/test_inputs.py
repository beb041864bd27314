"""The tools take what an agent sends as the HTTP routes do (the official MCP SDK client on ``/mcp``):
a whole task as the query is searched by its prefix, a limit over the maximum is clamped, each with a
notice in the text and the structured result; a domain listing pages with ``cursor``; an ``exclude``
ending in a comma is fine."""

from __future__ import annotations

from typing import Any

from service.settings import Settings
from tests.callers import ADMIN, ALICE_PRO, token_of
from tests.catalog.fixtures import put
from tests.helpers import running_app
from tests.mcp.helpers import http_mcp, seed_actions, seed_catalog, seed_workspace, text_of

TASK = "send an email message " + " ".join(f"context{i} of the ticket" for i in range(200))
BULK = [{"type": "capability", "id": f"bulk{i:02d}", "domain": "bulk", "summary": f"Bulk operation {i}.", "order": i} for i in range(70)]


def notices(result: Any) -> list[str]:
    structured = result.structured_content or {}
    return list(structured.get("notices") or [])


async def test_tools_search_a_long_query_by_its_prefix_and_clamp_the_limit(settings: Settings) -> None:
    assert len(TASK) > 2 * 2_000
    async with running_app(settings, embeddings_model=None) as client:
        await seed_catalog(client)
        await seed_actions(client)
        workspace_id, _ = await seed_workspace(client, settings.allowed_roots[0])
        async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
            catalog = await mcp.call_tool("search", {"query": TASK, "limit": 500})
            actions = await mcp.call_tool("action_search", {"query": TASK * 2, "limit": 500, "exclude": "stripe_live,"})
            code = await mcp.call_tool("code_search", {"workspace": workspace_id, "query": "hash_password " + TASK, "mode": "lexical", "limit": 500})
    assert catalog.is_error is False and catalog.structured_content is not None
    assert "capability:emailSend" in [r["entity"] for r in catalog.structured_content["results"]]
    assert notices(catalog)[0].startswith(f"query is {len(TASK):,} characters; only its first")
    assert notices(catalog)[1] == "limit is over its maximum of 50; answered with 50."
    assert f"Notice: {notices(catalog)[0]}" in text_of(catalog) and f"Notice: {notices(catalog)[1]}" in text_of(catalog)
    assert actions.is_error is False and actions.structured_content is not None
    assert actions.structured_content["results"][0]["service"] == "gmail_work"
    assert "stripe_live" not in {row.get("service") for row in actions.structured_content["results"]}
    assert notices(actions)[:2] == [notices(actions)[0], "limit is over its maximum of 100; answered with 100."]
    assert notices(actions)[0].startswith(f"query is {2 * len(TASK):,} characters; only its first")
    assert all(f"notice: {n}" in text_of(actions) for n in notices(actions)[:2])
    code_notices = notices(code)
    assert code.is_error is False and code_notices[0].startswith("query is") and code_notices[1].startswith("limit is over its maximum of 200")
    assert f"notice: {code_notices[0]}" in text_of(code)


async def test_a_domain_listing_pages_with_the_cursor_argument(settings: Settings) -> None:
    async with running_app(settings, embeddings_model=None) as client:
        await put(client, BULK, caller=ADMIN)
        async with http_mcp(client, token_of(ALICE_PRO)) as mcp:
            first = await mcp.call_tool("search", {"domain": "bulk"})
            cursor = (first.structured_content or {})["nextCursor"]
            second = await mcp.call_tool("search", {"domain": "bulk", "cursor": cursor})
            bad = await mcp.call_tool("search", {"domain": "bulk", "cursor": "garbage"})
    entities = [r["entity"] for r in (first.structured_content or {})["results"] + (second.structured_content or {})["results"]]
    assert entities == [f"capability:bulk{i:02d}" for i in range(70)]
    assert f'cursor: "{cursor}"' in text_of(first) and (second.structured_content or {})["nextCursor"] is None
    assert bad.is_error is True and "cursor is not a listing cursor" in text_of(bad)
