"""The regex matching process: Python ``re`` over whole files, in a process the service can kill.

Regex search means Python's ``re``, exactly. ``re`` cannot be interrupted and holds the GIL while
it matches, so a catastrophic pattern (``(a+)+$``) would stall the server for as long as it
backtracks. The service therefore runs every regex match in a separate process (the standard
library and, optionally, RE2; started as ``python -I -S rematch.py [--site DIR]``) and kills it when the search's time budget runs out,
keeping the files answered before. A process serves one request after another (``matchers.py``
keeps a few warm); it exits at the end of its input, or after ``IDLE_EXIT_S`` without a request.

Protocol: one JSON request per line on stdin::

    {"pattern": str, "flags": int, "root": str, "max_bytes": int, "max_matches": int,
     "alarm_s"?: int, "plan"?: {"literals": [str, ...], "ignore_case": bool, "single_line": bool},
     "screen"?: bool, "report_ruled"?: bool, "files": [{"path": str, "text"?: str}, ...]}

then JSON lines on stdout, files in order: ``{"i": index, "lines": [[line, text], ...]}`` for a
file with matching lines, ``{"i": index, "skipped": true}`` for a file that could not be read,
``{"i": index}`` now and then to say the files up to ``index`` are done (a file without a match
has no line of its own), and ``{"done": true, "scanned": n, "ruled_out": m}`` last (or
``{"error": message}``; ``ruled_out``: files of the ``n`` that the linear screen below passed over,
and with ``report_ruled`` also ``"ruled": [index, ...]``, which ones).
A file's line is written as soon as it is matched, so a process killed mid-request has told
what it found before. A file without ``text`` is read from ``root``: a regular file whose real
path lies inside the root, at most ``max_bytes``, without a NUL byte in its first 8 KiB (the
walker's own rules), decoded as UTF-8 with replacement, as the indexer reads it.

``plan`` (``prefilter.ScanPlan``) says which literals every match holds: a file holding none is
skipped, and when no match holds a newline only the lines holding one are matched (:class:`Guide`).

Before ``re`` reads a file, a linear-time automaton (RE2, when the ``re2`` module is importable:
the service passes its directory as ``--site DIR``) screens the file with a translation of the
pattern that matches wherever the pattern can (:class:`LinearScreen`): a file it rules out is
never matched by ``re``, so a pattern no literal narrows costs one automaton pass per
file instead of ``re`` trying every position. Without RE2 (or with ``"screen": false``) every file
goes to ``re``.

``alarm_s`` arms ``SIGALRM`` (no handler: the kernel ends the process) for the request: should
the service die while a match runs, the match still ends then.

The lines of a file are those on which a match starts, one entry per line as ``grep -n`` prints
them, numbered by ``\\n`` like the chunker: exactly the lines holding a position ``p`` where
``pattern.match(text, p)`` succeeds (``$`` at a line's end counts on that line).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import select
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

BINARY_PROBE_BYTES = 8192
MAX_LINE_CHARS = 4096  # a matched line comes back cut to this (the answer's snippet is shorter still)
MEMORY_LIMIT_BYTES = 2 << 30  # a pattern that makes re allocate without bound fails here, not on the host
NICENESS = 10
PROGRESS_EVERY_S = 0.005  # how often files without a match are reported done
IDLE_EXIT_S = 300.0  # a process without a request this long ends itself
GUIDE_SPAN = 512  # characters after a line holding a literal that a guided scan searches in the same call
LINEAR_MAX_MEM = 32 << 20  # an automaton's memory (RE2's default is 8 MiB; past it RE2 runs slower, never wrong)
LINEAR_SCREENS = 8  # patterns whose screens a process keeps (two automata each, within the address-space limit)
RE2_MAX_REPEAT = 1000  # RE2 refuses counted repeats above this


class Guide:
    """Where matches can be, from a request's ``plan`` (``prefilter.ScanPlan``): every match holds
    one of ``literals``, found with ``str.find`` (literals of exact case: each text is read once
    per literal) or one ``re`` of them (ignoring case by ``re``'s own folding when
    ``ignore_case``); with ``single_line`` no match holds a newline."""

    def __init__(self, literals: list[str], ignore_case: bool, single_line: bool) -> None:
        self.single_line = single_line
        self._literals = None if ignore_case else list(dict.fromkeys(literals))
        alternation = "|".join(re.escape(literal) for literal in sorted(set(literals), key=len, reverse=True))
        self._any = re.compile(alternation, re.IGNORECASE if ignore_case else 0)

    @classmethod
    def of(cls, plan: dict[str, Any] | None) -> Guide | None:
        if not plan or not plan.get("literals"):
            return None
        return cls([str(literal) for literal in plan["literals"]], bool(plan.get("ignore_case")), bool(plan.get("single_line")))

    def finder(self, text: str) -> Callable[[int], int]:
        """For ``text``: where the next literal starts at or after a position (-1: none does)."""
        literals = self._literals
        if literals is None:
            search = self._any.search

            def find_any(position: int) -> int:
                found = search(text, position)
                return -1 if found is None else found.start()

            return find_any
        if len(literals) == 1:
            literal = literals[0]
            return lambda position: text.find(literal, position)
        upcoming = [text.find(literal) for literal in literals]  # each literal's next start (-1: no more)

        def find_first(position: int) -> int:
            first = -1
            for index, start in enumerate(upcoming):
                if 0 <= start < position:
                    start = upcoming[index] = text.find(literals[index], position)
                if start >= 0 and (first < 0 or start < first):
                    first = start
            return first

        return find_first


class LinearScreen:
    """Rules out files a pattern cannot match, in linear time: an RE2 automaton over a file's text
    that matches wherever the pattern can.

    The translation walks ``re``'s own parse of the pattern, and writes every single-character item
    (a literal, a class, ``.``, ``\\w``...) as the exact set of code points ``re`` itself matches
    with it under the pattern's flags (case folding and Unicode classes included, found by running
    ``re`` over every code point once: :func:`_members`). What RE2 lacks is widened, never
    narrowed: lookarounds are dropped, a back reference matches any text, atomic groups and
    possessive repeats backtrack, a conditional takes either branch, ``$`` outside MULTILINE
    matches before any newline, and a repeat count over RE2's limit becomes unbounded. RE2's
    ``\\b`` knows ASCII words only, so it is kept for ASCII text (where the two agree) and dropped
    for other text (a second automaton). A file either rules out therefore has no match.

    ASCII bytes and valid UTF-8 are searched as they are; other bytes are decoded as the indexer
    decodes them (an undecodable byte is U+FFFD) and that text searched as UTF-8 (:func:`text_of`).

    A pattern whose top level has a literal after its start (``^\\s*#\\s*\\w+:...``) is first
    searched from that literal on (the lead: a match of the whole holds one of the rest, so the
    lead is wider still), which RE2 runs as a scan for the literal's byte: over 182 MB of Python,
    34 ms against 279 for the whole. Only a file the lead keeps is searched with the whole, so the
    files kept are the same."""

    def __init__(self, ascii_text: Any, other_text: Any, lead: tuple[Any, Any] | None = None) -> None:
        self._ascii = ascii_text
        self._other = other_text
        self._lead = lead

    @property
    def lead(self) -> str | None:
        """The lead's RE2 source for ASCII text, or None where every file is searched with the whole."""
        return None if self._lead is None else str(self._lead[0].pattern)

    def may_match(self, data: bytes | str) -> bool:
        """False only when the pattern matches nowhere in ``data`` (a file's bytes, or its text)."""
        try:
            if data.isascii():
                if self._lead is not None and self._lead[0].search(data) is None:
                    return False
                return self._ascii.search(data) is not None
            utf8 = text_of(data)[1] if isinstance(data, bytes) else data.encode("utf-8")
        except Exception:  # a text RE2 cannot take (a lone surrogate) rules nothing out
            return True
        return self.may_match_utf8(utf8)

    def may_match_utf8(self, utf8: bytes) -> bool:
        """``may_match`` of a text that is not all ASCII, given as UTF-8 (:func:`text_of`)."""
        try:
            if self._lead is not None and self._lead[1].search(utf8) is None:
                return False
            return self._other.search(utf8) is not None
        except Exception:  # an engine failure rules nothing out
            return True


@functools.lru_cache(maxsize=LINEAR_SCREENS)
def linear_screen(pattern: str, flags: int) -> LinearScreen | None:
    """The screen of ``re.compile(pattern, flags)``, or None without RE2, or when the translation or
    RE2 refuses it (``re`` then reads every file)."""
    engine = _re2()
    if engine is None:
        return None
    try:
        from re import _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern, flags)
        flags |= parsed.state.flags
        options = engine.Options()
        options.never_capture = True
        options.log_errors = False
        options.max_mem = LINEAR_MAX_MEM
        translation = _Translation(parsed.state)
        ascii_text, other_text = translation.automata(engine, options, parsed.data, flags)
        rest = translation.from_first_literal(parsed.data, flags)
        lead = None if rest is None else translation.automata(engine, options, rest, flags)
    except Exception:  # a construct, a size or a class count either side cannot take: no screen
        return None
    return LinearScreen(ascii_text, other_text, lead)


