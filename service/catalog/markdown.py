"""Markdown for entity detail: heading slugs, tables of contents, ``#slug`` sections, ``#L165`` lines, budgets.

Guides and package files are opened by fragment: ``guide:{id}#{slug}`` returns one
heading's section, ``#L165`` one line with context, ``#L165-L180`` a range. A missing heading or
line raises ``FragmentNotFound`` instead of falling back to the whole document, and a document
over the response budget is answered by its table of contents, never cut mid-document.

Slugs follow GitHub's anchors (lowercase, punctuation dropped, each space a ``-``, duplicates
``-1``, ``-2``) except that ``.`` survives (``guide:package_subscriptions#repo.pushed`` opens the ``repo.pushed``
heading). Line numbers are 1-based and count ``\\n``-separated lines, as editors and ``grep -n`` do.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass

from service.errors import FragmentNotFound

__all__ = [
    "DEFAULT_BUDGET_CHARS",
    "FragmentNotFound",
    "Heading",
    "collapse_whitespace",
    "fit_or_toc",
    "heading_text",
    "headings",
    "line_range",
    "own_sections",
    "parse_line_fragment",
    "section",
    "slugify",
    "split_lines",
    "table_of_contents",
]

# The entity detail budget when the caller gives no maxResponseSize (the search response budget).
DEFAULT_BUDGET_CHARS = 24_000

# ATX heading: up to 3 spaces, 1-6 '#', then a space or end; an optional closing run of '#'.
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# A paragraph line that a setext underline can turn into a heading (not a list item, quote, table...).
_NOT_PARAGRAPH = re.compile(r"^(?: {4,}|\t| {0,3}(?:[-+*>|#]|\d+[.)])(?:\s|$)| {0,3}<)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_REF_LINK = re.compile(r"!?\[([^\]]*)\]\[[^\]]*\]")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_LINE_FRAGMENT = re.compile(r"^L(\d+)(?:-L(\d+))?$")
# Anything an agent plausibly meant as a line anchor: uppercase L, digits, then nothing or a '-...'.
_LINE_LIKE = re.compile(r"^L\d+(?:-.*)?$")
_KEPT_PUNCTUATION = frozenset("-_.")
_TOC_NOTE_LINES = 40  # the size of the example range the contents header proposes


@dataclass(frozen=True)
class Heading:
    """One heading of a markdown document; ``line`` is 1-based, ``slug`` is unique within the document."""

    level: int
    text: str
    slug: str
    line: int


def slugify(heading: str) -> str:
    """The anchor slug of heading text: lowercase, spaces to ``-``, punctuation but ``-``, ``_``, ``.`` dropped.

    Letters, digits and combining marks of any script are kept, so the function is idempotent.
    """
    out: list[str] = []
    for char in heading.strip().lower():
        if char in _KEPT_PUNCTUATION:
            out.append(char)
        elif char == " ":
            out.append("-")
        elif unicodedata.category(char)[0] in "LNM":
            out.append(char)
    return "".join(out)


def heading_text(raw: str) -> str:
    """The visible text of a heading's inline markdown: links, images, code ticks, emphasis and tags unwrapped."""
    text = _LINK.sub(r"\1", raw)
    text = _REF_LINK.sub(r"\1", text)
    text = _HTML_TAG.sub("", text)
    text = text.replace("`", "")
    previous = None
    while previous != text:  # nested emphasis: ***a*** or **_a_**
        previous = text
        text = _EMPHASIS.sub(r"\2", text)
    return " ".join(text.split())


def split_lines(text: str) -> list[str]:
    """The document's lines as editors number them (a final newline does not start a line; ``\\r`` dropped)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class _Slugger:
    """GitHub's duplicate rule: the second ``foo`` is ``foo-1``, and a literal ``foo-1`` heading is skipped over."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def unique(self, base: str) -> str:
        slug = base
        while slug in self._seen:
            self._seen[base] += 1
            slug = f"{base}-{self._seen[base]}"
        self._seen[slug] = 0
        return slug


