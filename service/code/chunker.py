"""Chunking source files at declaration boundaries, with stable boundaries and content hashes.

How a file is cut:
- The file's language comes from its extension; tree-sitter (the official grammar wheels) finds
  the top-level declarations: functions, classes, methods, types, impl blocks, modules. Each
  declaration chunk starts at its contiguous comments directly above (no blank line between) and
  includes its decorators, attributes and annotations.
- A container (class, interface, trait, impl, module, namespace) longer than
  ``MAX_UNIT_LINES`` is split into its members, recursively: a header chunk (everything before the
  first member), one chunk per member, and chunks for the code between members. A closing line
  alone (``}``, ``};``, ``end``) joins the chunk above it instead of standing alone.
- Any other declaration longer than ``MAX_UNIT_LINES`` is cut into windows (same kind and symbol).
- Lines outside declarations (imports, module-level statements) become ``preamble`` chunks before
  the first declaration and ``gap`` chunks after it; a file with no declarations, in an unknown
  language, or that fails to parse becomes ``window`` chunks. A declaration whose subtree holds a
  parse error is treated as gap code, so a syntax error stays local.
- Windows never overlap and hold at most ``WINDOW_LINES`` lines; a window ends at the last blank
  line of its second half when there is one, so its boundaries follow the text rather than fixed
  offsets and an insertion disturbs only the windows up to the next shared cut.

Every non-blank line belongs to exactly one chunk; chunks start and end on non-blank lines. The
content hash covers the chunk text only, so editing one function changes only that chunk's hash.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from tree_sitter import Node

from service.code.languages import ChunkKind, LanguageSpec, language_for_path, parser_for

logger = logging.getLogger(__name__)

WINDOW_LINES = 40
MAX_UNIT_LINES = 120
HASH_HEX_CHARS = 32
MAX_SYMBOL_CHARS = 200

# A line that only closes a block: braces, brackets, parens, an optional ; or , and Ruby's end.
_CLOSING_LINE = re.compile(r"^\s*(?:[}\])]+\s*[;,]?|end)\s*(?:(?://|#).*)?$")


# Declarations that are split into their members when too long; functions are cut into windows.
_TYPE_KINDS = frozenset({ChunkKind.CLASS, ChunkKind.TYPE, ChunkKind.IMPL})
_CONTAINERS = _TYPE_KINDS | {ChunkKind.MODULE}


@dataclass(frozen=True, slots=True)
class Chunk:
    """A run of whole lines of one file; lines are 1-based and ``end_line`` is inclusive."""

    path: str
    start_line: int
    end_line: int
    text: str
    kind: ChunkKind
    symbol: str | None
    content_hash: str


@dataclass(frozen=True, slots=True)
class _Unit:
    """A declaration found in the tree: 0-based rows, attached comments included."""

    first_row: int
    last_row: int
    kind: ChunkKind
    symbol: str | None
    node: Node


def content_hash(text: str) -> str:
    """The chunk hash: the first 32 hex digits of the SHA-256 of the text."""
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return digest[:HASH_HEX_CHARS]


def chunk_file(path: str, text: str) -> list[Chunk]:
    """Cut one file's text into chunks (see the module docstring for the rules)."""
    lines = text.split("\n")  # tree-sitter counts rows by "\n" only; splitlines() would not agree
    spec = language_for_path(path)
    builder = _ChunkBuilder(path, lines, spec)
    units = _top_level_units(spec, text) if spec is not None else []
    if units:
        builder.emit_region(0, len(lines) - 1, units, ChunkKind.GAP, None, top_level=True)
    else:
        builder.emit_windows(0, len(lines) - 1, ChunkKind.WINDOW, None)
    return builder.chunks


# --- finding declarations -------------------------------------------------------------------


def _top_level_units(spec: LanguageSpec, text: str) -> list[_Unit]:
    try:
        tree = parser_for(spec).parse(text.encode("utf-8", errors="surrogatepass"))
    except (ValueError, RuntimeError):
        logger.warning("tree-sitter parse failed", extra={"language": spec.name}, exc_info=True)
        return []
    return _units(tree.root_node.named_children, spec, container=None)