@functools.cache
def _re2() -> Any:
    """The ``re2`` module, or None where it is not installed (or not on this process's path)."""
    try:
        import re2

        return re2
    except ImportError:
        return None


class _Translation:
    """``re``'s parse of one pattern written as RE2 syntax that matches wherever it can (see
    :class:`LinearScreen`)."""

    def __init__(self, state: Any) -> None:
        from re import _constants, _parser  # type: ignore[attr-defined]

        self.state, self.c, self.parser = state, _constants, _parser
        self.enumerated = 0

    def from_first_literal(self, items: Any, flags: int) -> Any | None:
        """The top-level ``items`` from the first literal character on (matched as it is, not
        ignoring case), or None where the pattern starts with it or has none."""
        if flags & re.IGNORECASE:
            return None
        for index, (op, _arg) in enumerate(items):
            if op is self.c.LITERAL:
                return items[index:] if index > 0 else None
        return None

    def automata(self, engine: Any, options: Any, items: Any, flags: int) -> tuple[Any, Any]:
        """``items`` compiled for ASCII text and for other text (the same automaton where the two agree)."""
        ascii_source = self.items(items, flags, ascii_words=True)
        other_source = self.items(items, flags, ascii_words=False)
        ascii_text = engine.compile(ascii_source, options)
        return ascii_text, ascii_text if other_source == ascii_source else engine.compile(other_source, options)

    def items(self, items: Any, flags: int, *, ascii_words: bool) -> str:
        c = self.c
        out: list[str] = []
        for op, arg in items:
            if op in (c.LITERAL, c.NOT_LITERAL, c.IN, c.ANY):
                out.append(_class_source(self.members((op, arg), flags)))
            elif op is c.BRANCH:
                out.append("(?:" + "|".join(self.items(branch, flags, ascii_words=ascii_words) for branch in arg[1]) + ")")
            elif op is c.SUBPATTERN:
                _group, add, remove, body = arg
                out.append("(?:" + self.items(body, (flags | add) & ~remove, ascii_words=ascii_words) + ")")
            elif op is getattr(c, "ATOMIC_GROUP", None):
                out.append("(?:" + self.items(arg, flags, ascii_words=ascii_words) + ")")
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
                low, high, body = arg
                out.append("(?:" + self.items(body, flags, ascii_words=ascii_words) + ")" + _repeat(low, None if high == c.MAXREPEAT else high))
            elif op in (c.ASSERT, c.ASSERT_NOT):
                continue  # a lookaround only narrows where a match may be
            elif op is c.GROUPREF:
                out.append("(?s:.*)")  # whatever the group held
            elif op is c.GROUPREF_EXISTS:
                _group, yes, no = arg
                out.append("(?:" + self.items(yes, flags, ascii_words=ascii_words) + "|" + (self.items(no, flags, ascii_words=ascii_words) if no else "") + ")")
            elif op is c.AT:
                out.append(self.position(arg, flags, ascii_words))
            else:
                raise ValueError(f"no linear translation of {op}")
        return "".join(out)

    def members(self, item: Any, flags: int) -> tuple[tuple[int, int], ...]:
        """The code points one character item matches, as inclusive ranges (surrogates left out)."""
        c = self.c
        op, arg = item
        if not flags & re.IGNORECASE:
            if op is c.LITERAL:
                return _ranges([(arg, arg)])
            if op is c.NOT_LITERAL:
                return _ranges([(0, arg - 1), (arg + 1, MAX_CODE_POINT)])
            if op is c.IN and all(kind in (c.LITERAL, c.RANGE) for kind, _ in arg):
                return _ranges([(value, value) if kind is c.LITERAL else value for kind, value in arg])
        if op is c.ANY:
            return _ranges([(0, MAX_CODE_POINT)] if flags & re.DOTALL else [(0, 9), (11, MAX_CODE_POINT)])
        if self._ascii_only(item):  # ignoring case: only ASCII characters and their few non-ASCII case partners can match
            probe = _probe(self.parser, self.state, item, flags)
            return _ranges([(code, code) for code in (*range(128), *_ascii_case_partners()) if probe.fullmatch(chr(code))])
        key = (repr(item), flags & (re.IGNORECASE | re.ASCII | re.DOTALL))
        found = _ENUMERATED.get(key)
        if found is None:
            self.enumerated += 1
            if self.enumerated > LINEAR_MAX_ENUMERATED:
                raise ValueError("too many distinct character classes to enumerate")
            repeated = self.parser.SubPattern(self.state, [(c.MAX_REPEAT, (1, c.MAXREPEAT, self.parser.SubPattern(self.state, [item])))])
            if len(_ENUMERATED) >= LINEAR_CACHED_CLASSES:
                _ENUMERATED.clear()
            found = _ENUMERATED[key] = _members(_compile_parsed(repeated, flags))
        return found

    def _ascii_only(self, item: Any) -> bool:
        """Whether a literal or a class (not negated, without categories) names ASCII characters alone."""
        c = self.c
        op, arg = item
        if op is c.LITERAL:
            return bool(arg < 128)
        return op is c.IN and all((kind is c.LITERAL and value < 128) or (kind is c.RANGE and value[1] < 128) for kind, value in arg)

    def position(self, at: Any, flags: int, ascii_words: bool) -> str:
        c = self.c
        if at is c.AT_BEGINNING:
            return "(?m:^)" if flags & re.MULTILINE else r"\A"
        if at is c.AT_BEGINNING_STRING:
            return r"\A"
        if at is c.AT_END:
            return "(?m:$)"  # outside MULTILINE re's $ also matches before a last newline: any newline is wider
        if at is c.AT_END_STRING:
            return r"\z"
        if at in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY):
            return (r"\b" if at is c.AT_BOUNDARY else r"\B") if ascii_words else ""
        raise ValueError(f"no linear translation of {at}")


MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
LINEAR_MAX_ENUMERATED = 16  # character classes of one pattern whose members are found by running re over every code point
LINEAR_CACHED_CLASSES = 256  # enumerated classes a process keeps for later patterns
_ENUMERATED: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}


def _members(probe: re.Pattern[str]) -> tuple[tuple[int, int], ...]:
    """The code points ``probe`` (one character item, repeated) matches: ``re`` run once over all of them."""
    ranges = []
    for found in probe.finditer(_code_points()):
        start, end = found.start(), found.end() - 1  # indexes into the text of every code point but surrogates
        if start < _SURROGATES[0] <= end:
            ranges += [(start, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, end + _SURROGATES[1] - _SURROGATES[0] + 1)]
        else:
            shift = 0 if start < _SURROGATES[0] else _SURROGATES[1] - _SURROGATES[0] + 1
            ranges.append((start + shift, end + shift))
    return _ranges(ranges)


def _probe(parser: Any, state: Any, item: Any, flags: int) -> re.Pattern[str]:
    """One character item compiled alone, under the pattern's flags."""
    return _compile_parsed(parser.SubPattern(state, [item]), flags)


def _compile_parsed(parsed: Any, flags: int) -> re.Pattern[str]:
    from re import _compiler  # type: ignore[attr-defined]

    compiled: re.Pattern[str] = _compiler.compile(parsed, flags)
    return compiled


