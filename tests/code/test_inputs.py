"""Code search inputs an agent sends as they come: a whole task as the query (searched by its
prefix, with a notice; a regex is never cut) and a limit over the maximum (clamped, with a notice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.code.parsing import MAX_LIMIT, MAX_QUERY_CHARS
from tests.code.helpers import register, search

pytestmark = pytest.mark.asyncio(loop_scope="module")

TASK = "hash_password " + " ".join(f"note{i} from the issue" for i in range(200))


async def test_a_long_word_query_is_searched_by_its_prefix_with_a_notice(shared_client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(shared_client, tree)
    assert len(TASK) > 3 * MAX_QUERY_CHARS
    found = await search(shared_client, workspace["id"], query=TASK, mode="lexical")
    notice = f"query is {len(TASK):,} characters; only its first"
    assert found["notices"][0].startswith(notice) and f"notice: {notice}" in found["output"]
    assert "src/pkg/auth.py" in [r["path"] for r in found["results"]]
    short = await search(shared_client, workspace["id"], query="hash_password", mode="lexical")
    assert not any("characters" in n for n in short["notices"])


async def test_a_long_regex_is_refused_not_cut(shared_client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(shared_client, tree)
    pattern = "(" + "|".join(f"name{i}" for i in range(300)) + ")"
    refused = await search(shared_client, workspace["id"], expect=400, query=pattern, regex=True)
    assert "a regex may have at most 1,000" in refused["error"]["message"]


async def test_a_limit_over_the_maximum_is_clamped_with_a_notice(shared_client: TestClient[Any, Any], tree: Path) -> None:
    workspace = await register(shared_client, tree)
    found = await search(shared_client, workspace["id"], query="def", mode="lexical", limit=100_000)
    assert found["notices"][0] == f"limit is over its maximum of {MAX_LIMIT}; answered with {MAX_LIMIT}."
    at_cap = await search(shared_client, workspace["id"], query="def", mode="lexical", limit=MAX_LIMIT)
    assert found["results"] == at_cap["results"]
    await search(shared_client, workspace["id"], expect=400, query="def", limit=0)
