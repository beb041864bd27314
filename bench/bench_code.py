"""Workspace code search benchmark: latency against grep on the same tree, build throughput against
the model's raw ``encode``, revalidation and incremental reindex costs, and quality on CoSQA dev.

Tables (markdown), all measured in this run on this machine:
1. lexical index build of the Python standard library (walk, chunk, store, trigram, cache);
2. literal (lexical mode) and regex query latency, p50/p99, against ``grep -rn`` (and ``rg`` when
   installed) on the same tree with the same exclusions;
3. cold build throughput (chunks embedded and stored per second) against ``model.encode`` on the
   same texts, then hybrid query latency over that warm workspace;
4. revalidating the unchanged stdlib tree, and an incremental reindex after editing one function;
5. CoSQA dev (500 queries over 6,267 snippets, one file each): nDCG@10, Recall@5 and MRR@10 of
   the bare model (snippet text alone), lexical, dense (chunk text with its context) and served
   hybrid search, on the tuning half, the held-out half and all queries.

    python -m bench.bench_code          # quick: stdlib without its tests, ~2,000 chunks embedded
    python -m bench.bench_code --full   # the whole stdlib, ~6,000 chunks embedded
    python -m bench.bench_code --scale  # site-packages through a served process against ripgrep (bench_code_scale)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine, percentile, table, versions
from bench.datasets import COSQA_CORPUS, COSQA_QUERIES, dataset
from service.code.cache import CachedChunk
from service.code.context import embed_text_of, words
from service.code.ingest import write_points
from service.code.model import workspace_filter
from service.code.parsing import Mode, SearchRequest
from service.code.search import search_workspace
from service.code.semantic import embed_scope, embedder_for
from service.code.state import close_workspaces, workspaces_of
from service.code.workspace import SearchConfig, Workspace
from service.engine.embeddings import load_sentence_transformer, local_model_path
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.settings import Settings
from service.surfaces import surfaces

STDLIB = Path(sysconfig.get_paths()["stdlib"])
QUICK_SKIP = ("site-packages", "test", "idlelib", "tkinter", "lib2to3", "__pycache__")
FULL_SKIP = ("site-packages", "__pycache__")
QUICK_PACKAGES = ("json", "email", "asyncio", "http", "logging", "concurrent")
FULL_PACKAGES = (*QUICK_PACKAGES, "xml", "unittest", "importlib", "multiprocessing", "urllib", "sqlite3")

LITERALS = (
    "def __init__",
    "ValueError",
    "isinstance(",
    "self._lock",
    "subprocess.run(",
    "JSONDecodeError",
    "get_event_loop",
    "HTTPConnection",
    "__slots__",
    "raise NotImplementedError",
    "os.path.join",
    "threading.Lock()",
    "_PyHASH_MODULUS",
    "quopri",
    "SMTPAuthenticationError",
    "collections.OrderedDict",
)
REGEXES = (
    r"class [A-Z][a-z]+Error\(",
    r"def test_[a-z]+_timeout",
    r"raise [A-Z][a-zA-Z]*Error\(",
    r"^\s*async def [a-z_]+\(self",
    r"TODO|FIXME|XXX",
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"import (os|sys)$",
    r"except [A-Za-z]+ as [a-z]+:",
)
HYBRID_QUERIES = (
    "parse an email address into name and address",
    "decode a json document from a string",
    "run a coroutine until it completes",
    "send an http request and read the response",
    "rotate log files when they get too big",
    "wait for the first of several futures to finish",
    "encode header values with quoted printable",
    "cancel a task after a timeout",
    "format a log record as text",
    "read the status line of an http response",
    "pretty print json with indentation",
    "create a subprocess and read its output asynchronously",
    "split a multipart message into parts",
    "thread pool executor shutdown",
    "handle a cookie header",
    "stream reader read until a separator",
)


def settings_for(data_dir: Path, allowed: Path) -> Settings:
    return Settings(
        data_dir=data_dir,
        queue_prefix=f"agentsearch-bench-code-{uuid.uuid4().hex[:8]}",
        jwt_secret="bench-secret-" + "x" * 32,
        allowed_roots=(allowed,),
        revalidate_interval_s=3_600.0,  # steady-state queries: revalidation is measured on its own
        rate_limits_enabled=False,
    )


def ms(values: Sequence[float]) -> str:
    return f"{percentile(values, 50):.1f} / {percentile(values, 99):.1f}"


async def timed(calls: Sequence[Callable[[], Awaitable[Any]]], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        for call in calls:
            started = time.perf_counter()
            await call()
            out.append((time.perf_counter() - started) * 1e3)
    return out


def timed_process(commands: Sequence[list[str]], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        for command in commands:
            started = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            out.append((time.perf_counter() - started) * 1e3)
    return out


def request(query: str, mode: Mode = Mode.LEXICAL, *, regex: bool = False, limit: int = 20) -> SearchRequest:
    return SearchRequest(query=query, mode=mode, regex=regex, limit=limit)


# ---- 1-2: the stdlib, lexically ------------------------------------------------------------------


async def stdlib_lexical(engine: Engine, skip: tuple[str, ...], repeats: int) -> Workspace:
    workspaces = workspaces_of(engine)
    workspace, _ = await workspaces.register("user:bench", STDLIB, SearchConfig(skip_dirs=skip))
    started = time.perf_counter()
    fresh = await workspaces.revalidate(workspace, force=True)
    build_s = time.perf_counter() - started
    report = fresh.report
    assert report is not None
    table(
        "Lexical index build (stdlib; walk, chunk, BM25 terms, store, trigram, chunk cache)",
        ["files", "chunks", "seconds", "chunks/s"],
        [[report.files_seen, report.chunks_added, f"{build_s:.1f}", f"{report.chunks_added / build_s:,.0f}"]],
    )
    excludes = [f"--exclude-dir={name}" for name in skip]
    grep = ["grep", "-rn", "-I", *excludes]
    rows = []
    ours = await timed([lambda q=q: search_workspace(engine, workspace, request(q), background=False) for q in LITERALS], repeats)
    grep_ms = timed_process([[*grep, "-F", "-e", q, str(STDLIB)] for q in LITERALS], 1)
    rows.append(["literal (lexical mode, top 20)", len(LITERALS), ms(ours), ms(grep_ms), f"{percentile(grep_ms, 50) / percentile(ours, 50):.0f}x"])
    ours_re = await timed([lambda p=p: search_workspace(engine, workspace, request(p, regex=True, limit=50), background=False) for p in REGEXES], repeats)
    grep_re = timed_process([[*grep, "-E", "-e", p, str(STDLIB)] for p in REGEXES], 1)
    rows.append(["regex (first 50 lines)", len(REGEXES), ms(ours_re), ms(grep_re), f"{percentile(grep_re, 50) / percentile(ours_re, 50):.0f}x"])
    rg = shutil.which("rg")
    header = ["query kind", "queries", "agentsearch p50 / p99 ms", "grep -rn p50 / p99 ms", "speed-up (p50)"]
    if rg:
        rg_globs = [arg for name in skip for arg in ("-g", f"!{name}/")]
        rg_ms = timed_process([[rg, "-n", *rg_globs, "-F", "-e", q, str(STDLIB)] for q in LITERALS], 1)
        rg_re = timed_process([[rg, "-n", *rg_globs, "-e", p, str(STDLIB)] for p in REGEXES], 1)
        header.append("rg p50 / p99 ms")
        rows[0].append(ms(rg_ms))
        rows[1].append(ms(rg_re))
    table(f"Literal and regex latency over the same tree ({report.files_seen} files; grep prints every match{', rg installed' if rg else ', rg not installed'})", header, rows)

    revalidations = []
    for _ in range(3):
        started = time.perf_counter()
        await workspaces.revalidate(workspace, force=True)
        revalidations.append((time.perf_counter() - started) * 1e3)
    table("Revalidation of the unchanged stdlib tree (walk + mtime/size compare)", ["files", "p50 ms", "max ms"], [[report.files_seen, f"{percentile(revalidations, 50):.0f}", f"{max(revalidations):.0f}"]])
    return workspace


# ---- 3-4: a warm workspace: build throughput, hybrid latency, incremental reindex -----------------


def copy_packages(target: Path, packages: Sequence[str]) -> Path:
    for package in packages:
        shutil.copytree(STDLIB / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


async def embed_all(engine: Engine, workspace: Workspace) -> int:
    embedder = embedder_for(engine, workspace)
    assert embedder is not None
    with workspaces_of(engine).cache_view(workspace) as cache:
        await write_points(engine, workspace, cache, queue=False)  # a cold workspace's chunks have no points yet
    total = 0
    while embedded := await embed_scope(engine, embedder, workspace_filter(workspace), 1_024):
        total += embedded
    return total


async def warm_workspace_numbers(engine: Engine, root: Path, repeats: int) -> None:
    workspaces = workspaces_of(engine)
    workspace, _ = await workspaces.register("user:bench", root, SearchConfig())
    await workspaces.revalidate(workspace, force=True)
    runtime = await workspaces.runtime(workspace)
    texts = [embed_text_of(c.path, c.symbol, c.text) for rows in runtime.cache.iter_chunks() for c in rows]
    model = load_sentence_transformer(local_model_path("all-MiniLM-L6-v2"))
    model.encode(texts[:32], batch_size=32)  # warm-up
    started = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    raw_rate = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    embedded = await embed_all(engine, workspace)
    ours_rate = embedded / (time.perf_counter() - started)
    table(
        "Cold build throughput (embed + store every chunk) against raw model.encode on the same texts",
        ["chunks", "agentsearch chunks/s", "model.encode chunks/s", "ratio"],
        [[embedded, f"{ours_rate:.0f}", f"{raw_rate:.0f}", f"{ours_rate / raw_rate:.2f}"]],
    )

    cold = await timed([lambda q=q: search_workspace(engine, workspace, request(q, Mode.HYBRID, limit=10), background=False) for q in HYBRID_QUERIES], 1)
    warm = await timed([lambda q=q: search_workspace(engine, workspace, request(q, Mode.HYBRID, limit=10), background=False) for q in HYBRID_QUERIES], repeats)
    lexical = await timed([lambda q=q: search_workspace(engine, workspace, request(q, Mode.LEXICAL, limit=10), background=False) for q in HYBRID_QUERIES], repeats)
    table(
        f"Hybrid query latency over the warm workspace ({embedded} chunks, scope '.')",
        ["mode", "queries", "p50 / p99 ms"],
        [
            ["hybrid, query embedding not cached", len(cold), ms(cold)],
            ["hybrid, query embedding cached", len(warm), ms(warm)],
            ["lexical (same queries)", len(lexical), ms(lexical)],
        ],
    )

    target = root / "json" / "decoder.py"
    text = target.read_text()
    target.write_text(text.replace('"""Scan the string s for a JSON string.', '"""Scan the string s for a JSON string (edited).', 1))
    started = time.perf_counter()
    fresh = await workspaces.revalidate(workspace, force=True)
    revalidate_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    reembedded = await embed_all(engine, workspace)
    embed_ms = (time.perf_counter() - started) * 1e3
    report = fresh.report
    assert report is not None
    table(
        "Incremental reindex after editing one function (json/decoder.py)",
        ["files changed", "chunks re-embedded / total", "chunks kept", "revalidate ms", "re-embed ms"],
        [[report.files_changed, f"{reembedded} / {runtime.cache.chunk_count()}", report.chunks_kept, f"{revalidate_ms:.0f}", f"{embed_ms:.0f}"]],
    )


# ---- 5: CoSQA --------------------------------------------------------------------------------------


def metrics(rankings: Sequence[Sequence[int]], wanted: Sequence[int]) -> dict[str, float]:
    mrr = recall5 = ndcg = 0.0
    for ranked, target in zip(rankings, wanted, strict=True):
        rank = ranked.index(target) + 1 if target in ranked else None
        if rank is not None and rank <= 10:
            mrr += 1 / rank
            ndcg += 1 / math.log2(rank + 1)
        if rank is not None and rank <= 5:
            recall5 += 1
    n = len(wanted)
    return {"MRR@10": mrr / n, "Recall@5": recall5 / n, "nDCG@10": ndcg / n}


def rrf_files(lexical: Sequence[int], dense: Sequence[int], k: int, dense_weight: float) -> list[int]:
    scores: dict[int, float] = {}
    for rank, idx in enumerate(lexical, start=1):
        scores[idx] = scores.get(idx, 0.0) + 1 / (k + rank)
    for rank, idx in enumerate(dense, start=1):
        scores[idx] = scores.get(idx, 0.0) + dense_weight / (k + rank)
    return sorted(scores, key=lambda idx: -scores[idx])


# The dev queries are split once: ranking choices are tuned on the first half, the second is held out.
SPLIT_SEED = 7
METRICS = ("nDCG@10", "Recall@5", "MRR@10")
BARE = "bare dense (snippet text alone)"
LEXICAL = "lexical (BM25 + literal)"
DENSE = "dense (chunk text with its context)"
HYBRID = "hybrid (served)"


def split_halves(count: int) -> tuple[list[int], list[int]]:
    """Query positions of the tuning half and the held-out half (a fixed-seed shuffle, cut in two)."""
    order = list(range(count))
    random.Random(SPLIT_SEED).shuffle(order)
    return sorted(order[: count // 2]), sorted(order[count // 2 :])


def scored_halves(ranked: Sequence[Sequence[int]], wanted: Sequence[int]) -> dict[str, dict[str, float]]:
    tune, held_out = split_halves(len(wanted))
    return {
        "tune": metrics([ranked[i] for i in tune], [wanted[i] for i in tune]),
        "held-out": metrics([ranked[i] for i in held_out], [wanted[i] for i in held_out]),
        "all": metrics(ranked, wanted),
    }


async def bare_dense(engine: Engine, corpus: Sequence[dict[str, Any]], queries: Sequence[str], cache: Path) -> list[list[int]]:
    """The bare model's ranking: each snippet's text alone embedded, nearest by cosine (top 50).
    The vectors are kept in ``cache`` (keyed by model and texts): they do not depend on the service."""
    embedder = engine.embedders.default
    assert embedder is not None
    texts = [str(item["code"]) for item in corpus]
    digest = hashlib.sha256("\x00".join([embedder.vector_name, *texts]).encode()).hexdigest()[:16]
    path = cache / f"bare-dense-{digest}.npy"
    if path.exists():
        documents = np.load(path)
    else:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 256):
            vectors.extend(await embedder.embed_documents(texts[start : start + 256]))
        documents = np.asarray(vectors, dtype=np.float32)
        np.save(path, documents)
    ids = np.asarray([int(item["idx"]) for item in corpus])
    rankings = []
    for text in queries:
        query = np.asarray(await embedder.embed_query(text), dtype=np.float32)
        top = np.argsort(-(documents @ query))[:50]
        rankings.append([int(i) for i in ids[top]])
    return rankings


async def served_rankings(engine: Engine, workspace: Workspace, queries: Sequence[str]) -> dict[str, list[list[int]]]:
    """Each query's snippets in the order lexical, dense and hybrid search serve them (top 50)."""
    rankings: dict[str, list[list[int]]] = {}
    for label, mode in ((LEXICAL, Mode.LEXICAL), (DENSE, Mode.SEMANTIC), (HYBRID, Mode.HYBRID)):
        rankings[label] = []
        for query in queries:
            answer = await search_workspace(engine, workspace, request(query, mode, limit=50), background=False)
            rankings[label].append(list(dict.fromkeys(int(r["path"].rsplit("/", 1)[1].split(".")[0]) for r in answer.results)))
    return rankings


