"""What a regex requires of a text: the literals every match holds, read from ``re``'s own parse
tree, and that requirement over the lines a chunk holds.

Requirements are what the trigram index (``trigram.py``) can check: a literal of 3 characters or
more, all of, or any of. Literals are case-insensitive, as the index is.

A regex match may cross chunk boundaries, so a requirement on a file is stated over lines: each
required literal is cut at its newlines into line pieces, and a piece holding a non-blank character
lies on a non-blank line, which lies whole inside exactly one chunk (the chunker's invariant).
Pieces of blank lines require nothing.

The same literals, case kept, make a matching process's scan plan (:func:`scan_plan`): a file
holding none of them has no match, and when no match can hold a newline only the lines holding
one are matched.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from re import _parser as sre_parse  # type: ignore[attr-defined]  # sre_parse warns on import
from typing import Any, TypeAlias

MIN_LITERAL_CHARS = 3
MAX_EXACT_STRINGS = 64  # alternatives expanded before a regex piece counts as "unknown"
MAX_CLASS_CHARS = 8  # [abc] is expanded; [a-z] is not


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[Requirement, ...]


# A condition on the text: it contains this literal (str), all of, or any of. None: no condition.
Requirement: TypeAlias = str | AllOf | AnyOf


def required_literals(pattern: str, *, ignore_case: bool = False, fold: bool = True, min_chars: int = MIN_LITERAL_CHARS) -> Requirement | None:
    """A condition of literals (``min_chars`` or more: 3 for trigrams) that every text matching
    ``pattern`` satisfies, or None when none can be stated. Literals are case-insensitive, as the
    index is; with ``fold=False`` they keep their case and hold exactly (a letter ``re`` matches
    ignoring case is then unknown)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # FutureWarning marks a pattern regex may read differently
            parsed = sre_parse.parse(pattern)
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError):
        return None
    flags = parsed.state.flags | (re.IGNORECASE if ignore_case else 0)
    token = _MIN_CHARS.set(max(min_chars, 1))
    try:
        return _Extractor(fold).sequence(list(parsed), flags).required
    finally:
        _MIN_CHARS.reset(token)


# The shortest literal the extraction running in this context keeps (``required_literals``'s ``min_chars``).
_MIN_CHARS: ContextVar[int] = ContextVar("min_literal_chars", default=MIN_LITERAL_CHARS)


@dataclass(frozen=True, slots=True)
class ScanPlan:
    """How a matching process can skip text: every match of the pattern holds one of ``literals``
    (found ignoring case, by ``re``'s own folding, when ``ignore_case``), and with ``single_line``
    no match holds a newline, so only the lines holding one of them can hold a match."""

    literals: tuple[str, ...]
    ignore_case: bool
    single_line: bool

    def as_dict(self) -> dict[str, Any]:
        return {"literals": list(self.literals), "ignore_case": self.ignore_case, "single_line": self.single_line}


@lru_cache(maxsize=256)
def scan_plan(pattern: str, flags: int) -> ScanPlan | None:
    """The scan plan of ``pattern`` compiled with ``flags`` (``re`` flags), or None when no literal
    is required of its matches. Without ``re.IGNORECASE`` the literals keep their case."""
    ignore_case = bool(flags & re.IGNORECASE)
    requirement = required_literals(pattern, ignore_case=ignore_case, fold=ignore_case) or required_literals(
        pattern, ignore_case=ignore_case, fold=ignore_case, min_chars=1
    )  # a short literal only when no longer one is required: lines holding it are many
    if requirement is None:
        return None
    try:
        one_line = single_line(pattern, flags)
    except (re.error, RecursionError, OverflowError):
        return None
    return ScanPlan(_alternatives(requirement), ignore_case, one_line)


