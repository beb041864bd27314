"""The store contract: one suite run against qdrant-edge, qdrant-client local mode and (with QDRANT_URL) a server.

Edge-only tests at the end cover what only the embedded store has: reload from disk, the directory
lock, and durability of unflushed writes when the owner is killed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import AsyncQdrantClient

from service.engine.store import (
    CollectionSpec,
    DenseQuery,
    Filter,
    HasVector,
    Match,
    MatchAny,
    PointRecord,
    Range,
    Store,
    StoreError,
    StoreLockedError,
    TextQuery,
    VectorSpec,
    point_id,
)
from service.engine.store.client import QdrantClientStore
from service.engine.store.edge import EdgeStore

DIM = 8
DENSE = VectorSpec("dense", DIM)
SERVER_URL = os.environ.get("QDRANT_URL")


def spec_for(name: str) -> CollectionSpec:
    return CollectionSpec(name, keyword_fields=("kind",), integer_fields=("stars",), bool_fields=("deprecated",))


def unit(*components: float) -> list[float]:
    """A normalized DIM-d vector from its leading components (cosine stores vectors normalized)."""
    values = list(components) + [0.0] * (DIM - len(components))
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def axis(i: int) -> list[float]:
    return unit(*([0.0] * i + [1.0]))


def rec(collection: str, key: str, tenant: str, terms: str, vector: list[float] | None = None, **payload: Any) -> PointRecord:
    body = {"key": key, "tenant": tenant, "terms": terms, **payload}
    return PointRecord(point_id(collection, key), body, {"dense": vector} if vector is not None else {})


def keys(items: Sequence[Any]) -> list[str]:
    return [item.payload["key"] for item in items]


@pytest.fixture
def collection() -> str:
    return f"contract_{uuid.uuid4().hex[:10]}"


# The server adapter runs against a real Qdrant only where QDRANT_URL names one (none can be
# installed on the development machines); without it the parameter is not generated at all.
STORE_KINDS = ["edge", "qdrant-local", *(["qdrant-server"] if SERVER_URL else [])]


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path, collection: str) -> AsyncIterator[Store]:
    kind = request.param
    opened: Store
    if kind == "edge":
        opened = EdgeStore(tmp_path / "index")
    elif kind == "qdrant-local":
        opened = QdrantClientStore.local(":memory:")
    else:
        assert SERVER_URL
        opened = QdrantClientStore.connect(SERVER_URL, os.environ.get("QDRANT_API_KEY"))
    yield opened
    await opened.close()
    if kind == "qdrant-server":
        assert SERVER_URL
        cleaner = AsyncQdrantClient(url=SERVER_URL, api_key=os.environ.get("QDRANT_API_KEY"))
        for name in (collection, f"{collection}_novec"):
            if await cleaner.collection_exists(name):
                await cleaner.delete_collection(name)
        await cleaner.close()


async def ready(store: Store, collection: str, points: Sequence[PointRecord] = ()) -> None:
    await store.ensure_collection(spec_for(collection), [DENSE])
    if points:
        await store.upsert(collection, points)


# ---- collections and writes ----------------------------------------------------------------


async def test_ensure_collection_is_idempotent_and_keeps_data(store: Store, collection: str) -> None:
    await ready(store, collection, [rec(collection, "a", "t1", "alpha", axis(0))])
    await store.ensure_collection(spec_for(collection), [DENSE])
    await store.ensure_collection(spec_for(collection), [DENSE])
    assert await store.count(collection) == 1
    assert keys(await store.search_text(collection, "alpha")) == ["a"]
    with pytest.raises(StoreError, match="size"):
        await store.ensure_collection(spec_for(collection), [VectorSpec("dense", DIM + 1)])


async def test_a_collection_without_a_text_index_refuses_text_queries_and_serves_the_rest(store: Store, collection: str) -> None:
    spec = CollectionSpec(collection, text_field=None, keyword_fields=("kind",))
    await store.ensure_collection(spec, [DENSE])
    await store.upsert(collection, [rec(collection, "a", "t1", "alpha", axis(0), kind="x"), rec(collection, "b", "t1", "beta", axis(1), kind="y")])
    for text_call in (
        store.search_text(collection, "alpha"),
        store.search_batch(collection, [TextQuery("alpha")]),
        store.search_hybrid(collection, "dense", axis(0), "alpha"),
    ):
        with pytest.raises(StoreError, match="no text index"):
            await text_call
    assert keys(await store.search_dense(collection, "dense", axis(1), Filter(must=(Match("kind", "y"),)))) == ["b"]
    await store.ensure_collection(spec, [DENSE])  # idempotent
    assert await store.count(collection) == 2


async def test_upsert_then_retrieve_round_trips_payload_and_vectors(store: Store, collection: str) -> None:
    point = rec(collection, "a", "t1", "alpha beta", unit(1, 2, 3), kind="tool", stars=5, deprecated=True, tags=["x"])
    await ready(store, collection, [point])
    [got] = await store.retrieve(collection, [point.id, point_id(collection, "missing")], with_vectors=True)
    assert got.id == point.id
    assert dict(got.payload) == dict(point.payload)
    assert got.vectors["dense"] == pytest.approx(point.vectors["dense"], abs=1e-5)
    [without] = await store.retrieve(collection, [point.id])
    assert dict(without.vectors) == {}

    # Upsert replaces the whole point: a key left out is gone.
    await store.upsert(collection, [rec(collection, "a", "t1", "gamma", unit(3, 2, 1))])
    [replaced] = await store.retrieve(collection, [point.id], with_vectors=True)
    assert dict(replaced.payload) == {"key": "a", "tenant": "t1", "terms": "gamma"}
    assert replaced.vectors["dense"] == pytest.approx(unit(3, 2, 1), abs=1e-5)


async def test_overwrite_payload_keeps_vectors(store: Store, collection: str) -> None:
    point = rec(collection, "a", "t1", "alpha", axis(2), kind="tool", deprecated=False)
    await ready(store, collection, [point])
    await store.overwrite_payload(collection, point.id, {"key": "a", "tenant": "t1", "terms": "omega"})
    [got] = await store.retrieve(collection, [point.id], with_vectors=True)
    assert dict(got.payload) == {"key": "a", "tenant": "t1", "terms": "omega"}
    assert got.vectors["dense"] == pytest.approx(axis(2), abs=1e-5)
    assert keys(await store.search_text(collection, "omega")) == ["a"]
    assert await store.search_text(collection, "alpha") == []
    assert await store.count(collection, Filter(must=(Match("deprecated", False),))) == 0
    with pytest.raises(StoreError):
        await store.overwrite_payload(collection, point_id(collection, "missing"), {"x": 1})


async def test_set_payload_merges_keys(store: Store, collection: str) -> None:
    a, b = rec(collection, "a", "t1", "alpha", axis(0), stars=1), rec(collection, "b", "t1", "beta", axis(1), stars=2)
    await ready(store, collection, [a, b])
    await store.set_payload(collection, [a.id, b.id], {"kind": "agent", "deprecated": True})
    for got in await store.retrieve(collection, [a.id, b.id], with_vectors=True):
        assert got.payload["kind"] == "agent" and got.payload["deprecated"] is True
        assert got.payload["stars"] in (1, 2) and "dense" in got.vectors
    assert await store.count(collection, Filter(must=(Match("deprecated", True),))) == 2
    # A boolean replaced by another type no longer matches as a boolean.
    await store.set_payload(collection, [a.id], {"deprecated": "no"})
    assert await store.count(collection, Filter(must=(Match("deprecated", True),))) == 1
    with pytest.raises(StoreError):
        await store.set_payload(collection, [point_id(collection, "missing")], {"x": 1})


async def test_update_vectors_keeps_payload_and_changes_ranking(store: Store, collection: str) -> None:
    a, b = rec(collection, "a", "t1", "alpha", axis(0), stars=1), rec(collection, "b", "t1", "beta", axis(1))
    await ready(store, collection, [a, b])
    assert keys(await store.search_dense(collection, "dense", axis(1), limit=1)) == ["b"]
    await store.update_vectors(collection, [(a.id, {"dense": unit(0.1, 1.0)})])
    assert keys(await store.search_dense(collection, "dense", axis(1), limit=2)) == ["b", "a"]
    assert keys(await store.search_dense(collection, "dense", unit(0.2, 1.0), limit=1)) == ["a"]
    [got] = await store.retrieve(collection, [a.id])
    assert dict(got.payload) == dict(a.payload)
    with pytest.raises(StoreError):
        await store.update_vectors(collection, [(point_id(collection, "missing"), {"dense": axis(0)})])


async def test_a_search_after_any_write_returns_the_payload_as_written(store: Store, collection: str) -> None:
    """Searched again after each kind of write, a point's payload is the one written, by every query
    path; a caller changing a payload it was given changes nothing the next search returns."""
    a = rec(collection, "a", "t1", "alpha", axis(0), kind="one", deprecated=False)
    await ready(store, collection, [a, rec(collection, "b", "t1", "beta", axis(1), kind="other")])

    async def seen() -> dict[str, Any]:
        [dense] = await store.search_dense(collection, "dense", axis(0), limit=1)
        [[batch_dense], [batch_text]] = await store.search_batch(collection, [DenseQuery("dense", axis(0), limit=1), TextQuery("alpha", limit=1, fields=("key", "kind"))])
        [hybrid] = await store.search_hybrid(collection, "dense", axis(0), "alpha", limit=1)
        [text] = await store.search_text(collection, "alpha", limit=1)
        whole = dict(dense.payload)
        assert [dict(h.payload) for h in (batch_dense, hybrid, text)] == [whole] * 3
        assert dict(batch_text.payload) == {k: whole[k] for k in ("key", "kind") if k in whole}
        return whole

    first = await seen()
    assert first == dict(a.payload)
    [given] = await store.search_dense(collection, "dense", axis(0), limit=1)
    given.payload["kind"] = "changed by a caller"  # type: ignore[index]
    assert await seen() == first
    await store.set_payload(collection, [a.id], {"kind": "two"})
    assert (await seen())["kind"] == "two"
    await store.overwrite_payload(collection, a.id, {"key": "a", "tenant": "t1", "terms": "alpha", "kind": "three"})
    assert await seen() == {"key": "a", "tenant": "t1", "terms": "alpha", "kind": "three"}
    await store.update_vectors(collection, [(a.id, {"dense": unit(1, 0.1)})])
    assert (await seen())["kind"] == "three"
    await store.upsert(collection, [rec(collection, "a", "t1", "alpha", axis(0), kind="four")])
    assert await seen() == {"key": "a", "tenant": "t1", "terms": "alpha", "kind": "four"}
    await store.delete(collection, [a.id])
    assert keys(await store.search_dense(collection, "dense", axis(0), limit=1)) == ["b"]
    await store.upsert(collection, [rec(collection, "a", "t1", "alpha", axis(0), kind="five")])
    assert (await seen())["kind"] == "five"
    await store.delete_by_filter(collection, Filter(must=(Match("kind", "five"),)))
    await store.upsert(collection, [rec(collection, "a", "t1", "alpha", axis(0), kind="six", stars=6)])
    assert await seen() == {"key": "a", "tenant": "t1", "terms": "alpha", "kind": "six", "stars": 6}


async def test_delete_and_delete_by_filter(store: Store, collection: str) -> None:
    points = [rec(collection, f"k{i}", "t1" if i < 6 else "t2", f"word{i}", axis(i % DIM), stars=i) for i in range(10)]
    await ready(store, collection, points)
    await store.delete(collection, [points[0].id, point_id(collection, "never-existed")])
    assert await store.count(collection) == 9
    assert await store.retrieve(collection, [points[0].id]) == []
    await store.delete_by_filter(collection, Filter(must=(Match("tenant", "t2"),)))
    assert await store.count(collection) == 5
    assert await store.count(collection, Filter(must=(Match("tenant", "t2"),))) == 0
    assert await store.search_text(collection, "word7") == []


async def test_scroll_pages_through_every_point_once(store: Store, collection: str) -> None:
    points = [rec(collection, f"k{i:02d}", "t1" if i % 2 else "t2", "w", axis(i % DIM)) for i in range(25)]
    await ready(store, collection, points)
    seen: list[str] = []
    offset: str | None = None
    pages = 0
    while True:
        page, offset = await store.scroll(collection, limit=10, offset=offset, with_vectors=True)
        pages += 1
        seen += [p.id for p in page]
        assert all("dense" in p.vectors for p in page)
        if offset is None:
            break
        assert len(page) == 10
    assert pages == 3
    assert sorted(seen) == sorted(p.id for p in points)
    odd, next_offset = await store.scroll(collection, Filter(must=(Match("tenant", "t1"),)), limit=100)
    assert next_offset is None
    assert sorted(keys(odd)) == sorted(f"k{i:02d}" for i in range(25) if i % 2)


async def test_count_is_exact_with_and_without_filter(store: Store, collection: str) -> None:
    await ready(store, collection, [rec(collection, f"k{i}", f"t{i % 3}", "w", axis(0)) for i in range(30)])
    assert await store.count(collection) == 30
    assert await store.count(collection, Filter(must=(Match("tenant", "t0"),))) == 10
    assert await store.count(collection, Filter(must_not=(Match("tenant", "t0"),))) == 20


async def test_a_count_asked_again_after_any_write_is_exact(store: Store, collection: str) -> None:
    """The embedded store remembers exact counts until the collection's next update: every kind of
    write must show in the next count of the same filter."""
    t0 = Filter(must=(Match("tenant", "t0"),))
    with_vector = Filter(must=(HasVector("dense"),))
    await ready(store, collection, [rec(collection, f"k{i}", f"t{i % 3}", "w", axis(0) if i < 20 else None) for i in range(30)])

    async def counts() -> tuple[int, int, int]:
        return await store.count(collection), await store.count(collection, t0), await store.count(collection, with_vector)

    assert await counts() == await counts() == (30, 10, 20)
    await store.upsert(collection, [rec(collection, "new", "t0", "w", axis(1))])
    assert await counts() == (31, 11, 21)
    await store.set_payload(collection, [point_id(collection, "k1")], {"tenant": "t0"})
    assert await counts() == (31, 12, 21)
    await store.overwrite_payload(collection, point_id(collection, "k0"), {"key": "k0", "tenant": "t9", "terms": "w"})
    assert await counts() == (31, 11, 21)
    await store.update_vectors(collection, [(point_id(collection, "k21"), {"dense": axis(2)})])
    assert await counts() == (31, 11, 22)
    await store.delete(collection, [point_id(collection, "new")])
    assert await counts() == (30, 10, 21)
    await store.delete_by_filter(collection, t0)
    assert await counts() == (20, 0, 13)


async def test_a_missing_collection_is_a_store_error(store: Store, collection: str) -> None:
    with pytest.raises(StoreError):
        await store.count(f"{collection}_absent")
    with pytest.raises(StoreError):
        await store.search_dense(f"{collection}_absent", "dense", axis(0))


# ---- ranking -------------------------------------------------------------------------------


async def test_tenant_filter_isolates_dense_text_and_hybrid(store: Store, collection: str) -> None:
    # Tenant B holds the exact matches for every query: only the filter can keep them out.
    points = [rec(collection, f"b{i}", "B", "secret payroll", axis(0)) for i in range(5)]
    points += [rec(collection, f"a{i}", "A", f"payroll report{i}", unit(1, 1 + i)) for i in range(5)]
    points += [rec(collection, "a-other", "A", "unrelated words", axis(3))]
    await ready(store, collection, points)
    only_a = Filter(must=(Match("tenant", "A"),))
    results = {
        "dense": await store.search_dense(collection, "dense", axis(0), only_a, limit=20),
        "text": await store.search_text(collection, "secret payroll", only_a, limit=20),
        "hybrid": await store.search_hybrid(collection, "dense", axis(0), "secret payroll", only_a, limit=20),
    }
    for name, hits in results.items():
        assert hits, name
        assert {h.payload["tenant"] for h in hits} == {"A"}, name
        assert not any(h.payload["key"].startswith("b") for h in hits), name
    assert len(results["dense"]) == 6
    assert sorted(keys(results["text"])) == sorted(f"a{i}" for i in range(5))  # "a-other" has no query term
    unfiltered = await store.search_text(collection, "secret payroll", limit=20)
    assert keys(unfiltered)[:5] and all(k.startswith("b") for k in keys(unfiltered)[:5])


async def test_dense_ranks_by_cosine_similarity(store: Store, collection: str) -> None:
    angles = [0.0, 0.3, 0.6, 0.9, 1.2, 1.5]
    points = [rec(collection, f"r{i}", "t1", "w", unit(math.cos(a), math.sin(a))) for i, a in enumerate(angles)]
    points.append(rec(collection, "no-vector", "t1", "w"))
    await ready(store, collection, list(reversed(points)))
    hits = await store.search_dense(collection, "dense", axis(0), limit=10)
    assert keys(hits) == [f"r{i}" for i in range(len(angles))]  # the point without a vector is skipped
    assert [h.score for h in hits] == pytest.approx([math.cos(a) for a in angles], abs=1e-4)
    assert keys(await store.search_dense(collection, "dense", axis(0), limit=2)) == ["r0", "r1"]


async def test_bm25_matches_only_query_terms_and_rewards_rare_terms(store: Store, collection: str) -> None:
    points = [rec(collection, f"filler{i}", "t1", f"apple filler{i}", axis(0)) for i in range(8)]
    points += [
        rec(collection, "rare", "t1", "zebra filler", axis(1)),  # zebra: in 1 document
        rec(collection, "common", "t1", "apple filler", axis(1)),  # apple: in 9 documents
        rec(collection, "none", "t1", "nothing here", axis(1)),
        rec(collection, "empty", "t1", "", axis(1)),
    ]
    await ready(store, collection, points)
    hits = await store.search_text(collection, "zebra apple", limit=50)
    ranked = keys(hits)
    assert "none" not in ranked and "empty" not in ranked
    assert set(ranked) == {"rare", "common"} | {f"filler{i}" for i in range(8)}
    assert ranked[0] == "rare"
    scores = {h.payload["key"]: h.score for h in hits}
    assert scores["rare"] > scores["common"] > 0
    assert await store.search_text(collection, "nothingmatches") == []
    assert await store.search_text(collection, "   ") == []


async def test_hybrid_rrf_keeps_each_side_and_scores_by_rank(store: Store, collection: str) -> None:
    query = axis(0)
    points = [
        rec(collection, "dense-only", "t1", "unrelated", query),  # best vector, no query term
        rec(collection, "text-only", "t1", "kangaroo", axis(7)),  # the only text match, a far vector
        rec(collection, "both", "t1", "kangaroo", unit(1, 0.5)),
    ]
    points += [rec(collection, f"noise{i}", "t1", "noise", unit(1, 1 + i)) for i in range(10)]
    await ready(store, collection, points)
    k = 10
    hits = await store.search_hybrid(collection, "dense", query, "kangaroo", limit=10, prefetch_limit=3, rrf_k=k)
    scores = {h.payload["key"]: h.score for h in hits}
    assert {"dense-only", "text-only", "both"} <= set(scores)
    # RRF: the sum over sides of 1 / (k + rank), rank counted from 0.
    assert scores["dense-only"] == pytest.approx(1 / k, rel=1e-4)
    assert scores["both"] > scores["dense-only"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # No query term: dense side alone, still fused.
    dense_only = await store.search_hybrid(collection, "dense", query, "", limit=3, rrf_k=k)
    assert keys(dense_only)[0] == "dense-only"


async def test_a_batch_query_naming_payload_fields_gets_only_those(store: Store, collection: str) -> None:
    points = [rec(collection, f"a{i}", "A", f"payroll report{i}", unit(1, 1 + i), body="x" * 500, hidden=i % 2 == 0) for i in range(4)]
    await ready(store, collection, points)
    only_a = Filter(must=(Match("tenant", "A"),))
    trimmed = await store.search_batch(
        collection,
        [DenseQuery("dense", axis(0), only_a, limit=4, fields=("key",)), TextQuery("payroll report2", only_a, limit=4, fields=("key", "terms", "hidden"))],
    )
    full = await store.search_batch(collection, [DenseQuery("dense", axis(0), only_a, limit=4), TextQuery("payroll report2", only_a, limit=4)])
    assert [keys(hits) for hits in trimmed] == [keys(hits) for hits in full]  # the same hits, in the same order
    assert [h.score for h in trimmed[1]] == pytest.approx([h.score for h in full[1]], abs=1e-4)
    assert all(dict(h.payload) == {"key": h.payload["key"]} for h in trimmed[0])
    by_key = {h.payload["key"]: h.payload for h in full[1]}
    for hit in trimmed[1]:
        assert dict(hit.payload) == {"key": hit.payload["key"], "terms": by_key[hit.payload["key"]]["terms"], "hidden": by_key[hit.payload["key"]]["hidden"]}
    assert {type(h.payload["hidden"]) for h in trimmed[1]} == {bool}  # a boolean comes back as stored
    assert all(dict(h.payload) == dict(next(p for p in points if p.payload["key"] == h.payload["key"]).payload) for h in full[0])


# ---- filters -------------------------------------------------------------------------------


async def test_a_batch_answers_each_query_as_it_would_alone(store: Store, collection: str) -> None:
    points = [rec(collection, f"b{i}", "B", "secret payroll", axis(0)) for i in range(3)]
    points += [rec(collection, f"a{i}", "A", f"payroll report{i}", unit(1, 1 + i)) for i in range(4)]
    points += [rec(collection, "a-text-only", "A", "payroll ledger")]
    await ready(store, collection, points)
    only_a = Filter(must=(Match("tenant", "A"),))
    queries = [
        DenseQuery("dense", axis(0), only_a, limit=3),
        TextQuery("payroll report2", only_a, limit=10),
        TextQuery("   ", only_a),  # no terms: no hits, as search_text
        DenseQuery("dense", axis(1), limit=20),
        TextQuery("nothingmatches"),
    ]
    batch = await store.search_batch(collection, queries)
    alone = [
        await store.search_dense(collection, "dense", axis(0), only_a, limit=3),
        await store.search_text(collection, "payroll report2", only_a, limit=10),
        [],
        await store.search_dense(collection, "dense", axis(1), limit=20),
        [],
    ]
    assert [keys(hits) for hits in batch] == [keys(hits) for hits in alone]
    for got, want in zip(batch, alone, strict=True):
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
        assert [dict(h.payload) for h in got] == [dict(h.payload) for h in want]
    assert len(batch[0]) == 3 and {h.payload["tenant"] for h in batch[0] + batch[1]} == {"A"}
    assert "a-text-only" not in keys(batch[3])  # a point without the vector is skipped, as search_dense
    assert await store.search_batch(collection, []) == []
    assert await store.search_batch(collection, [TextQuery(""), TextQuery(" ")]) == [[], []]
    with pytest.raises(StoreError):
        await store.search_batch(collection, [TextQuery("payroll"), DenseQuery("absent", axis(0))])


async def test_filter_conditions(store: Store, collection: str) -> None:
    points = [
        rec(collection, "p0", "t1", "w", axis(0), kind="tool", stars=0, deprecated=False),
        rec(collection, "p1", "t1", "w", axis(1), kind="agent", stars=5, deprecated=True),
        rec(collection, "p2", "t1", "w", axis(2), kind="prompt", stars=10, deprecated=False),
        rec(collection, "p3", "t1", "w", None, kind="tool", stars=15, deprecated=True),
        rec(collection, "p4", "t2", "w", axis(4), kind="tool", stars=20),
    ]
    await ready(store, collection, points)

    async def matching(flt: Filter) -> set[str]:
        page, _ = await store.scroll(collection, flt, limit=100)
        assert await store.count(collection, flt) == len(page)
        return set(keys(page))

    assert await matching(Filter(must=(Match("kind", "tool"),))) == {"p0", "p3", "p4"}
    assert await matching(Filter(must=(Match("stars", 5),))) == {"p1"}
    assert await matching(Filter(must=(Match("deprecated", True),))) == {"p1", "p3"}
    assert await matching(Filter(must=(Match("deprecated", False),))) == {"p0", "p2"}
    assert await matching(Filter(must=(MatchAny("kind", ("agent", "prompt")),))) == {"p1", "p2"}
    assert await matching(Filter(must=(MatchAny("stars", (0, 20, 99)),))) == {"p0", "p4"}
    assert await matching(Filter(must=(Range("stars", gte=5, lt=15),))) == {"p1", "p2"}
    assert await matching(Filter(must=(Range("stars", gt=5, lte=15),))) == {"p2", "p3"}
    assert await matching(Filter(must=(HasVector("dense"),))) == {"p0", "p1", "p2", "p4"}
    assert await matching(Filter(must_not=(HasVector("dense"),))) == {"p3"}
    nested = Filter(
        must=(Match("tenant", "t1"),),
        should=(Match("kind", "agent"), Filter(must=(Match("kind", "tool"), Range("stars", gte=10)))),
    )
    assert await matching(nested) == {"p1", "p3"}
    assert await matching(Filter(must_not=(Match("kind", "tool"), Match("tenant", "t2")))) == {"p1", "p2"}
    assert await matching(Filter()) == {"p0", "p1", "p2", "p3", "p4"}
    hits = await store.search_dense(collection, "dense", axis(1), Filter(must_not=(Match("kind", "agent"),)))
    assert "p1" not in keys(hits) and keys(hits)


async def test_a_nested_field_is_indexed_and_matched_by_its_dotted_path(store: Store, collection: str) -> None:
    """A keyword index on ``connection.status`` (a field of an object) is created on a collection that
    already has data, and ``Match``/``MatchAny`` on the dotted path select by it."""
    points = [
        rec(collection, "up", "t1", "w", axis(0), kind="server", connection={"status": "connected"}),
        rec(collection, "down", "t1", "w", axis(1), kind="server", connection={"status": "disconnected"}),
        rec(collection, "slow", "t1", "w", axis(2), kind="server", connection={"status": "degraded"}),
        rec(collection, "none", "t1", "w", axis(3), kind="server"),
    ]
    await ready(store, collection, points)
    nested = CollectionSpec(collection, keyword_fields=("kind", "connection.status"), integer_fields=("stars",), bool_fields=("deprecated",))
    await store.ensure_collection(nested, [DENSE])
    page, _ = await store.scroll(collection, Filter(must=(Match("kind", "server"), MatchAny("connection.status", ("disconnected", "degraded")))), limit=10)
    assert set(keys(page)) == {"down", "slow"}
    assert await store.count(collection, Filter(must=(Match("connection.status", "connected"),))) == 1


# ---- vectors added later -------------------------------------------------------------------


async def test_ensure_vector_adds_a_named_vector(store: Store, collection: str) -> None:
    await ready(store, collection, [rec(collection, f"k{i}", "t1", f"w{i}", axis(i)) for i in range(4)])
    code = VectorSpec("code", 4)
    await store.ensure_vector(collection, code)
    await store.ensure_vector(collection, code)  # idempotent
    with pytest.raises(StoreError):
        await store.ensure_vector(collection, VectorSpec("code", 5))
    target = point_id(collection, "k2")
    await store.update_vectors(collection, [(target, {"code": [0.0, 1.0, 0.0, 0.0]})])
    hits = await store.search_dense(collection, "code", [0.1, 1.0, 0.0, 0.0], limit=10)
    assert [h.id for h in hits] == [target]  # points lacking "code" are skipped
    assert await store.count(collection, Filter(must=(HasVector("code"),))) == 1
    [got] = await store.retrieve(collection, [target], with_vectors=True)
    assert set(got.vectors) == {"dense", "code"}
    assert len(await store.search_dense(collection, "dense", axis(0), limit=10)) == 4


async def test_drop_vector_removes_it_from_every_point(store: Store, collection: str) -> None:
    await ready(store, collection, [rec(collection, f"k{i}", "t1", f"w{i}", axis(i)) for i in range(4)])
    await store.ensure_vector(collection, VectorSpec("old", 4))
    target = point_id(collection, "k1")
    await store.update_vectors(collection, [(target, {"old": [1.0, 0.0, 0.0, 0.0]})])

    await store.drop_vector(collection, "old")
    await store.drop_vector(collection, "old")  # idempotent
    await store.drop_vector(collection, "never-there")
    [got] = await store.retrieve(collection, [target], with_vectors=True)
    assert set(got.vectors) == {"dense"}  # the other vector and the payload stay
    assert got.payload["terms"] == "w1" and await store.count(collection) == 4
    assert len(await store.search_dense(collection, "dense", axis(0), limit=10)) == 4

    # Added again, it starts empty: no point holds an old value.
    await store.ensure_vector(collection, VectorSpec("old", 4))
    assert await store.count(collection, Filter(must=(HasVector("old"),))) == 0
    assert await store.search_dense(collection, "old", [1.0, 0.0, 0.0, 0.0], limit=10) == []

    # The last vector of a collection stays: dense search needs one.
    single = f"{collection}_one"
    await store.ensure_collection(spec_for(single), [DENSE])
    with pytest.raises(StoreError, match="only vector"):
        await store.drop_vector(single, "dense")


async def test_collection_created_without_vectors_takes_one_later(store: Store, collection: str) -> None:
    name = f"{collection}_novec"
    await store.ensure_collection(spec_for(name))
    await store.upsert(name, [rec(name, "lexical", "t1", "only words")])
    assert keys(await store.search_text(name, "words")) == ["lexical"]
    await store.ensure_vector(name, DENSE)
    await store.upsert(name, [rec(name, "embedded", "t1", "words too", axis(0))])
    assert keys(await store.search_dense(name, "dense", axis(0))) == ["embedded"]
    [got] = await store.retrieve(name, [point_id(name, "lexical")], with_vectors=True)
    assert dict(got.vectors) == {}


# ---- edge only: disk, lock, durability -----------------------------------------------------


async def test_edge_reopen_from_disk_keeps_everything(tmp_path: Path) -> None:
    root = tmp_path / "index"
    store = EdgeStore(root)
    await store.ensure_collection(spec_for("catalog"), [DENSE])
    await store.upsert("catalog", [rec("catalog", f"k{i}", "t1", f"alpha w{i}", axis(i % DIM), deprecated=i == 3) for i in range(50)])
    await store.ensure_vector("catalog", VectorSpec("code", 4))
    await store.update_vectors("catalog", [(point_id("catalog", "k7"), {"code": [1.0, 0.0, 0.0, 0.0]})])
    await store.ensure_vector("catalog", VectorSpec("retired", 4))
    await store.drop_vector("catalog", "retired")  # gone from the shard and from the sidecar
    await store.ensure_collection(spec_for("empty"))
    await store.close()
    await store.close()  # idempotent

    reopened = EdgeStore(root)
    try:
        # No ensure_collection: the sidecar says what the collection is.
        assert await reopened.count("catalog") == 50
        assert keys(await reopened.search_text("catalog", "w7")) == ["k7"]
        assert keys(await reopened.search_dense("catalog", "code", [1.0, 0.1, 0.0, 0.0])) == ["k7"]
        nearest = await reopened.search_dense("catalog", "dense", axis(2), limit=10)
        exact = sorted(f"k{i}" for i in range(2, 50, DIM))
        assert sorted(keys(nearest)[: len(exact)]) == exact
        deprecated, _ = await reopened.scroll("catalog", Filter(must=(Match("deprecated", True),)))
        assert keys(deprecated) == ["k3"]
        assert await reopened.count("empty") == 0
        assert json.loads((root / "catalog" / "collection.json").read_text())["vectors"] == {"dense": DIM, "code": 4}
        [k7] = await reopened.retrieve("catalog", [point_id("catalog", "k7")], with_vectors=True)
        assert set(k7.vectors) == {"dense", "code"}
        await reopened.ensure_collection(spec_for("catalog"), [DENSE, VectorSpec("code", 4)])
        assert await reopened.count("catalog") == 50
    finally:
        await reopened.close()


_LOCK_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from service.engine.store import CollectionSpec, PointRecord, VectorSpec, point_id
    from service.engine.store.edge import EdgeStore

    def rec(key):
        return PointRecord(point_id("c", key), {"tenant": "t", "terms": key}, {"dense": [1.0, 0.0, 0.0, 0.0]})

    async def main():
        store = EdgeStore(Path(sys.argv[1]))
        await store.ensure_collection(CollectionSpec("c"), [VectorSpec("dense", 4)])
        await store.upsert("c", [rec("first")])
        print("ready", flush=True)
        sys.stdin.readline()
        await store.upsert("c", [rec("second")])
        await store.flush()
        print("flushed", await store.count("c"), flush=True)
        await store.close()

    asyncio.run(main())
    """
)


