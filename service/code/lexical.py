"""The lexical passes: ranked chunk-aware text search, and regex search (always lexical).

Ranked: BM25 over the chunks' analyzed terms in the workspace's lexical index (``trigram.py``,
scope applied in the index), plus the chunks holding the query as a literal (case-insensitive;
found through the index's trigrams and verified), which rank first. Inside each chunk, the lines that hold the literal, or
else the most query terms, are the line-level matches shown as ``path:line:snippet``.

Regex: the trigram index proposes candidate files (or none can be required: every file in
scope), and Python's ``re`` matches each candidate's whole text, read from the workspace, in a
warm matching process (``rematch.py``, pooled by ``matchers.py``) that is killed when the time
budget runs out: ``re`` can be neither interrupted nor kept from holding the GIL, a separate
process is both. Lines come in path and line order, as ``grep -rn`` prints them.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from service.code.cache import CachedChunk
from service.code.matchers import MatcherPool, MatchRun, default_pool
from service.code.scope import Scope
from service.code.state import WorkspaceRuntime
from service.code.trigram import COUNTED_TERMS, RankedChunk, Within
from service.engine.analyzer import analyze, query_terms

LITERAL_CANDIDATES = 2_000
_READ_BATCH = 64  # literal candidates read (and inflated) at a time, in ranking order
REGEX_CANDIDATES = 20_000
_NON_ALNUM = re.compile(r"[^0-9a-z]+")
_NON_ALNUM_KEEPING_LINES = re.compile(r"[^0-9a-z\n]+")
_WORD = re.compile(r"\w+")
_BLANKS = re.compile(r"[ \t]+")


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
    # Per word of the text searched, the query's terms among its analyzed terms (one search's memo).
    _word_terms: dict[str, frozenset[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, query: str) -> QueryText:
        return cls(literal=query.strip(), terms=query_terms(query))

    @cached_property
    def term_set(self) -> frozenset[str]:
        return frozenset(self.terms.split())

    @cached_property
    def _any_term(self) -> re.Pattern[str]:
        """Finds any query term in a text (none without terms)."""
        return re.compile("|".join(re.escape(term) for term in sorted(self.term_set)) or "(?!)")

    def lines_with_terms(self, text: str) -> list[int]:
        """The indexes of ``text``'s lines that may hold a query term: those whose lowercase letters and
        digits, run together, hold one (every term of a line is such a substring; a cheap test before
        the analyzer). Lowercasing maps no character to or from a newline: the lines stay the same."""
        if not self.term_set:
            return []
        any_term = self._any_term
        compact = _NON_ALNUM_KEEPING_LINES.sub("", text.lower()).split("\n")
        return [i for i, line in enumerate(compact) if any_term.search(line)]

    def terms_in(self, line: str, *, first_only: bool = False) -> set[str]:
        """``term_set & set(analyze(line))`` (with ``first_only``: stopping at the first found),
        each distinct word analyzed once per query, and only when it can hold a query term. No
        identifier spans a space or a tab, so the line's terms are its words' terms; an ASCII
        word's terms are substrings of its lowercase letters and digits, so a word without a
        query term among those has none. A word with other characters (whose terms may fold to
        letters it does not show) is always analyzed."""
        found: set[str] = set()
        for word in _BLANKS.split(line):
            held = self._word_terms.get(word)
            if held is None:
                if word.isascii() and not self._any_term.search(_NON_ALNUM.sub("", word.lower())):
                    held = frozenset()
                else:
                    held = self.term_set.intersection(analyze(word))
                self._word_terms[word] = held
            found.update(held)
            if found and first_only:
                break
        return found


async def ranked_lexical(runtime: WorkspaceRuntime, within: Within, scope: Scope, query: QueryText, depth: int) -> list[ChunkHit]:
    """Chunks in scope ranked lexically: literal holders first, then by BM25 (the workspace's
    lexical index, searched in a thread: tantivy releases the GIL)."""
    terms = query.terms.split()
    ranked = await asyncio.to_thread(runtime.trigram.ranked, terms, depth, within) if terms else []
    return lexical_ranking(ranked, runtime, scope, query, depth)


def lexical_ranking(ranked: Sequence[RankedChunk], runtime: WorkspaceRuntime, scope: Scope, query: QueryText, depth: int) -> list[ChunkHit]:
    """``ranked_lexical`` of BM25 hits already found (``TrigramIndex.ranked``).

    A common literal has up to ``LITERAL_CANDIDATES`` trigram candidates, and reading a text means
    inflating it: the candidates are put in ranking order from their places alone and read in that
    order until ``depth`` of them hold the literal (a later one could only rank below those)."""
    bm25 = {hit.key: hit.score for hit in ranked}
    counted = min(len(query.term_set), COUNTED_TERMS)
    coverage = {hit.key: hit.terms_held / counted if counted else 0.0 for hit in ranked}
    needle = query.literal.lower()
    names = frozenset(_WORD.findall(query.literal))
    found: list[ChunkHit] = []

    def take(chunk: CachedChunk) -> bool:
        """Keep ``chunk`` if it is in scope and a BM25 hit or a literal holder; whether it holds the literal."""
        if not scope.contains(chunk.path):
            return False
        exact = bool(needle) and needle in chunk.text.lower()
        if chunk.key in bm25 or exact:
            found.append(ChunkHit(chunk=chunk, bm25=bm25.get(chunk.key, 0.0), exact=exact, coverage=1.0 if exact else coverage.get(chunk.key, 0.0)))
        return exact

    for chunk in runtime.cache.by_keys(bm25).values():
        take(chunk)
    candidates = runtime.trigram.literal_places(query.literal, LITERAL_CANDIDATES) or {}
    places = {key: place for key, place in candidates.items() if key not in bm25}
    if places and needle:
        in_scope = [key for key, place in places.items() if scope.contains(place.path)]
        # As the final sort orders literal holders (none of these is a BM25 hit: their BM25 is 0).
        in_scope.sort(key=lambda key: (not _names_declared(places[key].symbol, names), places[key].path, places[key].start_line))
        holders = 0  # among these candidates alone: a BM25 hit may rank below a later one that declares the name
        for start in range(0, len(in_scope), _READ_BATCH):
            if holders >= depth:
                break
            batch = runtime.cache.by_keys(in_scope[start : start + _READ_BATCH])
            for key in in_scope[start : start + _READ_BATCH]:
                if key in batch and take(batch[key]):
                    holders += 1
    # Literal holders first, among them the chunk that declares the name asked for, then BM25.
    found.sort(key=lambda h: (not h.exact, not (h.exact and _declares(h.chunk, names)), -h.bm25, h.chunk.path, h.chunk.start_line))
    ranked_hits = found[:depth]
    for rank, hit in enumerate(ranked_hits, start=1):
        hit.lexical_rank = rank
    return ranked_hits


def _declares(chunk: CachedChunk, names: frozenset[str]) -> bool:
    """Whether the chunk is the declaration of one of the query's words (its symbol's last part)."""
    return _names_declared(chunk.symbol, names)


def _names_declared(symbol: str | None, names: frozenset[str]) -> bool:
    return symbol is not None and symbol.rsplit(".", 1)[-1] in names


def matching_lines(chunk: CachedChunk, query: QueryText, max_lines: int) -> list[tuple[int, str]]:
    """The chunk's lines that hold the literal, or else the most query terms (line order)."""
    needle = query.literal.lower()
    lines = chunk.text.split("\n")
    if needle and needle in chunk.text.lower():  # else no line holds it
        exact = [(chunk.start_line + i, line) for i, line in enumerate(lines) if needle in line.lower()]
        if exact:
            return exact[:max_lines]
    scored: list[tuple[int, int, str]] = []
    for i in query.lines_with_terms(chunk.text):
        overlap = len(query.terms_in(lines[i]))
        if overlap:
            scored.append((overlap, chunk.start_line + i, lines[i]))
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:max_lines]
    return [(line_no, line) for _, line_no, line in sorted(best, key=lambda s: s[1])]


