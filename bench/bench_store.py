"""Store latency benchmark: dense, BM25 and hybrid top-10 on qdrant-edge, qdrant-client local mode and numpy.

Prints one markdown table. Quick mode (default) measures 10k points; ``--full`` adds 100k points on
edge, before and after ``optimize()`` (the HNSW build). Local mode runs at 10k only: it is a
pure-Python emulation that scans every document per text query and warns past 20k points.

Data: random normalized 384-d vectors; the text of each point is drawn from a Zipf-like
distribution over real words (ranked by their frequency in this Python's standard library source),
so term frequencies look like natural text. Queries are 2-3 mid-frequency words and a vector near
an existing point.

    python -m bench.bench_store          # quick, ~1-2 minutes on 2 cores
    python -m bench.bench_store --full   # + 100k points on edge (several minutes: HNSW build)
    python -m bench.bench_store --dense-path   # the dense path by size: exact vs. background HNSW build

``--dense-path`` prints a second table: exact dense top-10 at ``--exact-sizes`` points, and at
``--build-sizes`` the background index build (``EdgeStore.build_index``) while sequential queries
run: its wall time, the longest event-loop stall a probe coroutine saw (it sleeps 5 ms in a loop
and records the overshoot), query latency during the build, then HNSW latency and recall@10 against
numpy's exact top-10. Its vectors are clustered (unit vectors around 1,000 centres, like text
embeddings; HNSW recall on uniform noise says nothing about real data). A 100k build takes several
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata
import logging
import os
import platform
import re
import sysconfig
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from service.engine.store import CollectionSpec, Filter, Match, PointRecord, Store, VectorSpec, point_id
from service.engine.store.client import QdrantClientStore
from service.engine.store.edge import EdgeStore
from service.engine.store.edge_collection import EXACT_SEARCH_POINTS

DIM = 384
VOCABULARY = 20_000
ZIPF_EXPONENT = 1.07
DOC_WORDS = (20, 60)
QUERY_RANKS = (30, 3_000)  # query words: frequent enough to match, rare enough to discriminate
TENANTS = 40
PREFETCH_LIMIT = 50
RRF_K = 60
UPSERT_BATCH = 1_024
SEED = 7


@dataclass
class Workload:
    vectors: np.ndarray  # (n, DIM) float32, normalized
    texts: list[str]
    tenants: list[str]
    query_vectors: np.ndarray
    query_texts: list[str]


@dataclass
class Row:
    backend: str
    points: int
    build_s: float | None = None
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""


def real_vocabulary(limit: int) -> list[str]:
    """Words ranked by frequency in the standard library's source: a realistic Zipf curve."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    counts: collections.Counter[str] = collections.Counter()
    word = re.compile(r"[a-z]{3,14}")
    for path in sorted(stdlib.glob("*.py"))[:400]:
        counts.update(word.findall(path.read_text(encoding="utf-8", errors="replace").lower()))
    return [w for w, _ in counts.most_common(limit)]


