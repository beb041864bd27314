"""A literal held by far more chunks than a search ranks: the chunks are read in ranking order and
only until enough hold it, and the answer is the one reading every candidate gives (the
declaration first, then path order), including a declaration that sorts last by path."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.settings import Settings
from tests.code.helpers import register, search, wait_indexed

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALLERS = 180  # more than a lexical search's depth (50 at limit 10): not every holder is read


async def test_a_common_literal_ranks_its_declaration_first_and_then_holders_in_path_order(shared_client: TestClient[Any, Any], module_settings: Settings) -> None:
    tree = module_settings.allowed_roots[0] / f"literal-{uuid.uuid4().hex[:8]}"
    for n in range(CALLERS):
        path = tree / "callers" / f"c{n:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def use_{n}(path):\n    return load_settings_file(path) + {n}\n")
    (tree / "zz").mkdir()
    (tree / "zz" / "settings.py").write_text("def load_settings_file(path):\n    return open(path).read()\n")
    (tree / "callers" / "other.py").write_text("def unrelated():\n    return 'load settings later'\n")
    workspace = await register(shared_client, tree)
    await wait_indexed(shared_client, workspace["id"])

    found = await search(shared_client, workspace["id"], query="load_settings_file", mode="lexical", limit=10)

    paths = [r["path"] for r in found["results"]]
    holders = sorted(f"callers/c{n:03d}.py" for n in range(CALLERS))
    assert paths[0] == "zz/settings.py", "the declaration of the name asked for comes first, though it sorts last"
    assert paths[1:] == holders[: len(paths) - 1], "then the holders in path order"
    assert len(paths) == 10 and "callers/other.py" not in paths
    assert found["meta"]["match_counts"]["literal_chunks"] == 50, "a full depth of literal holders"
