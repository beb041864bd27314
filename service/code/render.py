"""Rendering a code search: text-first output lines, structured results, and ANSI colors for a terminal.

Every result line of ``output`` is ``path:line:snippet``, in every mode, so a caller parses one
format. In hybrid mode the pass that found each result (``lexical``, ``semantic`` or ``merged``)
is each result's ``source`` and the answer's ``meta.source_mix``, not a prefix on the line that
would break that format; a terminal (the CLI) shows it as a colored tag. Notices follow the
results as ``notice: ...`` lines, and also come back in ``notices``; the rest (mode used, source
mix, match counts) is structured metadata.
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


def lexical_lines(hits: Sequence[ChunkHit], query: QueryText, limit: int) -> tuple[list[ResultLine], int]:
    """Lexical mode: up to ``MAX_LINES_PER_CHUNK`` matching lines per chunk, best chunks first,
    at most ``limit``; and how many lines all the hits hold (what a larger limit would show)."""
    lines: list[ResultLine] = []
    available = 0
    for hit in hits:
        found = matching_lines(hit.chunk, query, MAX_LINES_PER_CHUNK) or [anchor_line(hit.chunk)]
        hit.lines = found
        available += len(found)
        for line, text in found[: max(limit - len(lines), 0)]:
            lines.append(_line(hit, line, text, "lexical"))
    return lines, available


def hybrid_lines(hits: Sequence[ChunkHit], query: QueryText, limit: int) -> tuple[list[ResultLine], int]:
    """Hybrid mode: one line per chunk, its best lexical line or else the line that names it; and
    how many chunks were found (what a larger limit would show)."""
    lines: list[ResultLine] = []
    for hit in hits[:limit]:
        found = matching_lines(hit.chunk, query, 1) or [anchor_line(hit.chunk)]
        hit.lines = found
        line, text = found[0]
        lines.append(_line(hit, line, text, hit.source))
    return lines, len(hits)


def regex_lines(matches: Sequence[LineMatch]) -> list[ResultLine]:
    """One result per matching line; a line outside every chunk (a blank line) is its own span."""
    lines = []
    for match in matches:
        category, weight = path_category(match.path)
        chunk = match.chunk
        start, end, symbol, kind = (chunk.start_line, chunk.end_line, chunk.symbol, chunk.kind) if chunk else (match.line, match.line, None, "line")
        lines.append(ResultLine(match.path, match.line, snippet(match.text), "lexical", 1.0, start, end, symbol, kind, category, weight))
    return lines


def output_text(lines: Sequence[ResultLine], *, notices: Sequence[str]) -> str:
    """``path:line:snippet`` per result (every mode), ``no matches`` when none, then ``notice:`` lines."""
    rows = [f"{r.path}:{r.line}:{r.snippet}" for r in lines]
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
