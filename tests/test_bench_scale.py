"""The code search scale bench, end to end on its small tree: a real service process, real Redis, ripgrep when installed."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from bench.bench_code_scale import QUERIES, SMALL_MB, UNGUIDED_QUERIES, build_tree, run


def holds(tree: Path, query: str, regex: bool) -> bool:
    """Whether any file of ``tree`` holds a match (Python's ``re``, multi-line, as the service matches)."""
    pattern = re.compile(query if regex else re.escape(query), re.MULTILINE)
    return any(pattern.search(path.read_text(errors="replace")) for path in tree.rglob("*.py"))


def test_the_small_scale_bench_measures_the_service_and_ripgrep_on_the_same_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    files, size = build_tree(tree, SMALL_MB)
    assert files > 100 and size <= SMALL_MB * 1_000_000
    assert all(p.suffix == ".py" and p.stat().st_size < 1_000_000 for p in tree.rglob("*") if p.is_file())
    assert not any(part in {"vendor", "node_modules", ".git"} or part.startswith(".") for p in tree.rglob("*") for part in p.relative_to(tree).parts)

    result = asyncio.run(run(tree, 0, ten=True))
    printed = capsys.readouterr().out

    assert result.files == files and result.chunks >= files
    assert result.build_s > 0 and result.tree_kib > 0 and result.data_kib > 0
    assert list(result.memory) == ["after indexing", "after the queries", "after a restart, before any search", "after a restart and one search"]
    assert all(0 < m.rss_anon_mb <= m.rss_mb for m in result.memory.values())
    assert result.first_query_ms > 0 and result.first_query_after_restart_ms > 0
    assert result.edit_found_ms is not None and result.edit_found_ms >= 0
    assert not any("scale_bench_edit_" in p.read_text() for p in tree.rglob("*.py"))  # the edit is undone

    assert [(q["query"], q["regex"]) for q in result.queries] == list(QUERIES)
    assert [(q["query"], q["regex"]) for q in result.unguided] == list(UNGUIDED_QUERIES)
    for q in [*result.queries, *result.unguided]:
        # The service finds a query exactly when the tree holds it.
        assert (q["results"] > 0) == holds(tree, q["query"], q["regex"]), q
    rg_installed = shutil.which("rg") is not None
    assert result.rg_available == rg_installed
    assert all((q["rg_ms"] is not None) == rg_installed and (q["ratio"] is not None) == rg_installed for q in [*result.queries, *result.unguided])
    if rg_installed:
        assert all(q["ratio"] == pytest.approx(q["ms"] / q["rg_ms"]) for q in [*result.queries, *result.unguided])
        assert "_service / rg: median " in printed and "_regexes no trigram narrows, service / rg: median " in printed
    else:
        assert "rg not installed" in printed

    assert list(result.ten) == ["10 indexed", "after a restart, before any search", "after a restart, one workspace searched"]
    assert all(m.rss_anon_mb > 0 for m in result.ten.values())
    for title in ("### Lexical index build", "### Disk: blocks in use", "### Service memory", "### Queries, median of 3", "### Regexes no trigram narrows", "### Ten workspaces registered"):
        assert title in printed
