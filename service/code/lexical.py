"""The lexical passes: ranked chunk-aware text search, and regex search (always lexical).

Ranked: BM25 over the chunks' analyzed terms in the store (scope applied in the engine filter),
plus the chunks holding the query as a literal (case-insensitive; found through the trigram
index and verified), which rank first. Inside each chunk, the lines that hold the literal, or
else the most query terms, are the line-level matches shown as ``path:line:snippet``.

Regex: the trigram index proposes candidate files (or none can be required: every file in
scope), and Python's ``re`` matches each candidate's whole text, read from the workspace, in a
matching process (``rematch.py``) that is killed when the time budget runs out: ``re`` can be
neither interrupted nor kept from holding the GIL, a separate process is both. Lines come in path
and line order, as ``grep -rn`` prints them.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import re
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.code.cache import CachedChunk
from service.code.model import COLLECTION
from service.code.runtime import WorkspaceRuntime
from service.code.scope import Scope
from service.engine.analyzer import analyze, query_terms
from service.engine.store import Filter, Store

LITERAL_CANDIDATES = 2_000
REGEX_CANDIDATES = 20_000
# Matching processes at once per event loop: a burst of hostile regexes queues behind itself (each
# still stops at its own deadline, time queued included) and leaves the other cores to the rest.
REGEX_PROCESSES = 2
MATCHER_LINE_BYTES = 32 << 20  # one file's answer line (at most limit + 1 lines of 4 KiB, JSON-escaped)
_MATCHER = Path(__file__).with_name("rematch.py")  # run as a script, never imported
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_NON_ALNUM = re.compile(r"[^0-9a-z]+")
_WORD = re.compile(r"\w+")


@dataclass
class ChunkHit:
    """One chunk found by a pass, with its evidence from each."""

    chunk: CachedChunk
    bm25: float = 0.0
    exact: bool = False
    coverage: float = 0.0  # share of the query's terms the chunk holds
    lexical_rank: int | None = None
    semantic_rank: int | None = None
    semantic_score: float = 0.0
    fused: float = 0.0
    category: str = "source"
    weight: float = 1.0
    score: float = 0.0
    lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def source(self) -> str:
        if self.lexical_rank is not None and self.semantic_rank is not None:
            return "merged"
        return "lexical" if self.lexical_rank is not None else "semantic"


@dataclass(frozen=True)
class QueryText:
    """A query as the lexical pass reads it: the literal and the analyzed terms."""

    literal: str
    terms: str

    @classmethod
    def of(cls, query: str) -> QueryText:
        return cls(literal=query.strip(), terms=query_terms(query))

    @property
    def term_set(self) -> frozenset[str]:
        return frozenset(self.terms.split())


async def ranked_lexical(store: Store, runtime: WorkspaceRuntime, flt: Filter, scope: Scope, query: QueryText, depth: int) -> list[ChunkHit]:
    """Chunks in scope ranked lexically: literal holders first, then by BM25."""
    hits = await store.search_text(COLLECTION, query.terms, flt, limit=depth) if query.terms else []
    bm25 = {str(hit.payload.get("key")): hit.score for hit in hits}
    wanted = query.term_set
    coverage = {str(hit.payload.get("key")): _coverage(wanted, str(hit.payload.get("terms", ""))) for hit in hits}
    literal_keys = runtime.trigram.candidates_literal(query.literal, LITERAL_CANDIDATES) or []
    chunks = runtime.cache.by_keys([*bm25, *literal_keys])
    needle = query.literal.lower()
    found: list[ChunkHit] = []
    for key, chunk in chunks.items():
        if not scope.contains(chunk.path):
            continue
        exact = bool(needle) and needle in chunk.text.lower()
        if key not in bm25 and not exact:
            continue  # a trigram candidate that does not hold the literal
        found.append(ChunkHit(chunk=chunk, bm25=bm25.get(key, 0.0), exact=exact, coverage=1.0 if exact else coverage.get(key, 0.0)))
    names = frozenset(_WORD.findall(query.literal))
    # Literal holders first, among them the chunk that declares the name asked for, then BM25.
    found.sort(key=lambda h: (not h.exact, not (h.exact and _declares(h.chunk, names)), -h.bm25, h.chunk.path, h.chunk.start_line))
    ranked = found[:depth]
    for rank, hit in enumerate(ranked, start=1):
        hit.lexical_rank = rank
    return ranked


def _declares(chunk: CachedChunk, names: frozenset[str]) -> bool:
    """Whether the chunk is the declaration of one of the query's words (its symbol's last part)."""
    return chunk.symbol is not None and chunk.symbol.rsplit(".", 1)[-1] in names


def _coverage(wanted: frozenset[str], terms: str) -> float:
    if not wanted:
        return 0.0
    return len(wanted.intersection(terms.split())) / len(wanted)


def matching_lines(chunk: CachedChunk, query: QueryText, max_lines: int) -> list[tuple[int, str]]:
    """The chunk's lines that hold the literal, or else the most query terms (line order)."""
    needle = query.literal.lower()
    lines = chunk.text.split("\n")
    exact = [(chunk.start_line + i, line) for i, line in enumerate(lines) if needle and needle in line.lower()]
    if exact:
        return exact[:max_lines]
    wanted = query.term_set
    if not wanted:
        return []
    scored: list[tuple[int, int, str]] = []
    for i, line in enumerate(lines):
        compact = _NON_ALNUM.sub("", line.lower())
        if not any(term in compact for term in wanted):
            continue  # a cheap test before the analyzer: every term of a line is a substring of it
        overlap = len(wanted.intersection(analyze(line)))
        if overlap:
            scored.append((overlap, chunk.start_line + i, line))
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:max_lines]
    return [(line_no, line) for _, line_no, line in sorted(best, key=lambda s: s[1])]


