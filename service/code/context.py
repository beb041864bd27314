"""What a chunk carries besides its code: its path, enclosing class, symbol and docstring as words,
in the text the model embeds and in the weighted terms the lexical index holds.

A chunk's code alone rarely says what it is for: ``def run(self)`` means little until one reads
``service/code/search.py`` and ``WorkspaceSearch``. So each chunk is indexed with its context:

- path words: ``service/code/search.py`` -> ``service code search`` (the extension dropped);
- the enclosing class and the symbol as words: ``Workspaces.parse_searchBody`` -> class
  ``workspaces``, symbol ``parse search body`` (snake_case, camelCase and acronyms split);
- the docstring: the comment run directly above the declaration (``#``, ``//``, ``/* */``,
  ``--``) or, after it, a triple-quoted string; its first paragraph, at most ``DOC_CHARS``.

The embedded text is ``path words: class symbol`` on a first line, then the code: the most
telling words first, as the model reads at most 256 word pieces and cuts the rest, so a long
function loses its tail, never its name. The docstring is not repeated there: the chunk already
opens with it (a comment above the declaration is part of the chunk, a docstring follows the
signature), and repeating it cost Recall@5 on CoSQA's tuning half (0.708 -> 0.692, dense alone).

Lexically, the context is a field of its own, weighted by repetition in the BM25 terms (the store
indexes one text field): a query word in the symbol's name counts as ``NAME_WEIGHT`` occurrences
in the code, one in the docstring as ``DOC_WEIGHT``, so a chunk named or documented for what the
query asks outranks one that merely uses the word. ``RECORD_FORMAT`` names this layout: a
workspace indexed with another is indexed again (``state.Workspaces``), never mixed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache

from service.engine import analyzer

# Bumped whenever what a chunk record holds (embedded text or terms) changes.
RECORD_FORMAT = 2

DOC_CHARS = 300
HEADER_CHARS = 200
# Weights of a term by field, counted as occurrences of a body term (the body is counted once).
PATH_WEIGHT = 1
NAME_WEIGHT = 3
DOC_WEIGHT = 2

_COMMENT_LINE = re.compile(r"^\s*(?:///?!?|#(?![!\[]|include\b|define\b|if|else|endif|pragma|import\b)|--|;+|/\*+|\*+/?)")
_COMMENT_MARKS = re.compile(r"^\s*(?:///?!?|#+|--|;+|/\*+!?|\*+/?)\s?|\s*\*+/\s*$")
_DOCSTRING = re.compile(r"^\s*(?:@\w+\s+)?[rRuUbB]{0,2}(\"\"\"|''')(.*?)(?:\1|\Z)", re.DOTALL | re.MULTILINE)
_DOCSTRING_LINES = 12
_LEADING_LINES = 40
_BLANK_LINE = re.compile(r"\n\s*\n")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class ChunkContext:
    """The words a chunk is known by, besides its code."""

    path: str
    owner: str  # the enclosing class (type, impl, module) of a member, as words
    name: str  # the symbol's own name, as words

    def header(self) -> str:
        """The first line of the embedded text: ``path words: owner name`` (at most ``HEADER_CHARS``)."""
        title = " ".join(part for part in (self.owner, self.name) if part)
        return (f"{self.path}: {title}" if self.path and title else self.path or title)[:HEADER_CHARS]


def words(identifier: str) -> str:
    """An identifier or path as lowercase words: ``parse_searchBody`` -> ``parse search body``."""
    return " ".join(part.lower() for part in analyzer.name_parts(identifier))


@lru_cache(maxsize=4_096)
def path_words(path: str) -> str:
    """``service/code/search.py`` -> ``service code search``: directories, then the file's stem
    (memoized: every chunk of a file asks)."""
    directory, name = posixpath.split(path)
    stem = name.split(".", 1)[0] or name
    return " ".join(filter(None, (words(directory), words(stem))))


def docstring(text: str) -> str:
    """The first paragraph of the chunk's leading comment run, else of a triple-quoted string in
    its first lines (after the declaration), whitespace collapsed and cut at ``DOC_CHARS``."""
    lines = text.split("\n", _LEADING_LINES)[:_LEADING_LINES]  # a first paragraph is never further
    leading: list[str] = []
    for line in lines:
        if not _COMMENT_LINE.match(line):
            break
        leading.append(_COMMENT_MARKS.sub("", line).strip())
    found = "\n".join(leading).strip()
    if not found:
        head = "\n".join(lines[:_DOCSTRING_LINES])
        match = _DOCSTRING.search(head)
        found = match.group(2).strip() if match else ""
    first = _BLANK_LINE.split(found, 1)[0]
    return _SPACES.sub(" ", first).strip()[:DOC_CHARS]


def context_of(path: str, symbol: str | None) -> ChunkContext:
    owner, _, name = (symbol or "").rpartition(".")
    return ChunkContext(path=path_words(path), owner=words(owner), name=words(name))


def embed_text_of(path: str, symbol: str | None, text: str) -> str:
    """What the model embeds for a chunk: its context first, then its code."""
    header = context_of(path, symbol).header()
    return f"{header}\n{text}" if header else text


@lru_cache(maxsize=262_144)
def _identifier_terms(identifier: str) -> str:
    return " ".join(analyzer.identifier_terms(identifier))


def _terms(text: str) -> str:
    """``analyzer.terms_text(text)``, memoized per identifier: code repeats identifiers, and this
    is the slowest step of indexing a large tree (3x faster, identical output)."""
    # analyzer._IDENTIFIER is the analyzer's own tokenizer: the output must stay identical to it.
    # findall and map keep the loop in C (half the time of a generator over match objects).
    return " ".join(filter(None, map(_identifier_terms, analyzer._IDENTIFIER.findall(text))))


def chunk_terms(path: str, symbol: str | None, text: str) -> str:
    """The chunk's BM25 terms, each field repeated by its weight: the code once; the symbol's own
    name ``NAME_WEIGHT`` times and its enclosing class ``NAME_WEIGHT - 1`` times in all (the code
    holds the name once already, rarely the class); the docstring ``DOC_WEIGHT`` times in all (the
    code holds it once); the path ``PATH_WEIGHT`` times."""
    owner, _, name = (symbol or "").rpartition(".")
    fields = ((_terms(text), 1), (_terms(name), NAME_WEIGHT - 1), (_terms(owner), NAME_WEIGHT - 1), (_terms(docstring(text)), DOC_WEIGHT - 1), (_path_terms(path), PATH_WEIGHT))
    return " ".join(terms for terms, times in fields if times > 0 and terms for _ in range(times))


@lru_cache(maxsize=4_096)
def _path_terms(path: str) -> str:
    return _terms(path_words(path))
