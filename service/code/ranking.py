"""Ranking: reciprocal rank fusion of the lexical and semantic chunk lists, then the fixed
path-aware adjustments (source files above docs, tests, mocks, generated and vendored
code), applied after fusion and shown with each result.

RRF, as in the store's own hybrid query: ``score = sum(weight / (k + rank))`` over the lists a
chunk appears in. The fusion runs here rather than in one engine call because the results must
say which pass found each chunk (``[lexical]``, ``[semantic]``, ``[merged]``), and the lexical
list also holds the literal matches that only the trigram index sees.

Weights (measured on CoSQA dev with ``bench/bench_code.py``, whose sensitivity table shows the
neighbourhood): BM25 ranks everything that shares one query word, so on natural-language queries
most of its list is noise and equal-weight RRF (k = 60) scored below dense alone. A lexical entry
therefore counts in proportion to the share of the query's terms the chunk holds (half weight at
full coverage), a chunk holding the query as a literal counts 1.5 (for code the strongest evidence
there is), and a small k (5) lets the first ranks of each list decide, as they should.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from service.code.lexical import ChunkHit

RRF_K = 5
LEXICAL_WEIGHT = 0.5
LITERAL_WEIGHT = 1.5
SEMANTIC_WEIGHT = 1.0

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


def fuse(lexical: Sequence[ChunkHit], semantic: Sequence[ChunkHit], *, k: int = RRF_K) -> list[ChunkHit]:
    """One list of chunks by RRF over the ranked lists given (each chunk once, evidence merged).

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
    for hit in merged.values():
        hit.fused = 0.0
        if hit.lexical_rank is not None:
            hit.fused += (_lexical_weight(hit) if both else 1.0) / (k + hit.lexical_rank)
        if hit.semantic_rank is not None:
            hit.fused += SEMANTIC_WEIGHT / (k + hit.semantic_rank)
    return list(merged.values())


def _lexical_weight(hit: ChunkHit) -> float:
    return LITERAL_WEIGHT if hit.exact else LEXICAL_WEIGHT * hit.coverage


def adjust(hits: Sequence[ChunkHit]) -> list[ChunkHit]:
    """Apply the path-aware multipliers to the fused scores and sort by the result."""
    for hit in hits:
        hit.category, hit.weight = path_category(hit.chunk.path)
        hit.score = hit.fused * hit.weight
    return sorted(hits, key=lambda h: (-h.score, h.chunk.path, h.chunk.start_line))