def _units(siblings: Sequence[Node], spec: LanguageSpec, container: _Unit | None) -> list[_Unit]:
    """Declarations among sibling nodes, each widened to the comment run directly above it."""
    units: list[_Unit] = []
    comment_rows: tuple[int, int] | None = None  # the current run of attached comments
    code_last_row = -1  # last row of the previous non-comment sibling
    for node in _flatten(siblings, spec):
        first, last = node.start_point.row, _last_row(node)
        if node.type in spec.comments:
            comment_rows = _extend_comment_run(comment_rows, first, last, code_last_row)
            continue
        found = _declaration(node, spec)
        if found is not None:
            start = first
            if comment_rows is not None and comment_rows[1] >= first - 1:
                start = comment_rows[0]
            units.append(_make_unit(start, last, found[0], found[1], container))
        comment_rows = None
        code_last_row = last
    return _merge_overlapping(units)


def _extend_comment_run(
    run: tuple[int, int] | None, first: int, last: int, code_last_row: int
) -> tuple[int, int] | None:
    if first <= code_last_row:
        return None  # a trailing comment on a code line belongs to that code
    if run is not None and first <= run[1] + 1:
        return (run[0], max(run[1], last))
    return (first, last)


def _flatten(nodes: Iterable[Node], spec: LanguageSpec) -> Iterator[Node]:
    """Siblings with transparent wrappers (``#ifdef``, ``extern "C"``) replaced by their children."""
    for node in nodes:
        if node.type in spec.transparent:
            yield from _flatten(node.named_children, spec)
        else:
            yield node


def _declaration(node: Node, spec: LanguageSpec) -> tuple[Node, ChunkKind] | None:
    """The declaration node and its kind, looking through wrappers (decorators, ``export``)."""
    if node.has_error or node.is_missing:
        return None
    if node.type in spec.wrappers:
        for child in node.named_children:
            found = _declaration(child, spec)
            if found is not None:
                return found
        return None
    kind = spec.declarations.get(node.type)
    if kind is None and node.type in spec.variable_declarations:
        kind = _function_valued_kind(node, spec)
    return (node, kind) if kind is not None else None


def _function_valued_kind(node: Node, spec: LanguageSpec) -> ChunkKind | None:
    """``const f = () => ...`` declares a function in JavaScript and TypeScript."""
    for declarator in node.named_children:
        value = declarator.child_by_field_name("value")
        if value is not None and value.type in spec.function_values:
            return spec.function_values[value.type]
    return None


def _make_unit(first: int, last: int, node: Node, kind: ChunkKind, container: _Unit | None) -> _Unit:
    if container is not None and container.kind in _TYPE_KINDS and kind is ChunkKind.FUNCTION:
        kind = ChunkKind.METHOD  # a function in a namespace or module stays a function
    name = _symbol(node)
    if container is not None and container.symbol and name is not None:
        name = f"{container.symbol}.{name}"
    return _Unit(first, last, kind, name, node)


def _merge_overlapping(units: list[_Unit]) -> list[_Unit]:
    """Two declarations sharing a line become one unit, so that chunks never share a line."""
    merged: list[_Unit] = []
    for unit in units:
        if merged and unit.first_row <= merged[-1].last_row:
            previous = merged[-1]
            last = max(previous.last_row, unit.last_row)
            merged[-1] = _Unit(previous.first_row, last, previous.kind, previous.symbol, previous.node)
        else:
            merged.append(unit)
    return merged


def _member_units(unit: _Unit, spec: LanguageSpec) -> list[_Unit]:
    """Members of a container; the body's children are taken beside the container's own children
    because some grammars (Ruby) hang the comment above the first member outside the body."""
    body = unit.node.child_by_field_name("body")
    if body is None:
        return []
    siblings: list[Node] = []
    for child in unit.node.named_children:
        if child == body:
            siblings.extend(body.named_children)
        else:
            siblings.append(child)
    return _units(siblings, spec, container=unit)


def _last_row(node: Node) -> int:
    """The last row holding the node's text: a node that ends at column 0 ends on the row above."""
    end = node.end_point
    if end.column == 0 and end.row > node.start_point.row:
        return end.row - 1
    return end.row


def _symbol(node: Node) -> str | None:
    name_node = _name_node(node)
    if name_node is None or name_node.text is None:
        return None
    name = " ".join(name_node.text.decode("utf-8", errors="replace").split())
    receiver = _go_receiver_type(node)
    if receiver:
        name = f"{receiver}.{name}"
    return name[:MAX_SYMBOL_CHARS] or None