def anchor_line(chunk: CachedChunk) -> tuple[int, str]:
    """The line that best names a chunk: its symbol's declaration, else its first non-blank line."""
    lines = chunk.text.split("\n")
    if chunk.symbol:
        name = chunk.symbol.rsplit(".", 1)[-1]
        for i, line in enumerate(lines):
            if name and name in line:
                return chunk.start_line + i, line
    for i, line in enumerate(lines):
        if line.strip():
            return chunk.start_line + i, line
    return chunk.start_line, lines[0] if lines else ""


# ---- regex -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineMatch:
    """A line where a match starts; ``chunk`` is the chunk holding that line (None: a blank line
    between chunks, or a file changed since it was indexed)."""

    path: str
    line: int
    text: str
    chunk: CachedChunk | None


@dataclass
class RegexOutcome:
    matches: list[LineMatch] = field(default_factory=list)
    files_scanned: int = 0
    candidates: int | None = None  # None: no trigram could be required, every file was scanned
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None


@dataclass
class MatchRun:
    """What a matching process answered: per file index its lines, and how far it got."""

    found: list[tuple[int, list[tuple[int, str]]]] = field(default_factory=list)
    scanned: int = 0
    timed_out: bool = False
    error: str | None = None


async def regex_search(
    runtime: WorkspaceRuntime,
    scope: Scope,
    compiled: re.Pattern[str],
    *,
    limit: int,
    budget_s: float,
    max_file_bytes: int,
) -> RegexOutcome:
    """Lines matching ``compiled`` in scope, in path and line order, at most ``limit``, within ``budget_s``."""
    outcome = RegexOutcome()
    deadline = time.monotonic() + budget_s
    ignore_case = bool(compiled.flags & re.IGNORECASE)
    candidates = runtime.trigram.candidate_paths(compiled.pattern, REGEX_CANDIDATES, ignore_case=ignore_case)
    paths = [path for path in runtime.cache.paths() if scope.contains(path)]
    if candidates is not None:
        outcome.candidates = len(candidates)
        paths = [path for path in paths if path in candidates]
    if not paths:
        return outcome
    request = {
        "pattern": compiled.pattern,
        "flags": int(compiled.flags),
        "root": str(runtime.workspace.root),
        "max_bytes": max_file_bytes,
        "max_matches": limit + 1,
        "files": [{"path": path} for path in paths],
    }
    run = await run_matcher(request, deadline)
    outcome.files_scanned, outcome.timed_out, outcome.error = run.scanned, run.timed_out, run.error
    matched = [paths[index] for index, _ in run.found]
    chunks = runtime.cache.chunks_of(matched)
    for index, lines in run.found:
        path = paths[index]
        outcome.matches.extend(LineMatch(path, line, text, _chunk_at(chunks.get(path, []), line)) for line, text in lines)
    if len(outcome.matches) > limit:
        outcome.matches = outcome.matches[:limit]
        outcome.truncated = True
    return outcome


async def run_matcher(request: dict[str, Any], deadline: float) -> MatchRun:
    """Run one request (``rematch.py``'s protocol) in a matching process; past ``deadline`` the
    process is killed and the files it answered stay answered."""
    run = MatchRun()
    slots = _slots()
    try:
        await asyncio.wait_for(slots.acquire(), timeout=max(deadline - time.monotonic(), 0.0))
    except TimeoutError:
        run.timed_out = True
        return run
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(_MATCHER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=MATCHER_LINE_BYTES,
        )
        try:
            await asyncio.wait_for(_converse(process, request, run), timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            run.timed_out = True
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    finally:
        slots.release()
    return run


async def _converse(process: asyncio.subprocess.Process, request: dict[str, Any], run: MatchRun) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(request).encode())
    await process.stdin.drain()
    process.stdin.close()
    while True:
        line = await process.stdout.readline()
        if not line:
            run.error = "the matching process ended early"
            return
        message = json.loads(line)
        if message.get("done"):
            return
        if "error" in message:
            run.error = str(message["error"])
            return
        run.scanned += 1
        if message.get("lines"):
            run.found.append((int(message["i"]), [(int(number), str(text)) for number, text in message["lines"]]))


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(REGEX_PROCESSES)
    return slots


def _chunk_at(chunks: list[CachedChunk], line: int) -> CachedChunk | None:
    """The chunk holding ``line`` (chunks are in line order); None when no chunk holds it."""
    index = bisect.bisect_right([c.start_line for c in chunks], line) - 1
    if index < 0 or chunks[index].end_line < line:
        return None
    return chunks[index]
