"""Rendering a code search: text-first output lines, structured results, and ANSI colors for a terminal.

Seed 002: lexical mode returns ``path:line:snippet``; hybrid mode prefixes each result with
``[lexical]``, ``[semantic]`` or ``[merged]``. Notices follow the results as ``notice: ...``
lines, and also come back in ``notices``; the rest (mode used, source mix, match counts) is
structured metadata.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.code.lexical import ChunkHit, LineMatch, QueryText, anchor_line, matching_lines
from service.code.ranking import path_category

MAX_SNIPPET_CHARS = 240
MAX_LINES_PER_CHUNK = 3


@dataclass(frozen=True)
class ResultLine:
    """One result: a line of a chunk, what found it and how it scored."""

    path: str
    line: int
    snippet: str
    source: str
    score: float
    start_line: int
    end_line: int
    symbol: str | None
    kind: str
    category: str
    weight: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "snippet": self.snippet,
            "source": self.source,
            "score": round(self.score, 6),
            "start_line": self.start_line,
            "end_line": self.end_line,
            "symbol": self.symbol,
            "kind": self.kind,
            "adjustment": {"category": self.category, "weight": self.weight},
        }


def snippet(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= MAX_SNIPPET_CHARS else text[: MAX_SNIPPET_CHARS - 1] + "…"


def _line(hit: ChunkHit, line: int, text: str, source: str) -> ResultLine:
    chunk = hit.chunk
    return ResultLine(chunk.path, line, snippet(text), source, hit.score, chunk.start_line, chunk.end_line, chunk.symbol, chunk.kind, hit.category, hit.weight)


def lexical_lines(hits: Sequence[ChunkHit], query: QueryText, limit: int) -> list[ResultLine]:
    """Lexical mode: up to ``MAX_LINES_PER_CHUNK`` matching lines per chunk, best chunks first."""
    lines: list[ResultLine] = []
    for hit in hits:
        found = matching_lines(hit.chunk, query, MAX_LINES_PER_CHUNK) or [anchor_line(hit.chunk)]
        hit.lines = found
        for line, text in found:
            lines.append(_line(hit, line, text, "lexical"))
            if len(lines) >= limit:
                return lines
    return lines


def hybrid_lines(hits: Sequence[ChunkHit], query: QueryText, limit: int) -> list[ResultLine]:
    """Hybrid mode: one line per chunk, its best lexical line or else the line that names it."""
    lines: list[ResultLine] = []
    for hit in hits[:limit]:
        found = matching_lines(hit.chunk, query, 1) or [anchor_line(hit.chunk)]
        hit.lines = found
        line, text = found[0]
        lines.append(_line(hit, line, text, hit.source))
    return lines


def regex_lines(matches: Sequence[LineMatch]) -> list[ResultLine]:
    lines = []
    for match in matches:
        category, weight = path_category(match.chunk.path)
        chunk = match.chunk
        lines.append(ResultLine(chunk.path, match.line, snippet(match.text), "lexical", 1.0, chunk.start_line, chunk.end_line, chunk.symbol, chunk.kind, category, weight))
    return lines


def output_text(lines: Sequence[ResultLine], *, tagged: bool, notices: Sequence[str]) -> str:
    rows = [f"[{r.source}] {r.path}:{r.line}:{r.snippet}" if tagged else f"{r.path}:{r.line}:{r.snippet}" for r in lines]
    if not rows:
        rows.append("no matches")
    rows.extend(f"notice: {notice}" for notice in notices)
    return "\n".join(rows)


# ---- a terminal ------------------------------------------------------------------------------

_RESET = "\x1b[0m"
_PATH = "\x1b[35m"  # grep's colors: file names magenta, line numbers green, separators cyan, matches bold red
_LINE = "\x1b[32m"
_SEP = "\x1b[36m"
_MATCH = "\x1b[1;31m"
_TAG = {"lexical": "\x1b[34m", "semantic": "\x1b[33m", "merged": "\x1b[1;32m"}
_NOTICE = "\x1b[33m"


def colored_output(results: Sequence[dict[str, Any]], notices: Sequence[str], *, tagged: bool, highlight: re.Pattern[str] | None) -> str:
    """The output lines with grep-like colors, for a terminal."""
    rows = []
    for result in results:
        text = result["snippet"]
        if highlight is not None:
            text = highlight.sub(lambda m: f"{_MATCH}{m.group(0)}{_RESET}", text)
        row = f"{_PATH}{result['path']}{_RESET}{_SEP}:{_RESET}{_LINE}{result['line']}{_RESET}{_SEP}:{_RESET}{text}"
        if tagged:
            row = f"{_TAG.get(result['source'], '')}[{result['source']}]{_RESET} {row}"
        rows.append(row)
    if not rows:
        rows.append("no matches")
    rows.extend(f"{_NOTICE}notice: {notice}{_RESET}" for notice in notices)
    return "\n".join(rows)
