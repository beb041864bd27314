"""Building a collection's HNSW graphs away from the serving process: a child process optimizes a copy of the shard.

qdrant-edge's ``optimize()`` holds the GIL for the whole build (minutes at 100k 384-d points), so
the serving process never calls it. Instead (see ``EdgeStore.build_index``) it copies its flushed
shard directory, and a child process started with ``python -m service.engine.store.edge_build``
loads the copy, optimizes it at a lower CPU priority and exits. The serving process then loads the
result in place of its shard. The child writes the built segments' vectors and graphs with
``Memory.Cold`` placement (plain mmap, served from the page cache): loading them does not copy them
into RAM first, which keeps the serving process's swap pause short (~0.1 s at 100k points against
~0.25 s with the default placement). Before that load the parent reads the result's files once in
a thread (``read_through``): a page fault inside the engine holds the GIL, and with other disk
traffic a cold one took seconds here, so the engine must find every page already cached.

The child is told everything on its command line (one JSON argument) and imports nothing of the
service but this module.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

HNSW_M = 16
HNSW_EF_CONSTRUCT = 100
# A shard searches on one thread of its own. Its default pool (eight threads here, on two cores)
# runs a batch's segments in parallel while the caller holds the GIL waiting for them: under an
# uncached search mix at 190 searches/s the default pool, with the int8 query encoder on two
# threads, reached p99 393-1,383 ms, and one thread each 115-166 ms; at 100k records one search
# alone took the same time either way (ranked query p50 8.4-9.9 ms against 9.1-9.2).
SEARCH_THREADS = 1

# How much nicer than the serving process the child runs: it uses idle CPU and yields to queries.
BUILD_NICENESS = 10
_STDERR_TAIL = 2_000
_PR_SET_PDEATHSIG = 1
_READ_CHUNK = 4 * 2**20


class BuildFailed(Exception):
    """The child process could not optimize the copy; the message carries its exit status and stderr's tail."""


def edge_config(
    vectors: Mapping[str, int], placeholder_sparse: str | None, threshold_kb: int, *, cold: bool = False
) -> qe.EdgeConfig:
    """The shard configuration: cosine dense ``vectors`` (name -> size), HNSW for segments over ``threshold_kb``.

    ``cold`` places the vectors and graphs built from now on as plain mmap (see the module docstring).
    """
    memory = qe.Memory.Cold if cold else None
    return qe.EdgeConfig(
        vectors={name: qe.EdgeVectorParams(size, qe.Distance.Cosine, memory=memory) for name, size in vectors.items()},
        sparse_vectors={placeholder_sparse: qe.EdgeSparseVectorParams()} if placeholder_sparse else None,
        hnsw_config=qe.HnswIndexConfig(
            m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=threshold_kb, memory=memory
        ),
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=threshold_kb),
        max_search_threads=SEARCH_THREADS,
    )


def copy_shard(source: Path, target: Path) -> None:
    """Copy the shard directory ``source`` to ``target`` (which must not exist); run it in a thread."""
    shutil.copytree(source, target)


def read_through(path: Path) -> int:
    """Read every file under ``path`` once, so that its pages are in the page cache; returns the bytes read.

    Runs in a thread: each read releases the GIL.
    """
    total = 0
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        with open(file, "rb", buffering=0) as f:
            while chunk := f.read(_READ_CHUNK):
                total += len(chunk)
    return total


async def optimize_copy(
    shard_dir: Path, vectors: Mapping[str, int], placeholder_sparse: str | None, threshold_kb: int
) -> dict[str, Any]:
    """Optimize the shard copy at ``shard_dir`` in a child process; returns the child's report.

    Raises ``BuildFailed`` if the child fails. Cancelling kills the child.
    """
    job = {
        "shard_dir": str(shard_dir),
        "vectors": dict(vectors),
        "placeholder_sparse": placeholder_sparse,
        "threshold_kb": threshold_kb,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        json.dumps(job),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
        raise BuildFailed(f"the index build of {shard_dir} exited with status {proc.returncode}: {tail}")
    report: dict[str, Any] = json.loads(out.decode("utf-8").strip().splitlines()[-1])
    return report


def build(job: Mapping[str, Any]) -> dict[str, Any]:
    """The child's work: load the copy, optimize it, flush and close. Returns what it did."""
    started = time.monotonic()
    config = edge_config(job["vectors"], job["placeholder_sparse"], int(job["threshold_kb"]), cold=True)
    shard = qe.EdgeShard.load(str(job["shard_dir"]), config)
    try:
        changed = shard.optimize()
        info = shard.info()
        shard.flush()
    finally:
        shard.close()
    return {
        "changed": changed,
        "points": info.points_count,
        "indexed_vectors": info.indexed_vectors_count,
        "segments": info.segments_count,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print("usage: python -m service.engine.store.edge_build JOB_JSON", file=sys.stderr)
        return 2
    _die_with_parent()
    os.nice(BUILD_NICENESS)
    print(json.dumps(build(json.loads(args[0]))), flush=True)
    return 0


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the serving process dies: a build nobody will swap in is waste.

    ``optimize()`` holds the GIL, so no watchdog thread could notice; prctl(PR_SET_PDEATHSIG) needs none.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the request took effect
        raise SystemExit(1)


__all__ = ["BuildFailed", "copy_shard", "edge_config", "optimize_copy", "read_through"]


if __name__ == "__main__":
    raise SystemExit(main())