def make_workload(points: int, queries: int, vocabulary: Sequence[str]) -> Workload:
    rng = np.random.default_rng(SEED)
    vectors = rng.standard_normal((points, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ranks = np.arange(1, len(vocabulary) + 1, dtype=np.float64)
    weights = ranks**-ZIPF_EXPONENT
    weights /= weights.sum()
    lengths = rng.integers(DOC_WORDS[0], DOC_WORDS[1] + 1, size=points)
    drawn = rng.choice(len(vocabulary), size=int(lengths.sum()), p=weights)
    texts, start = [], 0
    for length in lengths:
        texts.append(" ".join(vocabulary[i] for i in drawn[start : start + length]))
        start += length
    tenants = [f"tenant{i % TENANTS}" for i in range(points)]
    anchors = rng.integers(0, points, size=queries)
    query_vectors = vectors[anchors] + rng.standard_normal((queries, DIM), dtype=np.float32) * 0.05
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    lo, hi = QUERY_RANKS
    query_texts = [
        " ".join(vocabulary[i] for i in rng.integers(lo, min(hi, len(vocabulary)), size=rng.integers(2, 4)))
        for _ in range(queries)
    ]
    return Workload(vectors, texts, tenants, query_vectors, query_texts)


async def build(store: Store, collection: str, work: Workload) -> float:
    started = time.perf_counter()
    await store.ensure_collection(CollectionSpec(collection), [VectorSpec("dense", DIM)])
    for start in range(0, len(work.texts), UPSERT_BATCH):
        batch = [
            PointRecord(
                point_id(collection, str(i)),
                {"tenant": work.tenants[i], "terms": work.texts[i]},
                {"dense": work.vectors[i]},
            )
            for i in range(start, min(start + UPSERT_BATCH, len(work.texts)))
        ]
        await store.upsert(collection, batch)
    await store.flush()
    return time.perf_counter() - started


async def timed(calls: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    await call(0)  # warm-up: first-touch of pages and caches
    out = []
    for i in range(calls):
        started = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - started) * 1e3)
    return out


async def measure(store: Store, collection: str, work: Workload, dense_n: int, text_n: int) -> dict[str, list[float]]:
    qv, qt = work.query_vectors, work.query_texts
    tenant = Filter(must=(Match("tenant", "tenant3"),))
    return {
        "dense": await timed(dense_n, lambda i: store.search_dense(collection, "dense", qv[i], limit=10)),
        "bm25": await timed(text_n, lambda i: store.search_text(collection, qt[i], limit=10)),
        "hybrid": await timed(
            text_n,
            lambda i: store.search_hybrid(
                collection, "dense", qv[i], qt[i], limit=10, prefetch_limit=PREFETCH_LIMIT, rrf_k=RRF_K
            ),
        ),
        "hybrid+tenant": await timed(
            text_n,
            lambda i: store.search_hybrid(
                collection, "dense", qv[i], qt[i], tenant, limit=10, prefetch_limit=PREFETCH_LIMIT, rrf_k=RRF_K
            ),
        ),
    }


def numpy_row(work: Workload, calls: int) -> Row:
    matrix = work.vectors
    out = []
    for i in range(calls + 1):
        started = time.perf_counter()
        scores = matrix @ work.query_vectors[i % len(work.query_vectors)]
        top = np.argpartition(-scores, 10)[:10]
        _ = top[np.argsort(-scores[top])]
        if i:  # the first call is warm-up
            out.append((time.perf_counter() - started) * 1e3)
    return Row("numpy brute force", len(work.texts), latencies_ms={"dense": out})


async def edge_rows(work: Workload, calls: int, optimize: bool) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-edge-") as root:
        store = EdgeStore(Path(root))
        try:
            build_s = await build(store, "bench", work)
            exact = Row("qdrant-edge", len(work.texts), build_s, await measure(store, "bench", work, calls, calls))
            exact.note = "as ingested: exact search, no HNSW"
            rows.append(exact)
            if optimize:
                started = time.perf_counter()
                await store.optimize("bench")
                optimize_s = time.perf_counter() - started
                indexed = Row("qdrant-edge", len(work.texts), optimize_s, await measure(store, "bench", work, calls, calls))
                indexed.note = "after optimize() (HNSW); build = optimize time, blocks the process"
                rows.append(indexed)
        finally:
            await store.close()
    return rows


# ---- the dense path by size: exact search vs. the background HNSW build --------------------------

CLUSTERS = 1_000
CLUSTER_SPREAD = 0.04  # per-dimension noise around a unit centre: a point is at cosine ~0.8 from it
PROBE_SLEEP_S = 0.005


@dataclass
class DenseRow:
    points: int
    exact_ms: list[float]
    build_s: float | None = None
    stall_ms: float | None = None
    swap_ms: float | None = None  # the store's own figure: the built shard's load, the one GIL hold of the swap
    during_ms: list[float] = field(default_factory=list)
    hnsw_ms: list[float] = field(default_factory=list)
    recall: float | None = None


def clustered_vectors(points: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    centres = rng.standard_normal((CLUSTERS, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = centres[rng.integers(0, CLUSTERS, size=points)]
    vectors += rng.standard_normal((points, DIM), dtype=np.float32) * CLUSTER_SPREAD
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    asked = vectors[rng.integers(0, points, size=queries)] + rng.standard_normal((queries, DIM), dtype=np.float32) * 0.02
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    return vectors, asked


async def probe_stalls(stop: asyncio.Event, overshoots: list[float]) -> None:
    """Sleep 5 ms in a loop and record by how much each sleep overran: the event loop's stalls."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(PROBE_SLEEP_S)
        overshoots.append((time.perf_counter() - started - PROBE_SLEEP_S) * 1e3)


async def query_traffic(store: EdgeStore, queries: np.ndarray, stop: asyncio.Event, out: list[float]) -> None:
    i = 0
    while not stop.is_set():
        started = time.perf_counter()
        await store.search_dense("dense", "dense", queries[i % len(queries)], limit=10)
        out.append((time.perf_counter() - started) * 1e3)
        i += 1
        await asyncio.sleep(0.002)


async def dense_row(points: int, calls: int, build: bool) -> DenseRow:
    vectors, queries = clustered_vectors(points, calls)
    with tempfile.TemporaryDirectory(prefix="bench-dense-") as root:
        store = EdgeStore(Path(root), background_index=False)
        try:
            await store.ensure_collection(CollectionSpec("dense"), [VectorSpec("dense", DIM)])
            for start in range(0, points, UPSERT_BATCH):
                stop = min(start + UPSERT_BATCH, points)
                batch = [PointRecord(point_id("dense", str(i)), {"key": i}, {"dense": vectors[i]}) for i in range(start, stop)]
                await store.upsert("dense", batch)
            await store.flush()
            row = DenseRow(points, await timed(calls, lambda i: store.search_dense("dense", "dense", queries[i], limit=10)))
            if build:
                await build_while_serving(store, queries, row)
                row.hnsw_ms = await timed(calls, lambda i: store.search_dense("dense", "dense", queries[i], limit=10))
                row.recall = await recall_at_10(store, vectors, queries)
        finally:
            await store.close()
    return row


async def build_while_serving(store: EdgeStore, queries: np.ndarray, row: DenseRow) -> None:
    stop = asyncio.Event()
    overshoots: list[float] = []
    tasks = [
        asyncio.create_task(probe_stalls(stop, overshoots)),
        asyncio.create_task(query_traffic(store, queries, stop, row.during_ms)),
    ]
    built = BuildLog()
    store_log = logging.getLogger("service.engine.store.edge")
    level = store_log.level
    store_log.setLevel(logging.INFO)
    store_log.addHandler(built)
    started = time.perf_counter()
    try:
        await store.build_index("dense")
    finally:
        row.build_s = time.perf_counter() - started
        await asyncio.sleep(0.05)  # let the probe see the loop after the swap
        stop.set()
        await asyncio.gather(*tasks)
        store_log.removeHandler(built)
        store_log.setLevel(level)
    row.stall_ms = max(overshoots)
    row.swap_ms = built.swap_ms


class BuildLog(logging.Handler):
    """Picks the swap pause out of the store's "edge index built" log record."""

    swap_ms: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "edge index built":
            self.swap_ms = getattr(record, "swap_pause_ms", None)


async def recall_at_10(store: EdgeStore, vectors: np.ndarray, queries: np.ndarray) -> float:
    found = 0
    for query in queries:
        exact = set(np.argpartition(-(vectors @ query), 10)[:10].tolist())
        hits = await store.search_dense("dense", "dense", query, limit=10)
        found += len(exact & {int(h.payload["key"]) for h in hits})
    return found / (10 * len(queries))


def render_dense(rows: list[DenseRow]) -> str:
    lines = [
        "| points | exact p50 / p99 ms | build s | swap load ms | longest loop stall ms "
        "| queries during build p50 / p99 ms | HNSW p50 / p99 ms | recall@10 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        build = "-" if r.build_s is None else f"{r.build_s:.0f}"
        stall = "-" if r.stall_ms is None else f"{r.stall_ms:.0f}"
        swap = "-" if r.swap_ms is None else f"{r.swap_ms:.0f}"
        recall = "-" if r.recall is None else f"{r.recall:.3f}"
        lines.append(
            f"| {r.points:,} | {cell(r.exact_ms)} | {build} | {swap} | {stall} | {cell(r.during_ms)} "
            f"| {cell(r.hnsw_ms)} | {recall} |"
        )
    return "\n".join(lines)


async def run_dense(exact_sizes: Sequence[int], build_sizes: Sequence[int]) -> str:
    rows = [await dense_row(size, 200, build=size in build_sizes) for size in sorted({*exact_sizes, *build_sizes})]
    load = os.getloadavg()[0]
    return "\n".join(
        [
            "## Dense path by size (qdrant-edge)",
            "",
            f"- machine: {os.cpu_count()} CPUs, load average {load:.1f} at the end; {DIM}-d unit vectors around "
            f"{CLUSTERS:,} centres (spread {CLUSTER_SPREAD}/dim), queries near stored points; top-10, sequential",
            "- exact: as ingested (no HNSW); build: `EdgeStore.build_index` (copy, child-process optimize at nice 10, "
            "swap) while queries run every 2 ms; stall: longest overshoot of a 5 ms sleep in the serving loop",
            "",
            render_dense(rows),
        ]
    )


async def local_row(work: Workload, dense_calls: int, text_calls: int) -> Row:
    store = QdrantClientStore.local(":memory:")
    try:
        build_s = await build(store, "bench", work)
        row = Row("qdrant-client local", len(work.texts), build_s, await measure(store, "bench", work, dense_calls, text_calls))
    finally:
        await store.close()
    row.note = "pure Python; slow past 20k points, not measured there"
    return row


def cell(samples: list[float] | None) -> str:
    if not samples:
        return "-"
    p50, p99 = np.percentile(samples, [50, 99])
    return f"{p50:.2f} / {p99:.2f}"


def render(rows: list[Row]) -> str:
    kinds = ["dense", "bm25", "hybrid", "hybrid+tenant"]
    lines = [
        "| backend | points | " + " | ".join(f"{k} p50 / p99 ms" for k in kinds) + " | build s | samples | note |",
        "|---|---:|" + "---:|" * len(kinds) + "---:|---|---|",
    ]
    for row in rows:
        samples = "/".join(str(len(row.latencies_ms.get(k, []))) for k in kinds)
        build = "-" if row.build_s is None else f"{row.build_s:.1f}"
        cells = " | ".join(cell(row.latencies_ms.get(k)) for k in kinds)
        lines.append(f"| {row.backend} | {row.points:,} | {cells} | {build} | {samples} | {row.note} |")
    return "\n".join(lines)


def header(full: bool) -> str:
    versions = {name: importlib.metadata.version(name) for name in ("qdrant-edge-py", "qdrant-client", "numpy")}
    return "\n".join(
        [
            "## Store benchmark",
            "",
            f"- machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, "
            + ", ".join(f"{k} {v}" for k, v in versions.items()),
            f"- mode: {'full (10k and 100k)' if full else 'quick (10k)'}; single client, sequential calls, top-10",
            f"- data: {DIM}-d random normalized vectors; {DOC_WORDS[0]}-{DOC_WORDS[1]} words per point drawn "
            f"Zipf(s={ZIPF_EXPONENT}) over the {VOCABULARY:,} commonest words of the stdlib source; "
            f"{TENANTS} tenants",
            f"- queries: 2-3 words of frequency rank {QUERY_RANKS[0]}-{QUERY_RANKS[1]}, a vector near a stored one; "
            f"hybrid = RRF(k={RRF_K}) over dense and BM25 prefetch top-{PREFETCH_LIMIT}; "
            f"hybrid+tenant filters on one tenant ({100 // TENANTS}% of points)",
            f"- edge: exact search up to {EXACT_SEARCH_POINTS:,} points per segment, HNSW (m=16, ef_construct=100) "
            "above, built only by optimize()",
        ]
    )


async def run(full: bool) -> str:
    vocabulary = real_vocabulary(VOCABULARY)
    sizes = [10_000, 100_000] if full else [10_000]
    rows: list[Row] = []
    for size in sizes:
        work = make_workload(size, 200, vocabulary)
        rows.append(numpy_row(work, 200))
        rows += await edge_rows(work, 200, optimize=size > EXACT_SEARCH_POINTS)
        if size <= 10_000:
            rows.append(await local_row(work, dense_calls=50, text_calls=8))
    return header(full) + "\n\n" + render(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="also measure 100k points on edge (several minutes)")
    parser.add_argument("--dense-path", action="store_true", help="only the dense path table (see the module doc)")
    parser.add_argument("--exact-sizes", default="20000,50000,100000,200000", help="sizes for exact dense latency")
    parser.add_argument("--build-sizes", default="100000", help="sizes that also get a background index build")
    args = parser.parse_args(argv)
    if args.dense_path:
        exact, builds = (
            [int(s) for s in sizes.split(",") if s.strip()] for sizes in (args.exact_sizes, args.build_sizes)
        )
        print(asyncio.run(run_dense(exact, builds)))
        return 0
    print(asyncio.run(run(args.full)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
