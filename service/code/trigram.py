"""Literal and regex code search: the trigram prefilter index, regex literal extraction, and
compiling a user's pattern (ARCHITECTURE.md section 2).

The index is a node-local tantivy index per workspace, derived from the chunk cache: one document
per chunk with its ``chunk_id``, its ``path`` and its text in an ngram(3, 3) field. Its analyzer
lowercases and folds to ASCII, so case-insensitive matches that Python's ``re`` accepts
(``ı``/``i``, ``ſ``/``s``, ``K``/``k``) still share trigrams. The prefilter only ever answers a
superset: a regex is then matched on the candidate files' whole text (``rematch.py``); when no
trigram can be required the answer is ``None`` and the caller scans every file in scope.

A regex match may cross chunk boundaries, so regex candidates are *files*: each required literal
is cut at its newlines into line pieces, and a piece holding a non-blank character lies on a
non-blank line, which lies whole inside exactly one chunk (the chunker's invariant). A file is a
candidate when the requirement holds over the pieces its chunks hold (``AllOf`` may be met by
different chunks of the file). Pieces of blank lines require nothing.

Regex syntax and semantics are Python's ``re``, exactly: :func:`regex_compile` compiles with
``re``, and literal extraction reads ``re``'s own parse tree.
"""

from __future__ import annotations

import logging
import re
import shutil
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from re import _parser as sre_parse  # type: ignore[attr-defined]  # sre_parse warns on import
from typing import Any, TypeAlias

import tantivy

logger = logging.getLogger(__name__)

TRIGRAM_TOKENIZER = "trigram"
WRITER_HEAP_BYTES = 32_000_000
MIN_LITERAL_CHARS = 3
MAX_EXACT_STRINGS = 64  # alternatives expanded before a regex piece counts as "unknown"
MAX_CLASS_CHARS = 8  # [abc] is expanded; [a-z] is not
MAX_FIXED_EXPANSION = 100_000  # characters a pattern's repeat counts may spell out

_ID, _PATH, _GRAMS = "chunk_id", "path", "grams"


class IndexLocked(RuntimeError):
    """Another writer (this process or another) holds the index directory."""


# --- the index --------------------------------------------------------------------------------


@cache
def trigram_analyzer() -> tantivy.TextAnalyzer:
    """The analyzer of the ngram field, also used to turn query literals into terms."""
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(3, 3, False))
    return builder.filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.ascii_fold()).build()


def trigrams(literal: str) -> list[str]:
    """The distinct index terms a text containing ``literal`` must hold."""
    return list(dict.fromkeys(trigram_analyzer().analyze(literal)))


@cache
def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_ID, stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(_PATH, stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(_GRAMS, tokenizer_name=TRIGRAM_TOKENIZER, index_option="basic")
    return builder.build()


class TrigramIndex:
    """One workspace's trigram index; holds the only writer of its directory until closed."""

    def __init__(self, directory: Path, index: tantivy.Index, writer: tantivy.IndexWriter | None) -> None:
        self.directory = directory
        self._index = index
        self._writer: tantivy.IndexWriter | None = writer

    @classmethod
    def open(cls, directory: Path, *, writable: bool = True) -> TrigramIndex:
        """Open or create the index; a directory holding another schema is rebuilt (the index is
        derived data). Raises :class:`IndexLocked` while another writer holds it. A read-only
        index (``writable=False``) takes no lock: it sees another writer's commits after
        :meth:`reload`."""
        directory.mkdir(parents=True, exist_ok=True)
        index = _open_or_recreate(directory)
        # The custom tokenizer is not stored with the index: without it writes and queries fail.
        index.register_tokenizer(TRIGRAM_TOKENIZER, trigram_analyzer())
        if not writable:
            return cls(directory, index, None)
        try:
            writer = index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=1)
        except ValueError as exc:
            if "LockBusy" in str(exc):
                raise IndexLocked(f"trigram index {directory} is open in another writer") from exc
            raise
        return cls(directory, index, writer)

    def close(self) -> None:
        """Drop the writer, which releases the directory lock; uncommitted changes are lost."""
        if self._writer is not None:
            self._writer.rollback()
            self._writer = None

    def __enter__(self) -> TrigramIndex:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def num_docs(self) -> int:
        return int(self._index.searcher().num_docs)

    def add(self, chunks: Iterable[tuple[str, str, str]]) -> int:
        """Add ``(chunk_id, path, text)`` documents; visible after :meth:`commit`."""
        writer = self._require_writer()
        added = 0
        for chunk_id, path, text in chunks:
            writer.add_document(tantivy.Document(**{_ID: [chunk_id], _PATH: [path], _GRAMS: [text]}))
            added += 1
        return added

    def delete_paths(self, paths: Iterable[str]) -> None:
        """Delete every chunk of these files; visible after :meth:`commit`."""
        writer = self._require_writer()
        for path in paths:
            writer.delete_documents_by_term(_PATH, path)

    def commit(self) -> None:
        self._require_writer().commit()
        self._index.reload()  # otherwise readers see the commit only after tantivy's own delay

    def reload(self) -> None:
        """See the latest commit (of this or another writer) in the next search."""
        self._index.reload()

    def candidates_literal(self, literal: str, limit: int) -> list[str] | None:
        """Chunks holding every trigram of ``literal``, at most ``limit`` (a full list means it
        may be truncated); None when the literal is too short to prefilter."""
        if len(literal) < MIN_LITERAL_CHARS:
            return None
        return self._search(literal, limit)

    def candidates_regex(self, pattern: str, limit: int, *, ignore_case: bool = False) -> list[str] | None:
        """Chunks that may hold a match of ``pattern`` that lies inside one chunk; None when no
        trigram can be required. Regex search uses :meth:`candidate_paths` (matches may cross chunks)."""
        requirement = required_literals(pattern, ignore_case=ignore_case)
        return None if requirement is None else self._search(requirement, limit)

    def candidate_paths(self, pattern: str, limit: int, *, ignore_case: bool = False) -> set[str] | None:
        """Files whose whole text may match ``pattern`` (a superset); None when nothing can be
        required, or a literal is in more than ``limit`` chunks (then every file is scanned)."""
        requirement = line_requirement(required_literals(pattern, ignore_case=ignore_case))
        return None if requirement is None else self._paths(requirement, limit)

    def _paths(self, requirement: Requirement, limit: int) -> set[str] | None:
        """Files meeting ``requirement`` over their chunks; None: unknown (too many hits)."""
        if isinstance(requirement, str):
            query = tantivy.Query.const_score_query(_to_query(requirement), 1.0)
            searcher = self._index.searcher()
            hits = searcher.search(query, limit, count=False).hits
            if len(hits) >= limit:
                return None
            return {str(searcher.doc(address).get_first(_PATH)) for _score, address in hits}
        parts = [self._paths(part, limit) for part in requirement.parts]
        known = [part for part in parts if part is not None]
        if isinstance(requirement, AnyOf):
            return None if len(known) < len(parts) else set().union(*known)
        return set.intersection(*known) if known else None

    def _search(self, requirement: Requirement, limit: int) -> list[str]:
        query = tantivy.Query.const_score_query(_to_query(requirement), 1.0)
        searcher = self._index.searcher()
        hits = searcher.search(query, limit, count=False).hits
        return [str(searcher.doc(address).get_first(_ID)) for _score, address in hits]

    def _require_writer(self) -> tantivy.IndexWriter:
        if self._writer is None:
            raise RuntimeError(f"trigram index {self.directory} is closed")
        return self._writer


