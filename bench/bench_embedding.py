"""Embedding throughput: chunks/s through the worker pipeline (write, enqueue, arq job, store) against
``model.encode`` on the same texts in the same run. Goal: pipeline overhead under 10%.

    python -m bench.bench_embedding          # 1,024 stdlib chunks
    python -m bench.bench_embedding --full   # 4,096 chunks
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.common import machine, versions
from service.code.chunker import chunk_file
from service.engine.analyzer import terms_text
from service.engine.embeddings import load_sentence_transformer, local_model_path
from service.engine.records import IndexRecord, collection_spec
from service.engine.startup import open_engine
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each path (medians are reported)")
    args = parser.parse_args(argv)
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
