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
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata
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
    args = parser.parse_args(argv)
    print(asyncio.run(run(args.full)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