@lru_cache(maxsize=256)
def single_line(pattern: str, flags: int) -> bool:
    """Whether no match of ``pattern`` compiled with ``flags`` can hold a newline (False when unsure);
    raises ``re.error`` for a pattern that does not parse."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = sre_parse.parse(pattern, flags & ~re.IGNORECASE)
    return not _may_hold_newline(list(parsed), parsed.state.flags)


def _alternatives(requirement: Requirement) -> tuple[str, ...]:
    """Literals of which every text meeting ``requirement`` holds one: of all of, the part with
    the fewest (then longest) alternatives, which is likely the rarest."""
    if isinstance(requirement, str):
        return (requirement,)
    options = [_alternatives(part) for part in requirement.parts]
    if isinstance(requirement, AnyOf):
        return tuple(dict.fromkeys(literal for option in options for literal in option))
    return min(options, key=lambda option: (len(option), -min(len(literal) for literal in option)))


# Which categories (``\d``, ``\s``, ``\w`` and their negations) hold a newline; any other: assumed to.
_CATEGORY_NEWLINE = {
    "CATEGORY_DIGIT": False,
    "CATEGORY_NOT_DIGIT": True,
    "CATEGORY_SPACE": True,
    "CATEGORY_NOT_SPACE": False,
    "CATEGORY_WORD": False,
    "CATEGORY_NOT_WORD": True,
}
_NEWLINE = ord("\n")


def _may_hold_newline(items: list[tuple[Any, Any]], flags: int) -> bool:
    """Whether a match of this parse tree may hold a newline (True when unsure). No character
    folds to a newline, so ignoring case changes nothing here."""
    for op, arg in items:
        name = str(op)
        if name in {"AT", "GROUPREF"}:
            continue  # zero-width, or the text of a group already looked at
        if name == "LITERAL":
            crosses = arg == _NEWLINE
        elif name == "NOT_LITERAL":
            crosses = arg != _NEWLINE
        elif name == "ANY":
            crosses = bool(flags & re.DOTALL)
        elif name == "CATEGORY":
            crosses = _CATEGORY_NEWLINE.get(str(arg), True)
        elif name == "IN":
            crosses = _class_holds_newline(arg)
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, pattern = arg
            crosses = _may_hold_newline(list(pattern), (flags | add_flags) & ~del_flags)
        elif name == "ATOMIC_GROUP":
            crosses = _may_hold_newline(list(arg), flags)
        elif name == "BRANCH":
            crosses = any(_may_hold_newline(list(alternative), flags) for alternative in arg[1])
        elif name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            crosses = _may_hold_newline(list(arg[2]), flags)
        elif name in {"ASSERT", "ASSERT_NOT"}:
            crosses = _may_hold_newline(list(arg[1]), flags)
        elif name == "GROUPREF_EXISTS":
            crosses = any(_may_hold_newline(list(branch), flags) for branch in arg[1:] if branch is not None)
        else:
            crosses = True
        if crosses:
            return True
    return False


def _class_holds_newline(items: list[tuple[Any, Any]]) -> bool:
    negated = holds = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            holds = holds or arg == _NEWLINE
        elif name == "RANGE":
            holds = holds or arg[0] <= _NEWLINE <= arg[1]
        elif name == "CATEGORY":
            holds = holds or _CATEGORY_NEWLINE.get(str(arg), True)
        else:
            return True
    return holds != negated


def line_requirement(requirement: Requirement | None) -> Requirement | None:
    """``requirement`` over the lines a chunk holds: each literal becomes all of its line pieces
    (cut at newlines) that hold a non-blank character and 3 characters or more; a literal with no
    such piece requires nothing. A non-blank line lies whole in one chunk, so a file that holds
    the literal has each piece in one of its chunks."""
    if requirement is None:
        return None
    if isinstance(requirement, str):
        pieces = [piece for piece in requirement.split("\n") if piece.strip() and len(piece) >= MIN_LITERAL_CHARS]
        if not pieces:
            return None
        return pieces[0] if len(pieces) == 1 else AllOf(tuple(dict.fromkeys(pieces)))
    parts = [line_requirement(part) for part in requirement.parts]
    if isinstance(requirement, AnyOf):
        return _or(parts)
    known = [part for part in parts if part is not None]
    combined: Requirement | None = None
    for part in known:
        combined = _and(combined, part)
    return combined


@dataclass(frozen=True, slots=True)
class _Info:
    """What is known of a regex piece, after Russ Cox's trigram query analysis (Google Code
    Search), with small sets: ``exact`` every string it can match (None: too many or unbounded);
    every match starts with a string of ``prefix`` and ends with one of ``suffix`` (``{""}``: no
    knowledge); ``required``: a condition every match satisfies."""

    exact: frozenset[str] | None
    prefix: frozenset[str]
    suffix: frozenset[str]
    required: Requirement | None


_NOTHING_KNOWN = frozenset({""})
_UNKNOWN = _Info(None, _NOTHING_KNOWN, _NOTHING_KNOWN, None)


def _exact(strings: frozenset[str]) -> _Info:
    return _Info(strings, strings, strings, _from_exact(strings))


_EMPTY = _Info(_NOTHING_KNOWN, _NOTHING_KNOWN, _NOTHING_KNOWN, None)  # zero-width: anchors, lookarounds


def _and(left: Requirement | None, right: Requirement | None) -> Requirement | None:
    if left is None or right is None:
        return right if left is None else left
    parts = [*(left.parts if isinstance(left, AllOf) else (left,))]
    parts += right.parts if isinstance(right, AllOf) else (right,)
    return AllOf(tuple(dict.fromkeys(parts)))


def _or(options: Sequence[Requirement | None]) -> Requirement | None:
    parts: list[Requirement] = []
    for option in options:
        if option is None:
            return None  # one alternative without a condition: the alternation has none
        parts += option.parts if isinstance(option, AnyOf) else (option,)
    unique = tuple(dict.fromkeys(parts))
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else AnyOf(unique)


def _from_exact(strings: frozenset[str] | None) -> Requirement | None:
    if strings is None:
        return None
    shortest = _MIN_CHARS.get()
    return _or([s if len(s) >= shortest else None for s in sorted(strings)])


def _product(left: frozenset[str], right: frozenset[str]) -> frozenset[str] | None:
    if len(left) * len(right) > MAX_EXACT_STRINGS:
        return None
    return frozenset(a + b for a in left for b in right)


def _union(sets: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    union: set[str] = set()
    for strings in sets:
        if strings is None:
            return None
        union |= strings
    return frozenset(union) if len(union) <= MAX_EXACT_STRINGS else None


def _concat(left: _Info, right: _Info) -> _Info:
    if left.exact is not None and right.exact is not None:
        joined = _product(left.exact, right.exact)
        if joined is not None:
            return _exact(joined)
    prefix = left.prefix
    if left.exact is not None:
        prefix = _product(left.exact, right.prefix) or left.exact
    suffix = right.suffix
    if right.exact is not None:
        suffix = _product(left.suffix, right.exact) or right.exact
    junction = _from_exact(_product(left.suffix, right.prefix))
    required = _and(_and(left.required, right.required), junction)
    return _Info(None, prefix, suffix, required)


class _Extractor:
    """Walks ``re``'s parse tree bottom-up, combining :class:`_Info`; ``fold``: literals lowercase."""

    def __init__(self, fold: bool = True) -> None:
        self.fold = fold

    def sequence(self, items: list[tuple[Any, Any]], flags: int) -> _Info:
        result = _EMPTY
        for op, arg in items:
            result = _concat(result, self.node(op, arg, flags))
        return result

    def node(self, op: Any, arg: Any, flags: int) -> _Info:
        name = str(op)
        if name == "LITERAL":
            return self.literal(chr(arg), flags)
        if name == "IN":
            return self.char_class(arg, flags)
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, pattern = arg
            return self.sequence(list(pattern), (flags | add_flags) & ~del_flags)
        if name == "ATOMIC_GROUP":
            return self.sequence(list(arg), flags)
        if name == "BRANCH":
            return self.branch(arg[1], flags)
        if name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            low, high, pattern = arg
            return self.repeat(low, high, self.sequence(list(pattern), flags))
        if name in {"AT", "ASSERT", "ASSERT_NOT"}:
            return _EMPTY  # zero-width; a lookaround's own text is not required (conservative)
        return _UNKNOWN  # ANY, NOT_LITERAL, CATEGORY, GROUPREF, GROUPREF_EXISTS, ...

    def literal(self, char: str, flags: int) -> _Info:
        if not self.fold:
            if flags & re.IGNORECASE and (char.isalpha() or not char.isascii()):
                return _UNKNOWN  # a letter matched ignoring case has more than one spelling
            return _exact(frozenset({char}))
        if char.isascii():
            return _exact(frozenset({char.lower()}))  # the index is lowercase anyway
        if flags & re.IGNORECASE:
            return _UNKNOWN  # non-ASCII case equivalences (µ/μ) that folding may not share
        return _exact(frozenset({char}))

    def char_class(self, items: list[tuple[Any, Any]], flags: int) -> _Info:
        chars: set[str] = set()
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                chars.add(chr(arg))
            elif name == "RANGE" and arg[1] - arg[0] < MAX_CLASS_CHARS:
                chars.update(chr(code) for code in range(arg[0], arg[1] + 1))
            else:
                return _UNKNOWN  # negation, \d-like categories, wide ranges
        if len(chars) > MAX_CLASS_CHARS:
            return _UNKNOWN
        union = _union(self.literal(char, flags).exact for char in chars)
        return _UNKNOWN if union is None else _exact(union)

    def branch(self, alternatives: list[Any], flags: int) -> _Info:
        infos = [self.sequence(list(alternative), flags) for alternative in alternatives]
        exact = _union(info.exact for info in infos)
        if exact is not None:
            return _exact(exact)
        prefix = _union(info.prefix for info in infos) or _NOTHING_KNOWN
        suffix = _union(info.suffix for info in infos) or _NOTHING_KNOWN
        return _Info(None, prefix, suffix, _or([info.required for info in infos]))

    def repeat(self, low: int, high: int, inner: _Info) -> _Info:
        if low == 0:
            if high == 1 and inner.exact is not None:
                return _exact(inner.exact | _NOTHING_KNOWN)  # x? keeps both spellings exact
            return _EMPTY if high == 0 else _UNKNOWN
        # n >= low copies: the first `low` of them and the last `low` of them are each a run.
        power = self._power(inner.exact, low)
        if power is not None and high == low:
            return _exact(power)
        if power is None:
            return _Info(None, inner.prefix, inner.suffix, inner.required)
        return _Info(None, power, power, _from_exact(power))

    @staticmethod
    def _power(strings: frozenset[str] | None, count: int) -> frozenset[str] | None:
        if strings is None or count > MAX_EXACT_STRINGS:
            return None
        result: frozenset[str] | None = _NOTHING_KNOWN
        for _ in range(count):
            if result is None:
                return None
            result = _product(result, strings)
        return result
