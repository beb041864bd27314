"""What a workspace search answers, checked against a reference over the real HTTP app: regex is
Python's ``re`` on each file's whole text, an empty or cut answer says why, every result line is
``path:line:snippet``, and background embedding fills the vector size the workspace's searches query."""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from service.code.model import COLLECTION
from service.code.parsing import MAX_LIMIT
from service.settings import ProviderSettings, Settings
from service.state import ENGINE
from tests.code.conftest import variant
from tests.code.helpers import register, search, wait_embedded, wait_indexed, wait_model_ready
from tests.code.trees import write_tree
from tests.embedding_server import CALLS, embeddings_app
from tests.helpers import running_app

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Two functions and a method; between them a whitespace-only line, a tab-only line and blank ones.
FMT_PY = "\n".join(
    [
        "def render(self, d):",  # 1
        '    a = "plain"',  # 2
        '    b = "{d}"',  # 3
        "    c = 'self{s}'",  # 4
        "    e = self.s",  # 5
        '    return f"{self.x}" + a',  # 6
        "",  # 7
        "   ",  # 8: spaces only, outside every chunk
        "",  # 9
        "def alpha():",  # 10
        "    return 1",  # 11
        "  ",  # 12: spaces only, between two chunks
        "\t",  # 13: a tab only
        "def beta():",  # 14
        "    return [a] + word",  # 15
        "",
    ]
)
LINE_RE = re.compile(r"^[^:\n]+:\d+:")