@functools.cache
def _ascii_case_partners() -> tuple[int, ...]:
    """The non-ASCII code points ``re`` matches with some ASCII character when ignoring case (the
    Kelvin sign with k, the long s with s, the dotted and dotless i)."""
    folded = _members(re.compile(r"(?i:[\x00-\x7f])+"))
    return tuple(code for low, high in folded for code in range(max(low, 128), high + 1))


@functools.cache
def _code_points() -> str:
    """Every code point but the surrogates, in order (RE2 searches UTF-8, which has none)."""
    import array

    points = array.array("I", range(_SURROGATES[0])).tobytes() + array.array("I", range(_SURROGATES[1] + 1, MAX_CODE_POINT + 1)).tobytes()
    return points.decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")  # 4x faster than joining chr()s


def _ranges(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Inclusive ranges sorted, merged and clipped, the surrogates cut out."""
    out: list[list[int]] = []
    for low, high in sorted(ranges):
        low, high = max(low, 0), min(high, MAX_CODE_POINT)
        if low > high:
            continue
        if out and low <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], high)
        else:
            out.append([low, high])
    cut: list[tuple[int, int]] = []
    for low, high in out:
        if low < _SURROGATES[0] and high >= _SURROGATES[0]:
            cut.append((low, _SURROGATES[0] - 1))
        if high > _SURROGATES[1] and low <= _SURROGATES[1]:
            cut.append((_SURROGATES[1] + 1, high))
        if high < _SURROGATES[0] or low > _SURROGATES[1]:
            cut.append((low, high))
    return tuple(cut)


def _class_source(ranges: tuple[tuple[int, int], ...]) -> str:
    """An RE2 class of the given code-point ranges (an empty one matches nothing)."""
    if not ranges:
        return r"[^\x00-\x{10ffff}]"
    return "[" + "".join(f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}" for low, high in ranges) + "]"


def _repeat(low: int, high: int | None) -> str:
    """RE2's repeat of ``{low,high}`` (``high`` None: unbounded), widened past RE2's count limit."""
    if high is not None and high > RE2_MAX_REPEAT:
        high = None
    low = min(low, RE2_MAX_REPEAT)
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def line_matches(pattern: re.Pattern[str], text: str, max_matches: int, guide: Guide | None = None) -> list[tuple[int, str]]:
    """Lines of ``text`` where a match of ``pattern`` starts, as (1-based line number, line text),
    at most ``max_matches``, in line order (a match spanning lines counts on its first line).

    With a ``guide``, a text holding none of its literals has no match, and when no match holds a
    newline only the lines holding a literal are matched (``guided_line_matches``): the same lines."""
    if guide is not None:
        if guide.single_line:
            return guided_line_matches(pattern, text, max_matches, guide)
        if guide.finder(text)(0) < 0:
            return []
    matches: list[tuple[int, str]] = []
    position, line_no, counted_to = 0, 1, 0
    while len(matches) < max_matches and position <= len(text):
        found = pattern.search(text, position)
        if found is None:
            break
        start = found.start()
        line_no += text.count("\n", counted_to, start)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        matches.append((line_no, text[line_start:line_end][:MAX_LINE_CHARS]))
        # Continue on the next line: one entry per line, as grep prints.
        position, counted_to = line_end + 1, start
    return matches


def guided_line_matches(pattern: re.Pattern[str], text: str, max_matches: int, guide: Guide, span: int = GUIDE_SPAN) -> list[tuple[int, str]]:
    """``line_matches`` of a pattern none of whose matches holds a newline: a match lies inside
    its line and holds a literal of ``guide``, so the text between a line holding one and the next
    such line is skipped. From each line holding a literal, ``re`` searches that line and the
    lines up to ``span`` characters after it in one call (where such lines are dense, one call per
    block instead of one per line; a match found in the block holds a literal all the same), up to
    and with the block's last newline (``endpos``: nothing a match there reads lies past it; what
    lies before is seen as ever, for ``\\b``, ``^`` and lookbehinds)."""
    matches: list[tuple[int, str]] = []
    position, line_no, counted_to, size = 0, 1, 0, len(text)
    find = guide.finder(text)
    while len(matches) < max_matches and position < size:
        hit = find(position)
        if hit < 0:
            break
        block_start = text.rfind("\n", 0, hit) + 1
        block_end = text.find("\n", min(hit + span, size))
        block_end = size if block_end < 0 else block_end
        found = pattern.search(text, block_start, block_end + 1)
        if found is None or found.start() > block_end:
            position = block_end + 1
            continue
        start = found.start()
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = size if line_end < 0 else line_end
        line_no += text.count("\n", counted_to, line_start)
        counted_to = line_start
        matches.append((line_no, text[line_start:line_end][:MAX_LINE_CHARS]))
        position = line_end + 1
    return matches


def scan_compile(pattern: str, flags: int) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, or a pattern that starts a match on the same lines (the lines
    ``line_matches`` reports: searched from each line's start) but tries fewer positions. A leading
    repeat of one character class or character:

    - without an upper bound, of characters that are never a newline, gets a lookbehind that no
      such character precedes (``(?<![a-z])[a-z]+\\d``): where a match starts inside a run of them,
      one starts at the run's start too (the repeat takes the run's first characters as well), and
      a run never holds a line's start, so the first match from a line's start is the same;
    - is cut into that character and the rest (``[0-9]{4}`` as ``[0-9][0-9]{3}``): the same
      matches, but ``re`` then skips ahead to the characters a match can start with."""
    compiled = re.compile(pattern, flags)
    try:
        from re import _compiler, _constants, _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern, flags)
        op, arg = parsed.data[0]
        if op not in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, getattr(_constants, "POSSESSIVE_REPEAT", None)):
            return compiled
        low, high, body = arg
        if len(body.data) != 1 or body.data[0][0] not in (_constants.IN, _constants.LITERAL, _constants.ANY, _constants.NOT_LITERAL):
            return compiled
        item = body.data[0]
        run_start = high == _constants.MAXREPEAT and _compiler.compile(_parser.SubPattern(parsed.state, [item]), flags).fullmatch("\n") is None
        if low >= 1 and item[0] in (_constants.IN, _constants.LITERAL):
            # The character first (re skips ahead to it), then: not preceded by another (two back).
            rest_high = high if high == _constants.MAXREPEAT else high - 1
            after = [(_constants.ASSERT_NOT, (-1, _parser.SubPattern(parsed.state, [item, item])))] if run_start else []
            parsed.data[0:1] = [item, *after, *([(op, (low - 1, rest_high, body))] if rest_high else [])]
        elif run_start:
            parsed.data[0:0] = [(_constants.ASSERT_NOT, (-1, _parser.SubPattern(parsed.state, [item])))]
        else:
            return compiled
        faster: re.Pattern[str] = _compiler.compile(parsed, flags)
    except Exception:  # an internal of re changed: the plain compile serves
        return compiled
    return faster if faster.groups == compiled.groups and faster.flags == compiled.flags else compiled