def _name_node(node: Node) -> Node | None:
    named = node.child_by_field_name("name")
    if named is not None:
        return named
    declarator = node.child_by_field_name("declarator")
    if declarator is not None:
        # C and C++: int *(*f)(void) nests declarators; the innermost one is the name.
        while (inner := declarator.child_by_field_name("declarator")) is not None:
            declarator = inner
        return declarator
    implemented = node.child_by_field_name("type")  # Rust: impl Trait for Type
    if implemented is not None:
        return implemented
    for child in node.named_children:  # Go type (...) groups, JS const f = ...
        named = child.child_by_field_name("name")
        if named is not None:
            return named
    return None


def _go_receiver_type(node: Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None or node.type != "method_declaration" or receiver.text is None:
        return None
    for parameter in receiver.named_children:
        type_node = parameter.child_by_field_name("type")
        if type_node is not None and type_node.text is not None:
            text = type_node.text.decode("utf-8", errors="replace")
            return text.lstrip("*").split("[", 1)[0].strip() or None
    return None


# --- emitting chunks ----------------------------------------------------------------------


class _ChunkBuilder:
    def __init__(self, path: str, lines: list[str], spec: LanguageSpec | None) -> None:
        self.path = path
        self.lines = lines
        self.spec = spec
        self.chunks: list[Chunk] = []

    def emit_region(
        self,
        first: int,
        last: int,
        units: list[_Unit],
        gap_kind: ChunkKind,
        gap_symbol: str | None,
        *,
        top_level: bool = False,
    ) -> None:
        """Rows ``first..last``: the units as declarations, the rows between them as gap code."""
        cursor = first
        for index, unit in enumerate(units):
            kind = ChunkKind.PREAMBLE if top_level and index == 0 else gap_kind
            self.emit_gap(cursor, unit.first_row - 1, kind, gap_symbol)
            self.emit_unit(unit)
            cursor = unit.last_row + 1
        self.emit_gap(cursor, last, gap_kind, gap_symbol)

    def emit_unit(self, unit: _Unit) -> None:
        if unit.last_row - unit.first_row + 1 <= MAX_UNIT_LINES:
            self.add(unit.first_row, unit.last_row, unit.kind, unit.symbol)
            return
        members = []
        if unit.kind in _CONTAINERS and self.spec is not None:
            members = _member_units(unit, self.spec)
        if members:
            self.emit_region(unit.first_row, unit.last_row, members, unit.kind, unit.symbol)
        else:
            self.emit_windows(unit.first_row, unit.last_row, unit.kind, unit.symbol)

    def emit_gap(self, first: int, last: int, kind: ChunkKind, symbol: str | None) -> None:
        first, last = self._trim(first, last)
        if first > last:
            return
        if self.chunks and self._only_closing_lines(first, last):
            self._extend_last_chunk(last)
            return
        self.emit_windows(first, last, kind, symbol)

    def emit_windows(self, first: int, last: int, kind: ChunkKind, symbol: str | None) -> None:
        for start, end in _window_bounds(self.lines, first, last):
            self.add(start, end, kind, symbol)

    def add(self, first: int, last: int, kind: ChunkKind, symbol: str | None) -> None:
        first, last = self._trim(first, last)
        if first > last:
            return
        text = "\n".join(self.lines[first : last + 1])
        self.chunks.append(Chunk(self.path, first + 1, last + 1, text, kind, symbol, content_hash(text)))

    def _extend_last_chunk(self, last: int) -> None:
        previous = self.chunks.pop()
        self.add(previous.start_line - 1, last, previous.kind, previous.symbol)

    def _only_closing_lines(self, first: int, last: int) -> bool:
        rows = self.lines[first : last + 1]
        return all(not line.strip() or _CLOSING_LINE.match(line) for line in rows)

    def _trim(self, first: int, last: int) -> tuple[int, int]:
        last = min(last, len(self.lines) - 1)
        while first <= last and not self.lines[first].strip():
            first += 1
        while last >= first and not self.lines[last].strip():
            last -= 1
        return first, last


def _window_bounds(lines: Sequence[str], first: int, last: int) -> Iterator[tuple[int, int]]:
    """Non-overlapping windows of at most ``WINDOW_LINES`` rows over ``first..last``."""
    start = first
    while start <= last:
        if not lines[start].strip():
            start += 1
            continue
        end = min(start + WINDOW_LINES - 1, last)
        if end < last:
            end = _cut_at_blank_line(lines, start, end)
        yield start, end
        start = end + 1


def _cut_at_blank_line(lines: Sequence[str], start: int, end: int) -> int:
    """End the window just before the last blank line of its second half, if it has one."""
    for row in range(end, start + WINDOW_LINES // 2, -1):
        if not lines[row].strip():
            return row - 1
    return end
