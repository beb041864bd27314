"""Catalog search inputs an agent sends as they come: a whole task as the query, a limit over the
maximum, and a domain too long for one page (paged with an opaque cursor)."""

from __future__ import annotations

from typing import Any

from service.catalog.search import MAX_QUERY
from tests.callers import ADMIN
from tests.catalog.fixtures import CAPABILITIES, DOMAINS, put, refs, search

# The task an agent pastes: the words that matter first, then pages of context.
TASK = "send an email message to the recipients " + " ".join(f"context{i} of the ticket" for i in range(1000))
BULK = [
    {"type": "capability", "id": f"bulk{i:03d}", "domain": "bulk", "summary": f"Bulk operation number {i}.", "order": (i * 7) % 60}
    for i in range(120)
]


def curated(entities: list[dict[str, Any]]) -> list[str]:
    return [f"capability:{e['id']}" for e in sorted(entities, key=lambda e: (e["order"], e["id"]))]


async def test_a_long_query_is_searched_by_its_prefix_with_a_notice(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES, caller=ADMIN)
    assert len(TASK) > 10 * MAX_QUERY
    answer = await search(lexical_client, {"query": TASK})
    doc = answer["structuredContent"]
    assert doc["kind"] == "ranked" and refs(answer)[0] == "capability:emailSend"
    searched = doc["query"]
    assert len(searched) <= MAX_QUERY and TASK.startswith(searched) and TASK[len(searched)] == " "  # cut between words
    notice = f"query is {len(TASK):,} characters; only its first {len(searched):,} were searched"
    assert doc["notices"][0].startswith(notice)
    assert f"Notice: {notice}" in answer["content"] and TASK not in answer["content"]
    short = await search(lexical_client, {"query": "send an email message"})
    assert not any("characters" in n for n in short["structuredContent"]["notices"])


async def test_a_limit_over_the_maximum_is_clamped_with_a_notice(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + BULK, caller=ADMIN)
    answer = await search(lexical_client, {"query": "bulk operation", "limit": 500})
    doc = answer["structuredContent"]
    assert len(doc["results"]) == 50 and doc["notices"][0] == "limit is over its maximum of 50; answered with 50."
    assert "Notice: limit is over its maximum of 50" in answer["content"]
    listing = (await search(lexical_client, {"domain": "bulk", "limit": 10_000}))["structuredContent"]
    assert len(listing["results"]) == 50 and listing["notices"][0].startswith("limit is over its maximum")
    for limit in (0, -3):
        error = await search(lexical_client, {"query": "bulk", "limit": limit}, status=400)
        assert "limit must be between 1 and 50" in error["error"]["message"]


async def page_through(client: Any, body: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Every page of a listing, following nextCursor: the refs in order and each page's answer."""
    seen: list[str] = []
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        answer = await search(client, {**body, **({"cursor": cursor} if cursor else {})})
        pages.append(answer)
        seen.extend(refs(answer))
        cursor = answer["structuredContent"]["nextCursor"]
        if cursor is None:
            return seen, pages
        assert len(pages) < 60


async def test_a_domain_listing_pages_with_a_cursor_in_curated_order(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + BULK, caller=ADMIN)
    seen, pages = await page_through(lexical_client, {"domain": "bulk"})
    assert seen == curated(BULK)  # every entry once, in curated order
    assert [len(p["structuredContent"]["results"]) for p in pages] == [50, 50, 20]
    first = pages[0]
    doc = first["structuredContent"]
    assert doc["total"] == 120 and doc["notices"] == [f'70 more capabilities in `bulk`: pass cursor "{doc["nextCursor"]}" with domain "bulk" for the next page.']
    next_step = [line for line in first["content"].splitlines() if line.startswith("Next step:")]
    assert len(next_step) == 1 and f'search({{ domain: "bulk", cursor: "{doc["nextCursor"]}" }})' in next_step[0]
    last = pages[-1]["structuredContent"]
    assert last["nextCursor"] is None and not last.get("notices") and "cursor" not in pages[-1]["content"]
    small, _ = await page_through(lexical_client, {"domain": "bulk", "limit": 7})
    assert small == seen


async def test_pages_neither_repeat_nor_skip_when_the_domain_changes_between_calls(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + BULK, caller=ADMIN)
    first = (await search(lexical_client, {"domain": "bulk"}))["structuredContent"]
    shown = [r["entity"] for r in first["results"]]
    # A capability that sorts before the cursor arrives, and one already shown leaves.
    await put(lexical_client, [{"type": "capability", "id": "aaa-new", "domain": "bulk", "summary": "New.", "order": 0}], caller=ADMIN)
    response = await lexical_client.delete(f"/v1/catalog/entities/{shown[0]}", headers=ADMIN)
    assert response.status == 200
    rest, _ = await page_through(lexical_client, {"domain": "bulk", "cursor": first["nextCursor"]})
    assert rest == curated(BULK)[50:]


async def test_a_trimmed_listing_page_continues_after_its_last_shown_entry(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + BULK, caller=ADMIN)
    seen, pages = await page_through(lexical_client, {"domain": "bulk", "maxResponseSize": 2_000})
    assert seen == curated(BULK)
    assert all(len(p["content"]) <= 2_000 for p in pages) and len(pages[0]["structuredContent"]["results"]) < 50


async def test_bad_cursors_are_400(lexical_client: Any) -> None:
    await put(lexical_client, DOMAINS + CAPABILITIES + BULK, caller=ADMIN)
    cursor = (await search(lexical_client, {"domain": "bulk"}))["structuredContent"]["nextCursor"]
    cases = [
        ({"domain": "bulk", "cursor": "not a cursor"}, "cursor is not a listing cursor"),
        ({"domain": "bulk", "cursor": "eyJ2IjoxfQ"}, "cursor is not a listing cursor"),  # {"v":1}
        ({"domain": "bulk", "cursor": cursor[:-3]}, "cursor is not a listing cursor"),
        ({"domain": "email", "cursor": cursor}, "cursor pages the listing of domain 'bulk', not 'email'"),
        ({"cursor": cursor}, "cursor pages a domain listing: pass it with the same domain"),
        ({"domain": "bulk", "query": "bulk operation number", "cursor": cursor}, "drop cursor, or the query"),
        ({"entity": "capability:bulk001", "cursor": cursor}, "entity cannot be combined with query, domain or cursor"),
    ]
    for body, message in cases:
        error = await search(lexical_client, body, status=400)
        assert error["error"]["code"] == "validation_error" and message in error["error"]["message"], (body, error)