def halves_table(title: str, rankings: dict[str, list[list[int]]], wanted: Sequence[int]) -> dict[str, dict[str, dict[str, float]]]:
    halves = {label: scored_halves(ranked, wanted) for label, ranked in rankings.items()}
    parts = ("tune", "held-out", "all")
    table(
        title,
        ["search", *(f"{metric} {part}" for metric in METRICS for part in parts)],
        [[label, *(f"{scores[part][metric]:.3f}" for metric in METRICS for part in parts)] for label, scores in halves.items()],
    )
    return halves


def name_query(chunks: Sequence[CachedChunk]) -> str:
    """The words of the first named chunk's own symbol ("" when none is named)."""
    symbol = next((chunk.symbol for chunk in chunks if chunk.symbol), "")
    return words(symbol.rpartition(".")[2])


async def cosqa_quality(engine: Engine, root: Path) -> dict[str, dict[str, float]]:
    corpus = json.loads(dataset(COSQA_CORPUS).read_text())
    queries = json.loads(dataset(COSQA_QUERIES).read_text())
    (root / "snippets").mkdir(parents=True, exist_ok=True)
    for item in corpus:
        path = root / "snippets" / f"{item['idx']}.py"
        if not path.exists() or path.read_text() != item["code"]:  # a kept cache stays valid: mtimes unchanged
            path.write_text(item["code"])
    workspaces = workspaces_of(engine)
    workspace, _ = await workspaces.register("user:bench", root, SearchConfig())
    started = time.perf_counter()
    await workspaces.revalidate(workspace, force=True)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    embedded = await embed_all(engine, workspace)
    embed_s = time.perf_counter() - started
    print(f"_CoSQA corpus: {len(corpus)} snippets, {embedded} chunks embedded in this run; lexical index {index_s:.0f} s, embedding {embed_s:.0f} s._\n")
    rankings = await served_rankings(engine, workspace, [str(item["query"]) for item in queries])
    rankings = {BARE: await bare_dense(engine, corpus, [str(item["query"]) for item in queries], root.parent), **rankings}
    wanted = [int(item["idx"]) for item in queries]
    halves = halves_table(f"Quality on CoSQA dev ({len(queries)} queries, {len(corpus)} snippets; tune / held-out: the two halves of a seed-{SPLIT_SEED} shuffle)", rankings, wanted)

    # The same targets asked by name (what an agent types when it half-remembers a function): a
    # query kind where the lexical side is the one to trust, beside CoSQA's where dense is.
    runtime = await workspaces.runtime(workspace)
    names = [name_query(runtime.cache.chunks_of([f"snippets/{idx}.py"]).get(f"snippets/{idx}.py", [])) for idx in wanted]
    asked = [i for i, name in enumerate(names) if name]
    by_name = await served_rankings(engine, workspace, [names[i] for i in asked])
    by_name = {BARE: await bare_dense(engine, corpus, [names[i] for i in asked], root.parent), **by_name}
    halves_table(f"The same targets asked by name ({len(asked)} queries: each target's own symbol as words, e.g. ``parse_searchBody`` -> ``parse search body``)", by_name, [wanted[i] for i in asked])

    lexical, dense = rankings[LEXICAL], rankings[DENSE]
    sweep = []
    for k in (5, 20, 60):
        for dense_weight in (1.0, 1.5, 2.0):
            fused = [rrf_files(lex, den, k, dense_weight) for lex, den in zip(lexical, dense, strict=True)]
            m = metrics(fused, wanted)
            sweep.append([k, dense_weight, f"{m['nDCG@10']:.3f}", f"{m['MRR@10']:.3f}", f"{m['Recall@5']:.3f}"])
    table(
        "For comparison: plain RRF of the lexical and dense lists above (file level, fixed weights; the service weighs each side by how far it can be trusted for the query)",
        ["RRF k", "dense weight", "nDCG@10", "MRR@10", "Recall@5"],
        sweep,
    )
    return {label: scores["all"] for label, scores in halves.items()}