async def test_edge_drops_the_payload_indexes_a_spec_no_longer_names(tmp_path: Path) -> None:
    """A surface that stops filtering on a field (or stops searching its text in the store) gets
    the index's memory back at the next start: the spec is the whole list. The points keep the field,
    and a filter on it still answers (unindexed)."""
    root = tmp_path / "index"
    store = EdgeStore(root)
    await store.ensure_collection(spec_for("catalog"), [DENSE])
    await store.upsert("catalog", [rec("catalog", f"k{i}", "t1", f"alpha w{i}", axis(i % DIM), kind="tool" if i % 2 else "doc") for i in range(10)])
    await store.close()

    narrower = CollectionSpec("catalog", text_field=None, integer_fields=("stars",))
    reopened = EdgeStore(root)
    try:
        await reopened.ensure_collection(narrower, [DENSE])
        schema = set(reopened._collection("catalog").shard.info().payload_schema)
        assert "kind" not in schema and "terms" not in schema and {"tenant", "stars"} <= schema
        tools, _ = await reopened.scroll("catalog", Filter(must=(Match("kind", "tool"),)))
        assert sorted(keys(tools)) == [f"k{i}" for i in (1, 3, 5, 7, 9)]
        with pytest.raises(StoreError, match="no text index"):
            await reopened.search_text("catalog", "alpha")
    finally:
        await reopened.close()
    again = EdgeStore(root)  # the sidecar keeps the narrower spec
    try:
        with pytest.raises(StoreError, match="no text index"):
            await again.search_text("catalog", "alpha")
        assert await again.count("catalog") == 10
    finally:
        await again.close()