def _open_or_recreate(directory: Path) -> tantivy.Index:
    try:
        return tantivy.Index(_schema(), path=str(directory), reuse=True)
    except ValueError:
        if not (directory / "meta.json").exists():
            raise
        logger.warning("rebuilding trigram index with a stale schema", extra={"directory": str(directory)})
        shutil.rmtree(directory)
        directory.mkdir(parents=True)
        return tantivy.Index(_schema(), path=str(directory), reuse=True)


def _to_query(requirement: Requirement) -> tantivy.Query:
    if isinstance(requirement, str):
        terms = trigrams(requirement)
        clauses = [(tantivy.Occur.Must, _term(term)) for term in terms]
    else:
        occur = tantivy.Occur.Must if isinstance(requirement, AllOf) else tantivy.Occur.Should
        clauses = [(occur, _to_query(part)) for part in requirement.parts]
    return tantivy.Query.boolean_query(clauses)


def _term(term: str) -> tantivy.Query:
    return tantivy.Query.term_query(_schema(), _GRAMS, term, index_option="basic")


# --- required literals of a regex -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[Requirement, ...]


# A condition on the text: it contains this literal (str), all of, or any of. None: no condition.
Requirement: TypeAlias = str | AllOf | AnyOf


def required_literals(pattern: str, *, ignore_case: bool = False) -> Requirement | None:
    """A condition of literals (3 chars or more) that every text matching ``pattern`` satisfies,
    or None when none can be stated. Literals are case-insensitive, as the index is."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # FutureWarning marks a pattern regex may read differently
            parsed = sre_parse.parse(pattern)
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError):
        return None
    flags = parsed.state.flags | (re.IGNORECASE if ignore_case else 0)
    return _Extractor().sequence(list(parsed), flags).required


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
    return _or([s if len(s) >= MIN_LITERAL_CHARS else None for s in sorted(strings)])


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
    """Walks ``re``'s parse tree bottom-up, combining :class:`_Info`."""

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


# --- compiling -------------------------------------------------------------------------------


def regex_compile(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """Compile a user's pattern with Python's ``re`` (multi-line: ``^`` and ``$`` at every line).

    Raises ValueError whose message names the error and its position. A pattern whose fixed repeat
    counts multiply out past ``MAX_FIXED_EXPANSION`` characters is refused too: no code search
    needs one, and each of its match attempts could run that long."""
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarning on "[[" is not the user's error
            compiled = re.compile(pattern, flags)
            expansion = _fixed_expansion(list(sre_parse.parse(pattern, flags)))
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ValueError(f"invalid regex{where}: {exc.msg}") from None
    except (RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regex: {exc}") from None
    if expansion > MAX_FIXED_EXPANSION:
        raise ValueError(
            f"invalid regex: its fixed repeat counts multiply out to {expansion:,} characters (the limit is "
            f"{MAX_FIXED_EXPANSION:,}); use an open range like {{1,}} or smaller counts"
        )
    return compiled


def _fixed_expansion(items: list[tuple[Any, Any]]) -> int:
    """How many characters a pattern's repeat counts spell out (``(?:a{9999}){9999}``: 99,980,001).
    Each repeat counts its lower bound (at least one) times its body; alternatives add up."""
    size = 0
    for op, arg in items:
        name = str(op)
        if name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            low, _high, body = arg
            size += max(low, 1) * _fixed_expansion(list(body))
        elif name == "SUBPATTERN":
            size += _fixed_expansion(list(arg[3]))
        elif name == "ATOMIC_GROUP":
            size += _fixed_expansion(list(arg))
        elif name == "BRANCH":
            size += sum(_fixed_expansion(list(alternative)) for alternative in arg[1])
        elif name in {"ASSERT", "ASSERT_NOT"}:
            size += _fixed_expansion(list(arg[1]))
        elif name == "GROUPREF_EXISTS":
            size += sum(_fixed_expansion(list(branch)) for branch in arg[1:] if branch is not None)
        else:
            size += 1
    return size
