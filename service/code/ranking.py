"""Ranking: fusion of the lexical and semantic chunk lists, each weighed by how far it can be
trusted for the query at hand, then the fixed path-aware adjustments (source files above docs,
tests, mocks, generated and vendored code), applied after fusion and shown with each result.

Fusion is reciprocal rank fusion, ``score = sum(weight / (k + rank))`` over the lists a chunk
appears in. It runs here rather than in one engine call because the results must say which pass
found each chunk (``[lexical]``, ``[semantic]``, ``[merged]``), and the lexical list also holds
the literal matches that only the trigram index sees.

Each list's weight follows the query (``Trust``) rather than being fixed per list:
- a lexical hit counts by the share of the query's terms it holds (BM25 ranks everything that
  shares one word, so on a natural-language query most of its list is noise), times the lexical
  trust: ``LEXICAL_WEIGHT``, raised by how clearly the first BM25 score stands above the second
  (``(first - second) / first``: a clear winner is what a lexical match that means something
  looks like; a flat head is many chunks sharing common words);
- a dense hit counts by the semantic trust: ``SEMANTIC_WEIGHT``, raised by the cosine gap between
  the first and the second hit (``SEMANTIC_MARGIN_GAIN`` per ``SEMANTIC_MARGIN_SCALE`` of cosine,
  counted up to ``SEMANTIC_MARGIN_CAP`` scales): the model is sure when one chunk stands out;
- a chunk holding the query as a literal counts ``LITERAL_WEIGHT``, whatever the rest says: for
  code it is the strongest evidence there is.
The query's length enters through coverage (a share of its terms) and through the margins (a long
natural-language query rarely gives BM25 a clear winner). A small k (5) lets the first ranks of
each list decide. The constants were chosen on the tuning halves of two query kinds that
``bench/bench_code.py`` prints: CoSQA's natural-language questions, where dense is the side to
trust, and the same targets asked by name, where lexical is; fixed weights serve one kind at the
other's cost.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from service.code.lexical import ChunkHit

RRF_K = 5
LEXICAL_WEIGHT = 0.5
LEXICAL_MARGIN_GAIN = 3.0
LITERAL_WEIGHT = 1.5
SEMANTIC_WEIGHT = 1.0
SEMANTIC_MARGIN_GAIN = 0.5
SEMANTIC_MARGIN_SCALE = 0.05
SEMANTIC_MARGIN_CAP = 1.0

# (category, multiplier), checked in this order; the first that applies wins.
SOURCE = ("source", 1.0)
VENDORED = ("vendored", 0.55)
GENERATED = ("generated", 0.6)
MOCK = ("mock", 0.7)
TEST = ("test", 0.75)
DOCS = ("docs", 0.8)

_VENDORED_DIRS = frozenset({"vendor", "vendors", "third_party", "thirdparty", "third-party", "external", "extern", "node_modules", "bower_components", "site-packages"})
_GENERATED_DIRS = frozenset({"generated", "__generated__", "gen", "dist", "build", "out"})
_GENERATED_NAMES = re.compile(
    r"(\.pb\.go|_pb2(_grpc)?\.py|\.pb\.(cc|h)|_generated\.\w+|\.generated\.\w+|\.gen\.\w+|\.g\.dart|\.min\.(js|css)|"
    r"^(package-lock\.json|yarn\.lock|pnpm-lock\.yaml|Cargo\.lock|poetry\.lock|go\.sum))$"
)
_MOCK_DIRS = frozenset({"mock", "mocks", "__mocks__", "fixtures", "fixture", "testdata", "stubs", "fakes"})
_MOCK_NAMES = re.compile(r"(^mock_|_mock\.|\.mock\.|^mocks?\.|^fake_|_fake\.)", re.IGNORECASE)
_TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs", "testing", "e2e"})
_TEST_NAMES = re.compile(r"(^test_.*\.py$|_test\.\w+$|\.(test|spec)\.\w+$|Tests?\.(java|kt|cs|swift)$|^conftest\.py$|_spec\.rb$)")
_DOC_EXTENSIONS = frozenset({".md", ".mdx", ".rst", ".txt", ".adoc", ".org"})
_DOC_DIRS = frozenset({"docs", "doc", "documentation"})


def path_category(path: str) -> tuple[str, float]:
    """The fixed adjustment of a workspace path: (category, score multiplier)."""
    directories = set(path.split("/")[:-1])
    name = posixpath.basename(path)
    if directories & _VENDORED_DIRS:
        return VENDORED
    if directories & _GENERATED_DIRS or _GENERATED_NAMES.search(name):
        return GENERATED
    if directories & _MOCK_DIRS or _MOCK_NAMES.search(name):
        return MOCK
    if directories & _TEST_DIRS or _TEST_NAMES.search(name):
        return TEST
    if posixpath.splitext(name)[1].lower() in _DOC_EXTENSIONS or directories & _DOC_DIRS:
        return DOCS
    return SOURCE


@dataclass(frozen=True)
class Trust:
    """How far each pass is trusted for one query: the weight of its list in the fusion (a lexical
    hit's weight is ``lexical`` times the share of the query's terms it holds)."""

    lexical: float = 1.0
    semantic: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {"lexical": round(self.lexical, 3), "semantic": round(self.semantic, 3)}


def trust_of(lexical: Sequence[ChunkHit], semantic: Sequence[ChunkHit]) -> Trust:
    """The trust of each list for this query, from the margin of its first score over its second."""
    bm25 = sorted((hit.bm25 for hit in lexical), reverse=True)
    lexical_margin = (bm25[0] - bm25[1]) / bm25[0] if len(bm25) > 1 and bm25[0] > 0 else 0.0
    cosines = [hit.semantic_score for hit in sorted(semantic, key=lambda h: h.semantic_rank or 0)]
    semantic_margin = max(cosines[0] - cosines[1], 0.0) if len(cosines) > 1 else 0.0
    return Trust(
        lexical=LEXICAL_WEIGHT * (1 + LEXICAL_MARGIN_GAIN * lexical_margin),
        semantic=SEMANTIC_WEIGHT * (1 + SEMANTIC_MARGIN_GAIN * min(semantic_margin / SEMANTIC_MARGIN_SCALE, SEMANTIC_MARGIN_CAP)),
    )


def fuse(lexical: Sequence[ChunkHit], semantic: Sequence[ChunkHit], trust: Trust | None = None, *, k: int = RRF_K) -> list[ChunkHit]:
    """One list of chunks by RRF over the ranked lists given (each chunk once, evidence merged),
    weighed by ``trust`` (by default ``trust_of`` the lists).

    With one list empty (lexical or semantic mode) this is that list's plain RRF score: the
    order stays the pass's own, and the path adjustments weigh the same in every mode."""
    merged: dict[str, ChunkHit] = {}
    for hit in lexical:
        merged[hit.chunk.key] = hit
    for hit in semantic:
        existing = merged.get(hit.chunk.key)
        if existing is None:
            merged[hit.chunk.key] = hit
        else:
            existing.semantic_rank, existing.semantic_score = hit.semantic_rank, hit.semantic_score
    both = bool(lexical) and bool(semantic)
    weights = (trust or trust_of(lexical, semantic)) if both else Trust()
    for hit in merged.values():
        hit.fused = 0.0
        if hit.lexical_rank is not None:
            hit.fused += (_lexical_weight(hit, weights) if both else 1.0) / (k + hit.lexical_rank)
        if hit.semantic_rank is not None:
            hit.fused += weights.semantic / (k + hit.semantic_rank)
    return list(merged.values())


def _lexical_weight(hit: ChunkHit, trust: Trust) -> float:
    return LITERAL_WEIGHT if hit.exact else trust.lexical * hit.coverage


def adjust(hits: Sequence[ChunkHit]) -> list[ChunkHit]:
    """Apply the path-aware multipliers to the fused scores and sort by the result."""
    for hit in hits:
        hit.category, hit.weight = path_category(hit.chunk.path)
        hit.score = hit.fused * hit.weight
    return sorted(hits, key=lambda h: (-h.score, h.chunk.path, h.chunk.start_line))