class FileReader:
    """Reads workspace files under one root, whose real path is resolved once; each directory's
    real path once per request too (a request lists many files of few directories), from its
    parent's."""

    def __init__(self, root: str, max_bytes: int) -> None:
        self.real_root = os.path.realpath(root)
        self.max_bytes = max_bytes
        self._inside = self.real_root + os.sep
        self._dirs: dict[str, str] = {}

    def read(self, rel_path: str) -> str | None:
        """The text of a workspace file, or None when it is gone, outside the root, too large or binary."""
        data = self.read_bytes(rel_path)
        return None if data is None else decode(data)

    def read_bytes(self, rel_path: str) -> bytes | None:
        """``read``'s file as it is on disk, before decoding."""
        directory, _, name = rel_path.rpartition("/")
        real_dir = self._dirs.get(directory)
        if real_dir is None:
            real_dir = self._real_dir(directory)
        real = os.path.join(real_dir, name)
        if not real.startswith(self._inside) or name in ("", ".", ".."):
            # The directory's real path leaves the root (a link swapped in since the walk), or the
            # name is not a plain one: resolve the whole path as it stands.
            real = os.path.realpath(os.path.join(self.real_root, rel_path))
            if not real.startswith(self._inside):
                return None
        data = self._read_bytes(real)
        if data == errno.ELOOP:
            # The file itself is now a link: read what it points to, if that is inside the root.
            real = os.path.realpath(real)
            data = self._read_bytes(real) if real.startswith(self._inside) else None
        if not isinstance(data, bytes):
            return None
        if len(data) > self.max_bytes or data.find(b"\0", 0, BINARY_PROBE_BYTES) >= 0:
            return None
        return data

    def _real_dir(self, directory: str) -> str:
        """The real path of a directory under the root: its parent's real path and its name, the name
        resolved only where it is a link (one ``lstat`` a directory, not one a path component)."""
        unresolved: list[str] = []
        while directory not in self._dirs:
            if not directory:
                self._dirs[""] = self.real_root
                break
            unresolved.append(directory)
            directory = directory.rpartition("/")[0]
        real = self._dirs[directory]
        for path in reversed(unresolved):
            name = path.rpartition("/")[2]
            if name in ("", ".", ".."):
                real = os.path.realpath(os.path.join(self.real_root, path))
            else:
                real = os.path.join(real, name)
                if os.path.islink(real):
                    real = os.path.realpath(real)
            self._dirs[path] = real
        return real

    def _read_bytes(self, real: str) -> bytes | int | None:
        """The file's bytes; the error number when it cannot be opened (``ELOOP``: it is a link); None
        when it is no regular file, is too large or cannot be read. Safe from several threads."""
        try:
            # O_NONBLOCK: a fifo swapped in since the walk must not block the open. O_NOFOLLOW: a
            # link swapped in for the file is resolved (and checked) first.
            descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            return exc.errno or 0
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_bytes:
                return None
            pieces: list[bytes] = []
            left = self.max_bytes + 1
            while left > 0:
                # Asked for what the file holds (and a byte more, to see it grew): a read of
                # max_bytes would allocate that much for every small file.
                asked = min(left, info.st_size + 1) if not pieces else left
                piece = os.read(descriptor, asked)
                pieces.append(piece)
                left -= len(piece)
                if len(piece) < asked:  # the end of the file
                    break
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        except OSError:
            return None
        finally:
            os.close(descriptor)


