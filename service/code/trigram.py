"""The workspace's lexical index: a node-local tantivy index per workspace that ranks its chunks by
BM25 and proposes the candidates (chunks, or files) that may match a literal or a regex.

The index is derived from the chunk cache: one document per chunk with its ``chunk_id``, its
``path``, its ancestor directories (``dirs``, so a directory scope is one term), its BM25 terms
(the analyzer's output, weighted by repetition: ``context.chunk_terms``) in a whitespace-tokenized
field with term frequencies, its text in an ngram(3, 3) field, and its first line and symbol
stored (a literal's candidates come with their places: ``literal_places``). Lexical search reads this index
and the cache alone; the store's points of a workspace's chunks carry no BM25 terms.

The trigram field's analyzer lowercases and folds to ASCII, so case-insensitive matches that Python's ``re`` accepts (``ı``/``i``, ``ſ``/``s``, ``K``/``k``) still
share trigrams. The prefilter only ever answers a superset: a regex is then matched on the
candidate files' whole text (``rematch.py``); when no trigram can be required (``prefilter.py``)
the answer is ``None`` and the caller scans every file in scope.

A regex match may cross chunk boundaries, so regex candidates are *files*: a file is a candidate
when the requirement over lines (``line_requirement``) holds over the pieces its chunks hold
(``AllOf`` may be met by different chunks of the file). A match that cannot hold a newline lies
in one chunk, so for such a pattern the requirement is asked of each chunk whole.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

import tantivy

from service.code.model import dirs_of
from service.code.prefilter import (
    MIN_LITERAL_CHARS,
    AllOf,
    AnyOf,
    Requirement,
    line_requirement,
    required_literals,
    single_line,
)

logger = logging.getLogger(__name__)

TRIGRAM_TOKENIZER = "trigram"
TERMS_TOKENIZER = "terms"
WRITER_HEAP_BYTES = 32_000_000

_ID, _PATH, _DIRS, _TERMS, _GRAMS = "chunk_id", "path", "dirs", "terms", "grams"
# Stored beside the key and path, so a literal's candidates come with their places (ranking orders
# them by path, line and declared name) without a read of the chunk cache for each.
_START, _SYMBOL = "start_line", "symbol"


class Place(NamedTuple):
    """Where a chunk is: its file, its first line, the symbol it declares (None: none)."""

    path: str
    start_line: int
    symbol: str | None


@dataclass(frozen=True)
class Within:
    """Where a ranked search looks: only ``paths`` (a glob's files), the file ``path``, or the
    files under ``directory``; all unset: the whole workspace."""

    directory: str = ""
    path: str = ""
    paths: tuple[str, ...] | None = None


# How many of a query's distinct terms ``ranked`` counts in each hit (the rest still rank).
COUNTED_TERMS = 12


@dataclass(frozen=True)
class RankedChunk:
    """A chunk found by BM25: its key, its score, and how many of the query's first
    ``COUNTED_TERMS`` distinct terms it holds."""

    key: str
    score: float
    terms_held: int


class IndexLocked(RuntimeError):
    """Another writer (this process or another) holds the index directory."""


@cache
def trigram_analyzer() -> tantivy.TextAnalyzer:
    """The analyzer of the ngram field, also used to turn query literals into terms."""
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(3, 3, False))
    return builder.filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.ascii_fold()).build()


def trigrams(literal: str) -> list[str]:
    """The distinct index terms a text containing ``literal`` must hold."""
    return list(dict.fromkeys(trigram_analyzer().analyze(literal)))


@cache
def terms_analyzer() -> tantivy.TextAnalyzer:
    """The analyzer of the BM25 field: the terms are analyzer output already, joined by spaces."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


@cache
def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_ID, stored=True, tokenizer_name="raw", index_option="basic")
    # A fast field too: a regex's candidate files are the distinct paths of the chunks that match,
    # counted in the index (a terms aggregation) rather than read from every chunk's stored fields.
    builder.add_text_field(_PATH, stored=True, fast=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(_DIRS, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(_TERMS, tokenizer_name=TERMS_TOKENIZER, index_option="freq")
    builder.add_text_field(_GRAMS, tokenizer_name=TRIGRAM_TOKENIZER, index_option="basic")
    builder.add_integer_field(_START, stored=True, indexed=False)
    builder.add_text_field(_SYMBOL, stored=True, tokenizer_name="raw", index_option="basic")
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
        # The custom tokenizers are not stored with the index: without them writes and queries fail.
        index.register_tokenizer(TRIGRAM_TOKENIZER, trigram_analyzer())
        index.register_tokenizer(TERMS_TOKENIZER, terms_analyzer())
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

    def add(self, chunks: Iterable[tuple[str, str, str, str, int, str | None]]) -> int:
        """Add ``(chunk_id, path, text, terms, start_line, symbol)`` documents; visible after :meth:`commit`."""
        writer = self._require_writer()
        added = 0
        for chunk_id, path, text, terms, start_line, symbol in chunks:
            fields: dict[str, list[str] | list[int]] = {_ID: [chunk_id], _PATH: [path], _DIRS: dirs_of(path), _TERMS: [terms], _GRAMS: [text], _START: [start_line]}
            if symbol:
                fields[_SYMBOL] = [symbol]
            writer.add_document(tantivy.Document(**fields))
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

    def ranked(self, terms: Sequence[str], limit: int, within: Within | None = None) -> list[RankedChunk]:
        """The ``limit`` chunks (in ``within``) that best match ``terms`` by BM25 (a chunk holding
        none of them is not found), best first, each with how many of the first
        ``COUNTED_TERMS`` distinct terms it holds (``RankedChunk.terms_held``).

        Counting the terms held costs one small search per term, over the hits alone (a term
        query joined with the hits' ids, about 1 ms each at 272k chunks): no chunk's terms are read
        or stored, and a long query counts its first terms only."""
        wanted = list(dict.fromkeys(term for term in terms if term))
        if not wanted or limit <= 0:
            return []
        ranking = tantivy.Query.boolean_query([(tantivy.Occur.Should, _bm25_term(term)) for term in wanted])
        if within is not None and (scope := _within_query(within)) is not None:
            ranking = tantivy.Query.boolean_query([(tantivy.Occur.Must, ranking), (tantivy.Occur.Must, tantivy.Query.const_score_query(scope, 0.0))])
        searcher = self._index.searcher()
        hits = searcher.search(ranking, limit, count=False).hits
        if not hits:
            return []
        keys = [str(searcher.doc(address).get_first(_ID)) for _score, address in hits]
        held = dict.fromkeys(keys, 1)  # one term: every hit holds it
        if len(wanted) > 1:
            held = dict.fromkeys(keys, 0)
            among = tantivy.Query.term_set_query(_schema(), _ID, keys)
            for term in wanted[:COUNTED_TERMS]:
                query = tantivy.Query.boolean_query([(tantivy.Occur.Must, _bm25_term(term)), (tantivy.Occur.Must, among)])
                for _score, address in searcher.search(query, len(keys), count=False).hits:
                    key = str(searcher.doc(address).get_first(_ID))
                    held[key] = held.get(key, 0) + 1
        return [RankedChunk(key, float(score), held[key]) for key, (score, _address) in zip(keys, hits, strict=True)]

    def literal_places(self, literal: str, limit: int) -> dict[str, Place] | None:
        """Chunks holding every trigram of ``literal``, at most ``limit`` (a full answer may be
        truncated), each with its place as the index stores it; None when the literal is too
        short to prefilter."""
        if len(literal) < MIN_LITERAL_CHARS:
            return None
        query = tantivy.Query.const_score_query(_to_query(literal), 1.0)
        searcher = self._index.searcher()
        found: dict[str, Place] = {}
        for _score, address in searcher.search(query, limit, count=False).hits:
            doc = searcher.doc(address)
            symbol = doc.get_first(_SYMBOL)
            found[str(doc.get_first(_ID))] = Place(str(doc.get_first(_PATH)), int(doc.get_first(_START) or 0), None if symbol is None else str(symbol))
        return found

    def candidates_regex(self, pattern: str, limit: int, *, ignore_case: bool = False) -> list[str] | None:
        """Chunks that may hold a match of ``pattern`` that lies inside one chunk; None when no
        trigram can be required. Regex search uses :meth:`candidate_paths` (matches may cross chunks)."""
        requirement = required_literals(pattern, ignore_case=ignore_case)
        return None if requirement is None else self._search(requirement, limit)

    def candidate_paths(self, pattern: str, limit: int, *, ignore_case: bool = False) -> set[str] | None:
        """Files whose whole text may match ``pattern`` (a superset); None when nothing can be
        required, or the chunks to read are ``limit`` or more (then every file is scanned).

        A match that holds no newline lies in one line, and a line in one chunk: then the chunks
        holding all the required literals together are asked for at once (one query, far fewer
        chunks than those of each literal). A match that may span lines can have its literals in
        different chunks of a file, so each literal's files are found alone and combined."""
        requirement = line_requirement(required_literals(pattern, ignore_case=ignore_case))
        if requirement is None:
            return None
        if single_line(pattern, re.IGNORECASE if ignore_case else 0):
            return self._chunk_paths(requirement, limit)
        return self._paths(requirement, limit)

    def _paths(self, requirement: Requirement, limit: int) -> set[str] | None:
        """Files meeting ``requirement`` over their chunks; None: unknown (too many hits)."""
        if isinstance(requirement, str):
            return self._chunk_paths(requirement, limit)
        parts = [self._paths(part, limit) for part in requirement.parts]
        known = [part for part in parts if part is not None]
        if isinstance(requirement, AnyOf):
            return None if len(known) < len(parts) else set().union(*known)
        return set.intersection(*known) if known else None

    def _chunk_paths(self, requirement: Requirement, limit: int) -> set[str] | None:
        """The files of the chunks meeting ``requirement`` (a literal: every one of its trigrams);
        None when ``limit`` chunks or more do. One terms aggregation over the path fast field: each
        chunk has one path, so the buckets' counts add up to the chunks found."""
        query = tantivy.Query.const_score_query(_to_query(requirement), 1.0)
        aggregation = {_PATH: {"terms": {"field": _PATH, "size": limit, "segment_size": limit}}}
        result = self._index.searcher().aggregate(query, aggregation)[_PATH]
        buckets = result.get("buckets", [])
        chunks = sum(int(bucket["doc_count"]) for bucket in buckets) + int(result.get("sum_other_doc_count", 0))
        if chunks >= limit or result.get("sum_other_doc_count", 0):
            return None
        return {str(bucket["key"]) for bucket in buckets}

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


def _bm25_term(term: str) -> tantivy.Query:
    return tantivy.Query.term_query(_schema(), _TERMS, term, index_option="freq")


def _within_query(within: Within) -> tantivy.Query | None:
    if within.paths is not None:
        return tantivy.Query.term_set_query(_schema(), _PATH, list(within.paths))
    if within.path:
        return tantivy.Query.term_query(_schema(), _PATH, within.path, index_option="basic")
    if within.directory:
        return tantivy.Query.term_query(_schema(), _DIRS, within.directory, index_option="basic")
    return None