def shown_line_count(chunk: CachedChunk, query: QueryText, max_lines: int) -> int:
    """How many lines the chunk shows: ``len(matching_lines(chunk, query, max_lines))``, or 1 (its
    anchor line) when none match, counted without scoring lines and stopping at ``max_lines``
    (what a search counts for the chunks past its limit)."""
    needle = query.literal.lower()
    low = chunk.text.lower()
    if needle and needle in low:
        # Lowercasing maps no character to or from a newline: the lowered text has the same lines.
        holding = 0
        for line in low.split("\n"):
            if needle in line:
                holding += 1
                if holding >= max_lines:
                    return holding
        if holding:
            return holding
    if not query.term_set:
        return 1
    lines = chunk.text.split("\n")
    matching = 0
    for i in query.lines_with_terms(chunk.text):
        if query.terms_in(lines[i], first_only=True):
            matching += 1
            if matching >= max_lines:
                return matching
    return matching or 1


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
    files_ruled_out: int = 0  # scanned files the linear screen left unmatched by re (no match there)
    candidates: int | None = None  # None: no trigram could be required, every file was scanned
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None


async def regex_search(
    runtime: WorkspaceRuntime,
    scope: Scope,
    compiled: re.Pattern[str],
    *,
    limit: int,
    budget_s: float,
    max_file_bytes: int,
    matchers: MatcherPool | None = None,
) -> RegexOutcome:
    """Lines matching ``compiled`` in scope, in path and line order, at most ``limit``, within
    ``budget_s``, matched by a process of ``matchers`` (default: the shared pool)."""
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
    run = await run_matcher(request, deadline, matchers)
    outcome.files_scanned, outcome.files_ruled_out, outcome.timed_out, outcome.error = run.scanned, run.ruled_out, run.timed_out, run.error
    found = [(paths[index], line, text) for index, lines in run.found for line, text in lines]
    if len(found) > limit:
        found = found[:limit]
        outcome.truncated = True
    wanted: dict[str, list[int]] = {}
    for path, line, _text in found:
        wanted.setdefault(path, []).append(line)
    chunks = runtime.cache.chunks_at(wanted)
    outcome.matches = [LineMatch(path, line, text, chunks.get((path, line))) for path, line, text in found]
    return outcome


async def run_matcher(request: dict[str, Any], deadline: float, pool: MatcherPool | None = None) -> MatchRun:
    """Run one request (``rematch.py``'s protocol) in a warm matching process of ``pool`` (default:
    the shared one); past ``deadline`` the process is killed and the files it answered stay answered."""
    return await (pool or default_pool()).run(request, deadline)
