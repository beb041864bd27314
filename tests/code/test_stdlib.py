"""Code search at a real scale: the standard library's json, email and asyncio packages, indexed
lexically (embeddings off), with regex and literal answers checked against a plain scan of the
same files."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from service.code.parsing import parse_search_body
from service.code.search import search_workspace
from service.code.state import close_workspaces, workspaces_of
from service.code.walker import walk
from service.code.workspace import SearchConfig, Workspace
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.settings import Settings
from service.surfaces import surfaces
from tests.code.trees import copy_stdlib_packages


@pytest.fixture
async def lexical_engine(settings: Settings) -> AsyncIterator[Engine]:
    engine = await open_engine(replace(settings, embeddings_model=None, revalidate_interval_s=0.0), surfaces())
    yield engine
    close_workspaces(engine)
    await engine.close()


@pytest.fixture
async def stdlib_workspace(lexical_engine: Engine, settings: Settings) -> Workspace:
    root = copy_stdlib_packages(settings.allowed_roots[0] / "stdlib")
    workspace, _ = await workspaces_of(lexical_engine).register("user:alice", root, SearchConfig())
    return workspace


def scan(root: Path, pattern: re.Pattern[str]) -> list[tuple[str, int]]:
    """What ``grep -rn`` would print, as (path, line)."""
    found = []
    for walked in walk(root).files:
        text = (root / walked.path).read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.split("\n"), start=1):
            if pattern.search(line):
                found.append((walked.path, number))
    return sorted(found)


async def test_stdlib_packages_index_and_answer_like_a_scan(lexical_engine: Engine, stdlib_workspace: Workspace) -> None:
    workspaces = workspaces_of(lexical_engine)
    started = time.monotonic()
    built = await workspaces.revalidate(stdlib_workspace, force=True)
    assert built.report is not None and built.report.complete
    assert built.report.files_added > 60 and built.report.chunks_added > 1_000
    assert time.monotonic() - started < 60

    pattern = r"^class \w+\((\w+\.)?\w*(Error|Exception)\):"
    answer = await search_workspace(lexical_engine, stdlib_workspace, parse_search_body({"query": pattern, "regex": True, "limit": 200}))
    truth = scan(stdlib_workspace.root, re.compile(pattern))
    assert 10 < len(truth) < 200
    assert [(r["path"], r["line"]) for r in answer.results] == truth, "regex answers exactly what a scan finds, in grep order"
    assert answer.meta["match_counts"]["trigram_candidates"] is not None, "the trigram index narrowed the scan"

    unguided = r"[ \t]+$"  # no literal to narrow by: every file is read, and screened before re matches it
    answer = await search_workspace(lexical_engine, stdlib_workspace, parse_search_body({"query": unguided, "regex": True, "limit": 200}))
    truth = scan(stdlib_workspace.root, re.compile(unguided))
    assert [(r["path"], r["line"]) for r in answer.results] == truth[:200]
    counts = answer.meta["match_counts"]
    assert counts["trigram_candidates"] is None and counts["files_ruled_out"] > counts["files_scanned"] // 2, counts

    literal = await search_workspace(lexical_engine, stdlib_workspace, parse_search_body({"query": "JSONDecodeError", "mode": "lexical", "limit": 200}))
    assert literal.results[0]["path"].startswith("json/")
    files_with = {path for path, _ in scan(stdlib_workspace.root, re.compile("JSONDecodeError", re.IGNORECASE))}
    assert {r["path"] for r in literal.results if "jsondecodeerror" in r["snippet"].lower()} == files_with

    scoped = await search_workspace(lexical_engine, stdlib_workspace, parse_search_body({"query": "def __init__", "mode": "lexical", "glob": "email/*.py", "limit": 200}))
    assert scoped.results and all(re.fullmatch(r"email/[^/]+\.py", r["path"]) for r in scoped.results)

    started = time.monotonic()
    again = await workspaces.revalidate(stdlib_workspace, force=True)
    assert again.report is not None and not again.report.changed_anything
    assert time.monotonic() - started < 10, "revalidating an unchanged tree only walks it"