async def test_edge_second_opener_is_refused_before_touching_the_shard(tmp_path: Path) -> None:
    root = tmp_path / "index"
    with subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "ready"
            with pytest.raises(StoreLockedError) as refused:
                EdgeStore(root)
            assert f"pid {holder.pid}" in str(refused.value)
            assert str(root) in str(refused.value)
            # The owner's flush still works after the refusal (a second load() would have broken it).
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "flushed 2"
            assert holder.wait(timeout=30) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
    after = EdgeStore(root)  # the lock went with its owner
    try:
        assert await after.count("c") == 2
    finally:
        await after.close()


_KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from service.engine.store import CollectionSpec, PointRecord, VectorSpec, point_id
    from service.engine.store.edge import EdgeStore

    async def main():
        store = EdgeStore(Path(sys.argv[1]))
        await store.ensure_collection(CollectionSpec("c", bool_fields=("flag",)), [VectorSpec("dense", 4)])
        points = [
            PointRecord(point_id("c", f"k{i}"), {"key": f"k{i}", "tenant": "t", "terms": f"term{i}", "flag": i % 2 == 0},
                        {"dense": [1.0, float(i), 0.0, 0.0]})
            for i in range(300)
        ]
        await store.upsert("c", points)
        await store.set_payload("c", [point_id("c", "k5")], {"note": "set"})
        await store.delete("c", [point_id("c", "k9")])
        print("written", flush=True)
        time.sleep(120)  # killed before any flush or close

    asyncio.run(main())
    """
)


async def test_edge_writes_survive_sigkill_without_flush(tmp_path: Path) -> None:
    root = tmp_path / "index"
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(root)], stdout=subprocess.PIPE, text=True) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "written"
        finally:
            os.kill(writer.pid, signal.SIGKILL)
    assert writer.returncode == -signal.SIGKILL

    store = EdgeStore(root)
    try:
        assert await store.count("c") == 299
        [k5] = await store.retrieve("c", [point_id("c", "k5")])
        assert k5.payload["note"] == "set"
        assert await store.retrieve("c", [point_id("c", "k9")]) == []
        assert keys(await store.search_text("c", "term123")) == ["k123"]
        assert await store.count("c", Filter(must=(Match("flag", True),))) == 150
        assert len(await store.search_dense("c", "dense", [1.0, 0.0, 0.0, 0.0], limit=5)) == 5
    finally:
        await store.close()


async def test_edge_writes_yield_to_queries_between_chunks(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "index")
    try:
        await store.ensure_collection(spec_for("c"), [DENSE])
        points = [rec("c", f"k{i}", "t1", f"w{i}", axis(i % DIM)) for i in range(2000)]
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await store.upsert("c", points)
        task.cancel()
        assert ticks >= 2000 // 256  # the loop ran between chunks, not only after the whole batch
        assert await store.count("c") == 2000
    finally:
        await store.close()


async def test_edge_a_hit_s_payload_is_read_from_the_shard_once_per_change(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "index")
    try:
        await ready(store, "c", [rec("c", f"k{i}", "t1", f"w{i} shared", axis(i % DIM), stars=i) for i in range(6)])
        cache = store._collection("c").payloads
        queries = [DenseQuery("dense", axis(0), limit=6), TextQuery("shared", limit=6), DenseQuery("dense", axis(1), limit=6, fields=("key",))]
        first = await store.search_batch("c", queries)
        assert cache.reads == 12  # six points, two field selections; the two whole-payload lists share theirs
        again = await store.search_batch("c", queries)
        assert cache.reads == 12 and again == first
        await store.set_payload("c", [point_id("c", "k3")], {"stars": 30})
        after = await store.search_batch("c", queries)
        assert cache.reads == 14  # the changed point, once per selection
        assert {h.payload["key"]: h.payload["stars"] for h in after[0]}["k3"] == 30
    finally:
        await store.close()


async def test_edge_payloads_kept_are_bounded_and_a_search_larger_than_the_bound_is_whole(tmp_path: Path) -> None:
    from service.engine.store.edge_payloads import PayloadCache

    store = EdgeStore(tmp_path / "index")
    try:
        points = [rec("c", f"k{i}", "t1", f"w{i}", unit(1, 0.1 * i)) for i in range(8)]
        await ready(store, "c", points)
        store._collection("c").payloads = cache = PayloadCache(points=3)
        for _ in range(2):
            hits = await store.search_dense("c", "dense", axis(0), limit=8)
            assert sorted(keys(hits)) == sorted(p.payload["key"] for p in points)
            assert all(dict(h.payload) == dict(next(p for p in points if p.id == h.id).payload) for h in hits)
        assert cache.reads == 8 + 5  # the second search found only the three kept: nothing lost, the rest read again
        assert cache.kept() == 3
    finally:
        await store.close()


# A shard's search pool, counted by the kernel's names of this process's threads.
SEARCH_THREADS_SCRIPT = """
import asyncio, os, sys, tempfile
from pathlib import Path
from service.engine.store import CollectionSpec, DenseQuery, PointRecord, TextQuery, VectorSpec, point_id
from service.engine.store.edge import EdgeStore

def pool() -> int:
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sum(name.startswith("edge-search") for name in names)

async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = EdgeStore(Path(tmp))
        for name in ("a", "b"):
            await store.ensure_collection(CollectionSpec(name), [VectorSpec("dense", 4)])
            points = [PointRecord(point_id(name, str(i)), {"tenant": "t", "terms": f"w{i} x"}, {"dense": [1.0, i / 50, 0.0, 0.0]}) for i in range(50)]
            await store.upsert(name, points)
            for _ in range(20):
                await store.search_batch(name, [DenseQuery("dense", [1.0, 0.0, 0.0, 0.0], limit=10), TextQuery("x", limit=10)])
        print(pool())
        await store.close()

asyncio.run(main())
"""


def test_edge_each_shard_searches_on_one_thread_of_its_own() -> None:
    """Two open shards, each searched: two search threads in the process (the engine's default is a pool per shard)."""
    result = subprocess.run([sys.executable, "-c", SEARCH_THREADS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2"]