def decode(data: bytes) -> str:
    """A file's text as the indexer reads it: UTF-8, an undecodable byte read as U+FFFD."""
    return data.decode("utf-8", errors="replace")


def text_of(data: bytes) -> tuple[str, bytes]:
    """A file's text as ``decode`` reads it, and that text as UTF-8: the bytes themselves where they
    are valid UTF-8 (the common case, which needs no second encoding)."""
    try:
        return data.decode("utf-8"), data
    except UnicodeDecodeError:
        text = decode(data)
        return text, text.encode("utf-8")


def read_text(root: str, rel_path: str, max_bytes: int) -> str | None:
    """The text of a workspace file, or None when it is gone, outside the root, too large or binary."""
    return FileReader(root, max_bytes).read(rel_path)


def serve(request: dict[str, Any], out: IO[str]) -> None:
    """Answer one request (see the module docstring), a line per matched file as it is matched."""
    pattern = scan_compile(request["pattern"], int(request["flags"]))
    guide = Guide.of(request.get("plan"))
    screen = linear_screen(request["pattern"], int(request["flags"])) if request.get("screen", True) else None
    left = int(request["max_matches"])
    reader = FileReader(str(request["root"]), int(request["max_bytes"]))
    scanned = ruled_out = 0
    ruled_indices: list[int] | None = [] if request.get("report_ruled") else None
    reported = time.monotonic()
    files = request["files"] if left > 0 else []
    for index, content, ruled in screened_contents(files, reader, screen):
        scanned = index + 1
        ruled_out += ruled
        if ruled and ruled_indices is not None:
            ruled_indices.append(index)
        if content is None and not ruled:
            out.write(json.dumps({"i": index, "skipped": True}) + "\n")
        else:
            found = [] if content is None else line_matches(pattern, _text(content), left, guide)
            if found:
                left -= len(found)
                out.write(json.dumps({"i": index, "lines": found}) + "\n")
            elif time.monotonic() - reported < PROGRESS_EVERY_S:
                continue
            else:
                out.write(f'{{"i": {index}}}\n')
        out.flush()
        reported = time.monotonic()
        if left <= 0:
            break
    done: dict[str, Any] = {"done": True, "scanned": scanned, "ruled_out": ruled_out}
    if ruled_indices is not None:
        done["ruled"] = ruled_indices
    out.write(json.dumps(done) + "\n")
    out.flush()


