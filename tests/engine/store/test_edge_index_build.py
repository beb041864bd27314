"""Edge index builds away from the serving process: queries keep answering, no write is lost, results match exact search.

Real qdrant-edge shards and a real child process build the HNSW graph; the threshold is lowered
to 1,000 points so that a few thousand points take the path a 100k catalog takes. The killed
service is a real process killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from service.engine.store import CollectionSpec, PointRecord, VectorSpec, edge_collection, point_id
from service.engine.store.edge import EdgeStore
from tests.helpers import wait_until

DIM = 384  # the size the engine's thresholds are counted in
THRESHOLD = 1_000
COLLECTION = "catalog"
SEED = 11


def clustered(count: int, rng: np.random.Generator, clusters: int = 24) -> np.ndarray:
    """Unit vectors around ``clusters`` centres: structured like text embeddings, unlike uniform noise."""
    centres = rng.standard_normal((clusters, DIM), dtype=np.float32)
    points = centres[rng.integers(0, clusters, size=count)] + rng.standard_normal((count, DIM), dtype=np.float32) * 0.05
    return points / np.linalg.norm(points, axis=1, keepdims=True)


def records(vectors: np.ndarray, start: int = 0, **payload: object) -> list[PointRecord]:
    return [
        PointRecord(point_id(COLLECTION, str(start + i)), {"key": start + i, "tenant": "t", "terms": "x", **payload}, {"dense": v})
        for i, v in enumerate(vectors)
    ]


async def open_store(root: Path, *, background: bool) -> EdgeStore:
    store = EdgeStore(root, index_threshold_points=THRESHOLD, background_index=background)
    await store.ensure_collection(CollectionSpec(COLLECTION), [VectorSpec("dense", DIM)])
    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EdgeStore]:
    store = await open_store(tmp_path / "index", background=False)
    try:
        yield store
    finally:
        await store.close()


async def test_build_keeps_queries_answering_and_loses_no_write_made_during_it(store: EdgeStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(SEED)
    vectors = clustered(3_000, rng)
    await store.upsert(COLLECTION, records(vectors[:2_000]))
    assert await store.unindexed_vectors(COLLECTION) == 2_000
    before = await store.search_dense(COLLECTION, "dense", vectors[5], limit=10)  # payloads kept by this shard's versions

    build = asyncio.create_task(store.build_index(COLLECTION))
    while not (tmp_path / "index" / COLLECTION / "shard-1.build").exists():
        await asyncio.sleep(0.01)
    assert store.building(COLLECTION)
    # Writes during the build, which wait for the copy to finish: new points, a payload change, a deletion.
    await store.upsert(COLLECTION, records(vectors[2_000:], start=2_000))
    await store.set_payload(COLLECTION, [point_id(COLLECTION, "5")], {"kind": "changed"})
    await store.delete(COLLECTION, [point_id(COLLECTION, "7")])
    answered = 0
    while not build.done():
        hits = await store.search_dense(COLLECTION, "dense", vectors[answered % 3_000], limit=10)
        assert len(hits) == 10
        answered += 1
        await asyncio.sleep(0.01)
    assert await build is True
    assert answered > 0

    assert await store.count(COLLECTION) == 2_999
    assert await store.unindexed_vectors(COLLECTION) < THRESHOLD  # the 2,000 copied points have a graph
    [changed] = await store.retrieve(COLLECTION, [point_id(COLLECTION, "5")])
    assert changed.payload["kind"] == "changed"
    # The built shard numbers its operations afresh: nothing kept from the old one is served.
    cache = store._collection(COLLECTION).payloads
    reads = cache.reads
    after = await store.search_dense(COLLECTION, "dense", vectors[5], limit=10)
    assert cache.reads - reads == len(after)
    assert len({h.id for h in after} & {h.id for h in before}) >= 5  # read again though unchanged since
    assert next(h for h in after if h.id == point_id(COLLECTION, "5")).payload["kind"] == "changed"
    assert await store.retrieve(COLLECTION, [point_id(COLLECTION, "7")]) == []
    [late] = await store.search_dense(COLLECTION, "dense", vectors[2_500], limit=1)
    assert late.payload["key"] == 2_500

    # The built shard is the live one on disk too: a restart sees every write.
    await store.close()
    reopened = await open_store(tmp_path / "index", background=False)
    try:
        assert await reopened.count(COLLECTION) == 2_999
        assert sorted(p.name for p in (tmp_path / "index" / COLLECTION).iterdir()) == ["collection.json", "shard-1"]
    finally:
        await reopened.close()


async def test_built_index_returns_what_exact_search_returns(store: EdgeStore) -> None:
    rng = np.random.default_rng(SEED)
    vectors = clustered(2_500, rng)
    await store.upsert(COLLECTION, records(vectors))
    assert await store.build_index(COLLECTION) is True
    assert await store.unindexed_vectors(COLLECTION) == 0

    queries = vectors[rng.integers(0, len(vectors), size=50)] + rng.standard_normal((50, DIM), dtype=np.float32) * 0.01
    overlap = 0
    for query in queries:
        exact = np.argsort(-(vectors @ (query / np.linalg.norm(query))))[:10]
        hits = await store.search_dense(COLLECTION, "dense", query, limit=10)
        overlap += len({int(h.payload["key"]) for h in hits} & {int(i) for i in exact})
    assert overlap / (10 * len(queries)) >= 0.95


async def test_growth_past_the_threshold_starts_a_build_in_the_background(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "index", background=True)
    try:
        rng = np.random.default_rng(SEED)
        await store.upsert(COLLECTION, records(clustered(THRESHOLD // 2, rng)))
        assert not store.building(COLLECTION)
        await store.upsert(COLLECTION, records(clustered(THRESHOLD, rng), start=THRESHOLD // 2))
        assert store.building(COLLECTION)
        while store.building(COLLECTION):
            await asyncio.sleep(0.05)
        assert await store.unindexed_vectors(COLLECTION) == 0
        assert await store.count(COLLECTION) == THRESHOLD * 3 // 2
    finally:
        await store.close()


async def test_closing_during_a_build_stops_it_and_leaves_the_shard_whole(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "index", background=False)
    vectors = clustered(1_500, np.random.default_rng(SEED))
    await store.upsert(COLLECTION, records(vectors))
    build = asyncio.create_task(store.build_index(COLLECTION))
    while not (tmp_path / "index" / COLLECTION / "shard-1.build").exists():
        await asyncio.sleep(0.01)
    await store.close()
    with pytest.raises(asyncio.CancelledError):
        await build

    assert sorted(p.name for p in (tmp_path / "index" / COLLECTION).iterdir()) == ["collection.json", "shard"]
    reopened = await open_store(tmp_path / "index", background=False)
    try:
        assert await reopened.count(COLLECTION) == 1_500
        assert await reopened.unindexed_vectors(COLLECTION) == 1_500
    finally:
        await reopened.close()


async def test_a_build_outrun_by_writes_gives_up_and_keeps_them(
    store: EdgeStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge_collection, "CHANGE_LOG_MAX_POINTS", 300)
    vectors = clustered(2_000, np.random.default_rng(SEED))
    await store.upsert(COLLECTION, records(vectors[:1_500]))
    build = asyncio.create_task(store.build_index(COLLECTION))
    while not (tmp_path / "index" / COLLECTION / "shard-1.build").exists():
        await asyncio.sleep(0.01)
    await store.upsert(COLLECTION, records(vectors[1_500:], start=1_500))

    assert await build is False
    assert await store.count(COLLECTION) == 2_000
    assert await store.unindexed_vectors(COLLECTION) == 2_000
    assert sorted(p.name for p in (tmp_path / "index" / COLLECTION).iterdir()) == ["collection.json", "shard"]


async def test_a_collection_without_dense_vectors_never_builds(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "index", index_threshold_points=1, background_index=True)
    try:
        await store.ensure_collection(CollectionSpec("meta"))
        await store.upsert("meta", [PointRecord(point_id("meta", "a"), {"tenant": "t", "terms": "x"}, {})])
        assert not store.building("meta")
        assert await store.unindexed_vectors("meta") == 0
    finally:
        await store.close()


async def test_records_waiting_for_their_vectors_do_not_count_towards_a_build(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "index", background=True)
    try:
        lexical_first = [
            PointRecord(point_id(COLLECTION, str(i)), {"key": i, "tenant": "t", "terms": "x"}, {}) for i in range(1_500)
        ]
        await store.upsert(COLLECTION, lexical_first)
        assert not store.building(COLLECTION)
        assert await store.unindexed_vectors(COLLECTION) == 0
        vectors = clustered(1_500, np.random.default_rng(SEED))
        await store.update_vectors(COLLECTION, [(p.id, {"dense": v}) for p, v in zip(lexical_first, vectors, strict=True)])
        assert store.building(COLLECTION)
    finally:
        await store.close()


_KILLED_DURING_BUILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    import numpy as np
    from tests.engine.store.test_edge_index_build import COLLECTION, SEED, clustered, open_store, records

    async def main():
        root = Path(sys.argv[1])
        store = await open_store(root, background=False)
        vectors = clustered(2_000, np.random.default_rng(SEED))
        await store.upsert(COLLECTION, records(vectors[:1_500]))
        build = asyncio.create_task(store.build_index(COLLECTION))
        while not (root / COLLECTION / "shard-1.build").exists():
            await asyncio.sleep(0.01)
        await store.upsert(COLLECTION, records(vectors[1_500:], start=1_500))  # logged, not yet replayed
        print("building", flush=True)
        time.sleep(120)  # killed with the child still optimizing

    asyncio.run(main())
    """
)


def builds_of(root: Path) -> list[int]:
    """Pids of index-build children working under ``root``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"edge_build" in cmdline and str(root).encode() in cmdline:
            found.append(int(proc.name))
    return found


async def test_a_killed_service_leaves_a_whole_shard_and_no_build_behind(tmp_path: Path) -> None:
    root = tmp_path / "index"
    command = [sys.executable, "-c", _KILLED_DURING_BUILD, str(root)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as service:
        try:
            assert service.stdout is not None
            assert service.stdout.readline().strip() == "building"
        finally:
            os.kill(service.pid, signal.SIGKILL)
    await wait_until(lambda: not builds_of(root), timeout_s=10)

    reopened = await open_store(root, background=False)
    try:
        assert await reopened.count(COLLECTION) == 2_000  # the writes made during the build were in the WAL
        assert sorted(p.name for p in (root / COLLECTION).iterdir()) == ["collection.json", "shard"]
    finally:
        await reopened.close()
