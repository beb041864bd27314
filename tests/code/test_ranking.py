"""Fusion, the trust each list gets for a query, and the path-aware adjustments, on hand-built chunk lists."""

from __future__ import annotations

import pytest

from service.code.cache import CachedChunk
from service.code.lexical import ChunkHit
from service.code.ranking import RRF_K, Trust, adjust, fuse, path_category, trust_of


def chunk(path: str, line: int = 1) -> CachedChunk:
    return CachedChunk(f"ws|{path}|{line}", path, line, line + 5, "function", None, "h", "c", "def f():\n    pass")


@pytest.mark.parametrize(
    ("path", "category"),
    [
        ("internal/auth/session.go", "source"),
        ("src/pkg/auth.py", "source"),
        ("docs/guide.md", "docs"),
        ("README.rst", "docs"),
        ("tests/test_auth.py", "test"),
        ("pkg/auth_test.go", "test"),
        ("web/client.spec.ts", "test"),
        ("src/conftest.py", "test"),
        ("src/__mocks__/api.ts", "mock"),
        ("pkg/mock_store.go", "mock"),
        ("testdata/fixture.json", "mock"),
        ("api/v1/service.pb.go", "generated"),
        ("proto/service_pb2.py", "generated"),
        ("dist/bundle.min.js", "generated"),
        ("third_party/zlib/inflate.c", "vendored"),
        ("vendor/github.com/x/y.go", "vendored"),
    ],
)
def test_path_categories(path: str, category: str) -> None:
    assert path_category(path)[0] == category


def test_source_outranks_tests_docs_and_generated_at_equal_evidence() -> None:
    paths = ["tests/test_auth.py", "docs/auth.md", "gen/auth_pb2.py", "src/auth.py"]
    hits = [ChunkHit(chunk=chunk(p), lexical_rank=1) for p in paths]
    for hit in hits:
        hit.fused = 1.0
    ranked = adjust(hits)
    assert [h.chunk.path for h in ranked] == ["src/auth.py", "docs/auth.md", "tests/test_auth.py", "gen/auth_pb2.py"]
    assert ranked[0].score == 1.0 and ranked[2].weight == 0.75


def test_fusion_labels_sources_and_rewards_agreement() -> None:
    both, lexical_only, semantic_only = chunk("a.py"), chunk("b.py"), chunk("c.py")
    lexical = [ChunkHit(chunk=both, lexical_rank=1, coverage=1.0), ChunkHit(chunk=lexical_only, lexical_rank=2, coverage=1.0)]
    semantic = [ChunkHit(chunk=semantic_only, semantic_rank=1), ChunkHit(chunk=both, semantic_rank=2)]
    fused = {h.chunk.path: h for h in fuse(lexical, semantic)}
    assert {p: h.source for p, h in fused.items()} == {"a.py": "merged", "b.py": "lexical", "c.py": "semantic"}
    assert fused["a.py"].fused > fused["c.py"].fused > fused["b.py"].fused


def test_lexical_hits_count_by_query_coverage_and_literal_holders_most() -> None:
    weak, literal, dense_top = chunk("weak.py"), chunk("literal.py"), chunk("dense.py")
    lexical = [ChunkHit(chunk=weak, lexical_rank=1, coverage=0.2), ChunkHit(chunk=literal, lexical_rank=2, exact=True, coverage=1.0)]
    semantic = [ChunkHit(chunk=dense_top, semantic_rank=1)]
    fused = {h.chunk.path: h.fused for h in fuse(lexical, semantic)}
    assert fused["literal.py"] > fused["dense.py"] > fused["weak.py"], "one shared word is weak evidence; the literal is strong"


def test_one_list_keeps_its_own_order() -> None:
    hits = [ChunkHit(chunk=chunk(f"{i}.py"), lexical_rank=i, coverage=1.0 / i) for i in range(1, 4)]
    fused = fuse(hits, [])
    assert [round(h.fused, 6) for h in fused] == [round(1 / (RRF_K + i), 6) for i in range(1, 4)]


def lists(lexical: list[tuple[str, float, float]], semantic: list[tuple[str, float]]) -> tuple[list[ChunkHit], list[ChunkHit]]:
    """Hit lists from (path, BM25, coverage) and (path, cosine), each in rank order."""
    chunks = {path: chunk(path) for path, *_ in [*lexical, *semantic]}
    return (
        [ChunkHit(chunk=chunks[p], bm25=b, coverage=c, lexical_rank=r) for r, (p, b, c) in enumerate(lexical, 1)],
        [ChunkHit(chunk=chunks[p], semantic_score=s, semantic_rank=r) for r, (p, s) in enumerate(semantic, 1)],
    )


def test_each_list_weighs_what_it_can_be_trusted_for_on_the_query() -> None:
    # A query every word of which one chunk holds, far ahead in BM25; the model sees no clear winner.
    covered = lists([("named.py", 14.0, 1.0), ("shares.py", 5.0, 0.5)], [("near.py", 0.52), ("named2.py", 0.515), ("other.py", 0.51)])
    # A query no chunk holds more than a common word of: a flat BM25 head; the model is sure.
    unmatched = lists([("common.py", 3.1, 0.25), ("common2.py", 3.0, 0.25)], [("meant.py", 0.64), ("next.py", 0.55), ("third.py", 0.54)])
    covered_trust, unmatched_trust = trust_of(*covered), trust_of(*unmatched)
    assert covered_trust.lexical > unmatched_trust.lexical, "a clear BM25 winner is trusted more than a flat head"
    assert unmatched_trust.semantic > covered_trust.semantic, "a clear cosine winner is trusted more than a flat one"

    first = adjust(fuse(*covered, covered_trust))
    assert first[0].chunk.path == "named.py", "the chunk holding the whole query leads"
    second = adjust(fuse(*unmatched, unmatched_trust))
    assert [h.chunk.path for h in second[:2]] == ["meant.py", "next.py"], "common words do not outweigh a sure model"

    # Weights are the query's own: the same lists under fixed equal weights would rank otherwise.
    assert adjust(fuse(*covered, Trust(lexical=0.5, semantic=1.0)))[0].chunk.path == "near.py"
    assert adjust(fuse(*unmatched, Trust(lexical=5.0, semantic=1.0)))[0].chunk.path == "common.py"