def headings(md: str) -> list[Heading]:
    """Every ATX and setext heading outside fenced code and front matter, in document order."""
    lines = split_lines(md)
    found: list[Heading] = []
    slugger = _Slugger()
    fence: str | None = None
    start = _front_matter_end(lines)
    for index in range(start, len(lines)):
        line = lines[index]
        fence_match = _FENCE.match(line)
        if fence is not None:
            if fence_match and _closes(fence_match, fence):
                fence = None
            continue
        if fence_match and not (fence_match.group(1)[0] == "`" and "`" in fence_match.group(2)):
            fence = fence_match.group(1)
            continue
        level, raw = _heading_at(lines, index, start)
        if level:
            text = heading_text(raw)
            found.append(
                Heading(
                    level=level, text=text, slug=slugger.unique(slugify(text)), line=_heading_line(index, raw, lines)
                )
            )
    return found


def _closes(match: re.Match[str], fence: str) -> bool:
    """A closing fence uses the opening's character, at least as long, with nothing after it."""
    run = match.group(1)
    return run[0] == fence[0] and len(run) >= len(fence) and not match.group(2).strip()


def _front_matter_end(lines: list[str]) -> int:
    """The index of the first line after YAML front matter (``---`` ... ``---`` at the top), else 0."""
    if not lines or lines[0].strip() != "---":
        return 0
    for index in range(1, len(lines)):
        if lines[index].strip() in {"---", "..."}:
            return index + 1
    return 0


def _heading_at(lines: list[str], index: int, start: int) -> tuple[int, str]:
    """(level, raw text) when line ``index`` is an ATX heading or a setext underline, else (0, "")."""
    atx = _ATX.match(lines[index])
    if atx:
        return len(atx.group(1)), atx.group(2) or ""
    setext = _SETEXT.match(lines[index])
    if setext and index > start and _single_paragraph_line(lines, index - 1, start):
        return (1 if setext.group(1)[0] == "=" else 2), lines[index - 1].strip()
    return 0, ""


def _single_paragraph_line(lines: list[str], index: int, start: int) -> bool:
    """Line ``index`` is a one-line paragraph (what a setext underline below it makes a heading)."""
    line = lines[index]
    if not line.strip() or _NOT_PARAGRAPH.match(line) or _ATX.match(line) or _SETEXT.match(line):
        return False
    return index == start or not lines[index - 1].strip() or _is_block_start(lines[index - 1])


def _is_block_start(line: str) -> bool:
    return bool(_ATX.match(line) or _FENCE.match(line) or _SETEXT.match(line))


def _heading_line(index: int, raw: str, lines: list[str]) -> int:
    """1-based line of a heading: an ATX line itself, or the text line above a setext underline."""
    return index if _SETEXT.match(lines[index]) and not _ATX.match(lines[index]) else index + 1


def _find(md: str, slug: str) -> tuple[Heading, list[Heading]]:
    found = headings(md)
    for candidate in (slug, slug.lower(), slugify(slug)):
        for heading in found:
            if heading.slug == candidate:
                return heading, found
    raise FragmentNotFound(_missing_slug_message(slug, [h.slug for h in found]))


def _missing_slug_message(slug: str, available: list[str]) -> str:
    if not available:
        return f"heading #{slug} not found: the document has no headings; open lines with #L1-L{_TOC_NOTE_LINES}"
    close = difflib.get_close_matches(slug.lower(), available, n=5, cutoff=0.5)
    sample = close + [s for s in available if s not in close][: max(0, 5 - len(close))]
    more = f" (and {len(available) - len(sample)} more)" if len(available) > len(sample) else ""
    return f"heading #{slug} not found; available headings include: {', '.join('#' + s for s in sample)}{more}"


def own_sections(md: str) -> list[tuple[Heading, int]]:
    """Each heading with the length of its own text: its line up to the next heading of any level
    (what remains to read once its subsections are listed as contents)."""
    lines = split_lines(md)
    found = headings(md)
    sized: list[tuple[Heading, int]] = []
    for position, heading in enumerate(found):
        end = found[position + 1].line - 1 if position + 1 < len(found) else len(lines)
        sized.append((heading, len("\n".join(lines[heading.line - 1 : end]).rstrip())))
    return sized


def section(md: str, slug: str) -> str:
    """The heading ``slug`` and its body up to the next heading of the same or a higher level."""
    heading, found = _find(md, slug)
    lines = split_lines(md)
    end = len(lines)
    for later in found:
        if later.line > heading.line and later.level <= heading.level:
            end = later.line - 1
            break
    body = lines[heading.line - 1 : end]
    while body and not body[-1].strip():
        body.pop()
    return "\n".join(body)


def section_lines(md: str, slug: str) -> tuple[int, int]:
    """The 1-based (first, last) line of the section ``slug``, for callers that want its position."""
    heading, _ = _find(md, slug)
    return heading.line, heading.line + len(split_lines(section(md, slug))) - 1


