"""The lexical passes: ranked chunk-aware text search, and regex search (always lexical).

Ranked: BM25 over the chunks' analyzed terms in the store (scope applied in the engine filter),
plus the chunks holding the query as a literal (case-insensitive; found through the trigram
index and verified), which rank first. Inside each chunk, the lines that hold the literal, or
else the most query terms, are the line-level matches shown as ``path:line:snippet``.

Regex: the trigram index proposes candidate chunks (or none can be required: every chunk in
scope), ``find_line_matches`` verifies each within the time budget, in path and line order as
``grep -rn`` prints them.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import regex

from service.code.cache import CachedChunk
from service.code.model import COLLECTION
from service.code.runtime import WorkspaceRuntime
from service.code.scope import Scope
from service.code.trigram import RegexTimeout, find_line_matches
from service.engine.analyzer import analyze, query_terms
from service.engine.store import Filter, Store

LITERAL_CANDIDATES = 2_000
REGEX_CANDIDATES = 20_000
INLINE_MATCH_S = 0.05  # a file's regex match runs on the event loop this long at most
# Matches that outlast the inline slice (hostile patterns, huge files) share these threads, not
# the default pool, where model encodes, walks and index commits run: a burst of hostile regexes
# queues behind itself (each still stops at its own deadline) and never holds up a query embedding.
REGEX_THREADS = 2
_REGEX_POOL = ThreadPoolExecutor(max_workers=REGEX_THREADS, thread_name_prefix="agentsearch-regex")
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
    chunk: CachedChunk
    line: int
    text: str


@dataclass
class RegexOutcome:
    matches: list[LineMatch] = field(default_factory=list)
    chunks_scanned: int = 0
    candidates: int | None = None  # None: no trigram could be required, every chunk was scanned
    timed_out: bool = False
    truncated: bool = False


async def regex_search(
    runtime: WorkspaceRuntime, scope: Scope, compiled: regex.Pattern[str], pattern: str, *, ignore_case: bool, limit: int, budget_s: float
) -> RegexOutcome:
    """Lines matching ``compiled`` in scope, in path and line order, at most ``limit``, within ``budget_s``.

    The chunks of a file are matched together, laid out on their own lines (one regex call per
    file, not per chunk: the per-call overhead dominates a scan), so line numbers are the file's."""
    outcome = RegexOutcome()
    deadline = time.monotonic() + budget_s
    keys = runtime.trigram.candidates_regex(pattern, REGEX_CANDIDATES, ignore_case=ignore_case)
    rows: Iterable[tuple[str, int, int, str]]
    known: dict[str, list[CachedChunk]] = {}
    if keys is not None and len(keys) < REGEX_CANDIDATES:
        outcome.candidates = len(keys)
        chunks = sorted(runtime.cache.by_keys(keys).values(), key=lambda c: (c.path, c.start_line))
        for chunk in chunks:
            known.setdefault(chunk.path, []).append(chunk)
        rows = ((c.path, c.start_line, c.end_line, c.text) for c in chunks)
    else:
        # Every chunk in scope: light rows, and whole chunks only for the files that match.
        rows = (row for batch in runtime.cache.iter_layouts(scope.prefix) for row in batch)
    last_yield = time.monotonic()
    for path, group in itertools.groupby(rows, key=lambda row: row[0]):
        if not scope.contains(path):
            continue
        layout = [(start, end, text) for _, start, end, text in group]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            outcome.timed_out = True
            return outcome
        outcome.chunks_scanned += len(layout)
        found, outcome.timed_out = await _file_matches(compiled, _file_text(layout), limit - len(outcome.matches) + 1, deadline)
        if found:
            file_chunks = known.get(path) or runtime.cache.chunks_of([path]).get(path, [])
            outcome.matches.extend(LineMatch(_chunk_at(file_chunks, line), line, text) for line, text in found)
        if len(outcome.matches) > limit:
            outcome.matches = outcome.matches[:limit]
            outcome.truncated = True
            return outcome
        if outcome.timed_out:
            return outcome
        if time.monotonic() - last_yield > 0.01:
            await asyncio.sleep(0)  # a long scan lets other requests run
            last_yield = time.monotonic()
    return outcome


async def _file_matches(compiled: regex.Pattern[str], text: str, max_matches: int, deadline: float) -> tuple[list[tuple[int, str]], bool]:
    """One file's matching lines and whether the budget ran out. A file matches inline for
    ``INLINE_MATCH_S`` at most; past that (a hostile pattern, a huge file) it is matched again in a
    thread with the GIL released, so one slow regex never stalls the other requests."""
    remaining = deadline - time.monotonic()
    try:
        return find_line_matches(compiled, text, max_matches, min(remaining, INLINE_MATCH_S)), False
    except RegexTimeout as exc:
        if remaining <= INLINE_MATCH_S:
            return exc.partial, True
    try:
        found = await asyncio.get_running_loop().run_in_executor(_REGEX_POOL, _match_until, compiled, text, max_matches, deadline)
    except RegexTimeout as exc:
        return exc.partial, True
    return found, False


def _match_until(compiled: regex.Pattern[str], text: str, max_matches: int, deadline: float) -> list[tuple[int, str]]:
    """``find_line_matches`` in a regex thread, timed from when the thread takes it: time spent
    queued behind other matches counts against the same deadline."""
    return find_line_matches(compiled, text, max_matches, deadline - time.monotonic(), release_gil=True)


def _file_text(layout: list[tuple[int, int, str]]) -> str:
    """A file's chunks ``(start_line, end_line, text)`` on their own line numbers (lines outside every chunk are blank)."""
    lines: list[str] = []
    next_line = 1
    for start_line, end_line, text in layout:
        lines.extend([""] * (start_line - next_line))
        lines.append(text)
        next_line = end_line + 1
    return "\n".join(lines)


def _chunk_at(chunks: list[CachedChunk], line: int) -> CachedChunk:
    """The chunk holding ``line`` (chunks are in line order)."""
    index = bisect.bisect_right([c.start_line for c in chunks], line) - 1
    return chunks[max(index, 0)]