async def run(full: bool, quality: bool, cosqa_cache: Path | None, speed: bool = True) -> int:
    print(f"## Code search ({'full' if full else 'quick'})\n\n_{machine()}; {versions()}_\n", flush=True)
    repeats = 3 if full else 2
    status = 0
    with tempfile.TemporaryDirectory(prefix="bench-code-") as tmp:
        base = Path(tmp)
        (base / "trees").mkdir()
        if speed:
            engine = await open_engine(settings_for(base / "data", STDLIB.parent), surfaces())
            try:
                await load_model(engine)
                await stdlib_lexical(engine, FULL_SKIP if full else QUICK_SKIP, repeats)
                close_workspaces(engine)
                await warm_workspace_numbers(engine, copy_packages(base / "trees" / "warm", FULL_PACKAGES if full else QUICK_PACKAGES), repeats)
            finally:
                close_workspaces(engine)
                await engine.close()
        if quality:
            home = cosqa_cache or base / "cosqa"
            (home / "tree").mkdir(parents=True, exist_ok=True)
            engine = await open_engine(settings_for(home / "data", home), surfaces())
            try:
                await load_model(engine)
                scores = await cosqa_quality(engine, home / "tree")
            finally:
                close_workspaces(engine)
                await engine.close()
            hybrid = scores[HYBRID]
            beaten = all(hybrid[m] > scores[label][m] for label in (LEXICAL, DENSE) for m in ("MRR@10", "Recall@5"))
            gains = ", ".join(f"{hybrid['nDCG@10'] - other['nDCG@10']:+.3f} over {label}" for label, other in scores.items() if label != HYBRID)
            print(f"_hybrid nDCG@10 (all queries): {gains}; hybrid beats lexical and dense on MRR@10 and Recall@5: {'yes' if beaten else 'NO'}_\n")
            status = 0 if beaten else 1
    return status


async def load_model(engine: Engine) -> None:
    embedder = engine.embedders.default
    load = getattr(embedder, "load", None)
    if load is not None:
        await load()


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--scale" in arguments:  # code search at monorepo scale against ripgrep: its own options
        from bench import bench_code_scale

        return bench_code_scale.main(arguments)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the whole stdlib and more embedded chunks")
    parser.add_argument("--no-quality", action="store_true", help="skip CoSQA (embedding 6,267 snippets takes minutes)")
    parser.add_argument("--quality-only", action="store_true", help="only the CoSQA quality tables")
    parser.add_argument("--cosqa-cache", metavar="DIR", help="keep the CoSQA workspace (and its embeddings) here between runs")
    parser.add_argument("--threads", type=int, help="torch threads (1 is much faster on a machine other processes load)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        print(f"_torch threads: {args.threads}_\n")
    cache = Path(args.cosqa_cache) if args.cosqa_cache else None
    return asyncio.run(run(args.full, not args.no_quality, cache, speed=not args.quality_only))


if __name__ == "__main__":
    sys.exit(main())