def parse_line_fragment(fragment: str) -> tuple[int, int] | None:
    """``L165`` -> (165, 165), ``L165-L180`` -> (165, 180); None when not a line anchor (``l10`` is a slug).

    Raises ValueError for an anchor that is meant as lines but cannot be: ``L0``, ``L10-L5``, ``L10-5``.
    """
    if not _LINE_LIKE.match(fragment):
        return None
    match = _LINE_FRAGMENT.match(fragment)
    if not match:
        raise ValueError(f"malformed line anchor #{fragment}: use #L165 for one line or #L165-L180 for a range")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if first < 1 or last < 1:
        raise ValueError(f"malformed line anchor #{fragment}: lines are numbered from 1 (#L1)")
    if last < first:
        raise ValueError(f"malformed line anchor #{fragment}: the range ends before it starts (use #L{last}-L{first})")
    return first, last


def line_range(text: str, fragment: str, *, context: int = 5, max_chars: int | None = None) -> str:
    """The lines a ``L165`` / ``L165-L180`` fragment names, each prefixed ``L{n}: ``.

    A single line comes with ``context`` lines either side; a range is exact, its end clamped to
    the last line. A start past the end raises FragmentNotFound. With ``max_chars`` the output is
    cut at a whole line and ends with a note naming the lines left out.
    """
    span = parse_line_fragment(fragment)
    if span is None:
        raise ValueError(f"#{fragment} is not a line anchor (expected L165 or L165-L180)")
    lines = split_lines(text)
    first, last = span
    if first > len(lines):
        raise FragmentNotFound(
            f"line {first} is past the end: the file has {len(lines)} lines (#L1-L{max(len(lines), 1)})"
        )
    if first == last:
        first, last = max(1, first - context), min(len(lines), last + context)
    last = min(last, len(lines))
    out: list[str] = []
    used = 0
    for number in range(first, last + 1):
        row = f"L{number}: {lines[number - 1]}"
        if max_chars is not None and out and used + len(row) + 1 > max_chars:
            out.append(f"… lines {number}-{last} left out (open #L{number}-L{last})")
            break
        out.append(row)
        used += len(row) + 1
    return "\n".join(out)


def table_of_contents(md: str, ref: str, *, max_level: int = 6) -> str:
    """A compact contents list: each heading with its ready-to-copy ``{ref}#{slug}`` and line."""
    lines = split_lines(md)
    found = [h for h in headings(md) if h.level <= max_level]
    header = f"Contents of `{ref}` ({len(lines)} lines). Open a section by its ref, or lines with `{ref}#L1-L{_TOC_NOTE_LINES}`."
    if not found:
        return f"`{ref}` has {len(lines)} lines and no headings. Open lines with `{ref}#L1-L{_TOC_NOTE_LINES}`."
    top = min(h.level for h in found)
    rows = [f"{'  ' * (h.level - top)}- {h.text or '(untitled)'} `{ref}#{h.slug}` L{h.line}" for h in found]
    return "\n".join([header, *rows])


def fit_or_toc(md: str, budget_chars: int, ref: str) -> tuple[str, bool]:
    """The whole document when it fits ``budget_chars``, else its table of contents (is_toc True).

    A contents list that itself exceeds the budget drops its deepest levels first, then lists as
    many headings as fit and says how many more there are. The document is never cut.
    """
    if len(md) <= budget_chars:
        return md, False
    deepest = max((h.level for h in headings(md)), default=1)
    for max_level in range(deepest, 0, -1):
        toc = table_of_contents(md, ref, max_level=max_level)
        if len(toc) <= budget_chars:
            return toc, True
    return _cut_rows(table_of_contents(md, ref, max_level=1), budget_chars), True


def _cut_rows(toc: str, budget_chars: int) -> str:
    rows = toc.split("\n")
    kept: list[str] = []
    used = 0
    for index, row in enumerate(rows):
        note = f"… {len(rows) - index} more headings"
        if used + len(row) + 1 + len(note) > budget_chars and kept:
            kept.append(note)
            break
        kept.append(row)
        used += len(row) + 1
    return "\n".join(kept)


def collapse_whitespace(text: str, limit: int) -> str:
    """``text`` on one line (runs of whitespace become one space), at most ``limit`` characters, ``…`` when cut."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    return collapsed[: limit - 1].rstrip() + "…"