def _text(content: str | bytes) -> str:
    return content if isinstance(content, str) else decode(content)


def screened_contents(
    files: list[dict[str, Any]], reader: FileReader, screen: LinearScreen | None
) -> Iterator[tuple[int, str | bytes | None, bool]]:
    """Each file of a request, in order: its index, its content as ``re`` is to read it (None where
    it cannot be read; ASCII bytes as read, other text decoded as re reads it) and whether the
    screen ruled it out (its content then dropped: None)."""
    for index, item in enumerate(files):
        content, utf8 = _read(item, reader)
        if content is None or screen is None:
            yield index, content, False
            continue
        kept = screen.may_match(content) if utf8 is None else screen.may_match_utf8(utf8)
        yield (index, content, False) if kept else (index, None, True)


def _read(item: dict[str, Any], reader: FileReader) -> tuple[str | bytes | None, bytes | None]:
    """A request's file as ``re`` is to read it (its ``text``, else read from the root: ASCII bytes
    as read, other text decoded) and, for text read that is not all ASCII, its UTF-8 for the screen."""
    text: str | None = item.get("text")
    if text is not None:
        return text, None
    data = reader.read_bytes(str(item["path"]))
    if data is None or data.isascii():
        return data, None
    return text_of(data)


def _limit_resources() -> None:
    """Bound memory, and yield the CPU to the server: a hostile pattern burns a core until it is
    killed, and the server's own threads must not wait behind it."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform: the time budget still bounds the process
    with contextlib.suppress(AttributeError, OSError):
        os.nice(NICENESS)


def requests(source: int, idle_exit_s: float) -> Iterator[bytes]:
    """The request lines read from ``source``, until its end or ``idle_exit_s`` without one."""
    pending = bytearray()
    while True:
        end = pending.find(b"\n")
        if end >= 0:
            line = bytes(pending[: end + 1])
            del pending[: end + 1]
            yield line
            continue
        readable, _, _ = select.select([source], [], [], idle_exit_s)
        if not readable:
            return  # idle too long: the pool starts another when it needs one
        data = os.read(source, 1 << 16)
        if not data:
            return
        pending += data


def main() -> int:
    """Serve requests until the end of input (or ``IDLE_EXIT_S`` without one); a request that
    fails ends the process (after its ``error`` line): its state after a ``MemoryError`` is not
    to be trusted."""
    _limit_resources()
    if sys.argv[1:2] == ["--site"] and len(sys.argv) > 2:
        sys.path.append(sys.argv[2])  # where the optional re2 module is installed (this process runs -S)
    alarm = getattr(signal, "alarm", None)
    for line in requests(sys.stdin.fileno(), IDLE_EXIT_S):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if alarm is not None:
                alarm(max(int(request.get("alarm_s", 0)), 0))
            serve(request, sys.stdout)
        except (re.error, ValueError, KeyError, TypeError, MemoryError, RecursionError) as exc:
            sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            sys.stdout.flush()
            return 1
        finally:
            if alarm is not None:
                alarm(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