@pytest.fixture
def client(shared_client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    return shared_client


def reference_lines(pattern: str, text: str, flags: int = 0) -> list[int]:
    """Lines of ``text`` holding a position where Python's re matches the whole text (brute force)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "[[": re warns it may read a nested set one day
        compiled = re.compile(pattern, re.MULTILINE | flags)
    found, start = [], 0
    for number, line in enumerate(text.split("\n"), start=1):
        if any(compiled.match(text, position) for position in range(start, start + len(line) + 1)):
            found.append(number)
        start += len(line) + 1
    return found


async def test_regex_answers_exactly_the_lines_python_re_matches(client: TestClient[Any, Any], module_settings: Settings) -> None:
    root = module_settings.allowed_roots[0] / f"regex-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    (root / "fmt.py").write_text(FMT_PY)
    workspace = await register(client, root)
    await wait_indexed(client, workspace["id"])
    cases = {
        '"{d}': [3],  # braces are literal text to re, never fuzzy matching
        "self{s}": [4],
        "{self.x}": [6],
        r"^[ \t]+$": [8, 12, 13],  # whitespace-only lines, which no chunk holds
        "return 1\n  \n\t\ndef beta": [11],  # across two chunks and the blank lines between them
        r"(?s)def alpha.*?def beta": [10],  # the two literals lie in two chunks
        "[[:alpha:]]": [15],  # a set of "[:alph" then "]" to re, not a POSIX class
    }
    for pattern, expected in cases.items():
        assert reference_lines(pattern, FMT_PY) == expected, pattern
        found = await search(client, workspace["id"], query=pattern, regex=True, limit=50)
        assert [r["line"] for r in found["results"]] == expected, (pattern, found["output"], found["notices"])
        assert all(r["path"] == "fmt.py" for r in found["results"])
        rows = [row for row in found["output"].splitlines() if not row.startswith("notice: ")]
        assert all(LINE_RE.match(row) for row in rows) or rows == ["no matches"], found["output"]


async def test_a_path_inside_skipped_content_says_which_rule_skipped_it(client: TestClient[Any, Any], module_settings: Settings) -> None:
    tree = write_tree(module_settings.allowed_roots[0] / f"skipped-{uuid.uuid4().hex[:8]}")
    (tree / "extra").mkdir()
    (tree / "extra" / "notes.txt").write_text("hash_password notes\n")
    (tree / "big.txt").write_text("hash_password\n" * (module_settings.max_file_bytes // 14 + 10))
    workspace = await register(client, tree, skip_dirs=["extra"])
    wid = workspace["id"]
    await wait_indexed(client, wid)
    cases = {
        "node_modules/left-pad": "directories named 'node_modules' are always skipped",
        "vendor/lib/vendored.go": "directories named 'vendor' are always skipped",
        "build/out.py": "'build' is not indexed: it is git-ignored",
        "debug.log": "'debug.log' is not indexed: it is git-ignored",
        "extra": "'extra' is in the workspace's search.skip_dirs",
        "big.txt": "more than max_file_bytes",
    }
    for path, why in cases.items():
        for body in ({"query": "hash_password", "mode": "lexical"}, {"query": "hash_password|leftPad|Vendored", "regex": True}):
            found = await search(client, wid, path=path, **body)
            assert found["results"] == [] and found["output"].startswith("no matches"), (path, found["output"])
            assert any(why in notice for notice in found["notices"]), (path, found["notices"])
            assert f"notice: {found['notices'][-1]}" in found["output"].splitlines()
    indexed = await search(client, wid, path="src", query="no such words anywhere", mode="lexical")
    assert not any("is not indexed" in notice for notice in indexed["notices"]), "an indexed path with no match has no skip notice"


async def test_results_cut_at_limit_say_more_matched_and_how_to_see_them(client: TestClient[Any, Any], module_settings: Settings) -> None:
    tree = write_tree(module_settings.allowed_roots[0] / f"cut-{uuid.uuid4().hex[:8]}")
    workspace = await register(client, tree)
    wid = workspace["id"]
    await wait_indexed(client, wid)
    whole = await search(client, wid, query="def", mode="lexical", limit=MAX_LIMIT)
    total = len(whole["results"])
    assert total > 3 and not any("results cut" in notice for notice in whole["notices"])

    cut = await search(client, wid, query="def", mode="lexical", limit=2)
    assert len(cut["results"]) == 2
    expected = f"results cut at limit 2: {total - 2} more matching lines were found; narrow path or glob, or raise limit (up to {MAX_LIMIT}) to see them"
    assert expected in cut["notices"], cut["notices"]
    assert cut["meta"]["match_counts"]["truncated"] is True

    regex_cut = await search(client, wid, query=r"def \w+", regex=True, limit=1)
    assert len(regex_cut["results"]) == 1
    assert any(n.startswith("results cut at limit 1: more matching lines exist;") for n in regex_cut["notices"]), regex_cut["notices"]
    regex_whole = await search(client, wid, query=r"def \w+", regex=True, limit=MAX_LIMIT)
    assert not any("results cut" in notice for notice in regex_whole["notices"])


async def test_hybrid_output_lines_are_path_line_snippet(client: TestClient[Any, Any], module_settings: Settings) -> None:
    tree = write_tree(module_settings.allowed_roots[0] / f"hybrid-{uuid.uuid4().hex[:8]}")
    workspace = await register(client, tree)
    await wait_indexed(client, workspace["id"])
    await wait_model_ready(client)
    found = await search(client, workspace["id"], query="give the customer their money back", path="src/pkg")
    assert found["meta"]["mode"] == "hybrid", found["notices"]
    rows = [row for row in found["output"].splitlines() if not row.startswith("notice: ")]
    assert rows == [f"{r['path']}:{r['line']}:{r['snippet']}" for r in found["results"]]
    assert all(LINE_RE.match(row) and not row.startswith("[") for row in rows)
    assert {r["source"] for r in found["results"]} <= {"lexical", "semantic", "merged"}
    assert any(r["source"] != "lexical" for r in found["results"]), "the source stays in the structured results"


async def test_background_embedding_uses_the_workspace_dimensions(module_settings: Settings) -> None:
    """Warming embeds in the background (embed jobs), not at query time: its vectors must have the
    workspace's embeddings_dimensions, the size its searches query, or semantic hits vanish. The
    embeddings server (the ``embedding_endpoint`` app, started on this module's loop) honours
    ``dimensions`` and otherwise answers 32."""
    server = TestServer(embeddings_app())
    await server.start_server()
    try:
        provider = ProviderSettings(id="acme", base_url=str(server.make_url("/v1")), api_key="sk-test")
        tree = write_tree(module_settings.allowed_roots[0] / f"dims-{uuid.uuid4().hex[:8]}")
        async with running_app(variant(module_settings, "dims", providers=(provider,))) as client:
            workspace = await register(client, tree, embeddings_model="acme/code-embed", embeddings_dimensions=64, prewarm_embeddings=True)
            wid = workspace["id"]
            warmed = await wait_embedded(client, wid)
            assert warmed["warm"] is True and warmed["embedded"] == warmed["chunks"] > 0

            calls = server.app[CALLS]
            assert calls and all(call.get("dimensions") == 64 for call in calls), [call.get("dimensions") for call in calls]
            store = client.app[ENGINE].store
            points, _ = await store.scroll(COLLECTION, None, limit=1000, with_vectors=True)
            mine = [p for p in points if p.payload.get("workspace") == wid]
            assert mine and all(p.payload.get("vector_name") == "acme-code-embed-64" for p in mine)
            assert all(len(p.vectors["acme-code-embed-64"]) == 64 for p in mine)

            found = await search(client, wid, query="give the customer their money back")
            assert found["meta"]["mode"] == "hybrid" and found["meta"]["embedded_now"] == 0, found["notices"]
            mix = found["meta"]["source_mix"]
            assert mix["semantic"] + mix["merged"] > 0, "the warmed chunks are found by the semantic pass"
            assert found["meta"]["match_counts"]["semantic_chunks"] > 0
    finally:
        await server.close()
