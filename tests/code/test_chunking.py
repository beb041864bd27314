"""A large build chunks in worker processes with the same answer as the service process, falls back
to the service process when a worker dies, and leaves no worker behind when it stops early."""

from __future__ import annotations

import multiprocessing
import os
import signal
from contextlib import aclosing
from pathlib import Path

from service.code.chunking import POOL_MIN_FILES, ChunkedBatch, ChunkSource, chunk_here, chunked
from service.code.walker import WalkedFile

FILES = POOL_MIN_FILES + 20
PER_BATCH = 60


def _tree(root: Path) -> list[WalkedFile]:
    files = []
    for i in range(FILES):
        path = f"pkg{i % 7}/module_{i}.py"
        text = (
            f'"""Module {i}: helpers for the {i % 5} ledger."""\n\n'
            f"class Ledger{i}:\n    def post_entry(self, amount_{i}):\n        return amount_{i} * {i}\n\n"
            f"def reconcile_{i}(rows):\n    # TODO check totals\n    return sum(rows) + {i}\n"
        )
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        stat = (root / path).stat()
        files.append(WalkedFile(path, stat.st_size, stat.st_mtime_ns))
    files.append(WalkedFile("pkg0/vanished.py", 10, 1))  # listed by the walk, gone since
    return files


def _batches(files: list[WalkedFile]) -> list[list[WalkedFile]]:
    return [files[i : i + PER_BATCH] for i in range(0, len(files), PER_BATCH)]


def _flat(batches: list[ChunkedBatch]) -> tuple[list[str], list[tuple[object, ...]], list[str]]:
    files = [f.path for b in batches for f in b.files]
    chunks = [(c.key, c.path, c.start_line, c.end_line, c.kind, c.symbol, c.chunk_hash, c.content_hash, c.text) for b in batches for c in b.chunks]
    return files, chunks, [t for b in batches for t in b.terms]


async def _here(source: ChunkSource, batches: list[list[WalkedFile]]) -> list[ChunkedBatch]:
    return [await chunk_here(source, batch) for batch in batches]


async def test_worker_processes_chunk_a_large_build_as_the_service_process_would(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    source = ChunkSource(str(tmp_path), "ws1", "local/all-MiniLM-L6-v2")
    batches = _batches(files)
    got: list[ChunkedBatch] = []
    children = 0
    async with aclosing(chunked(source, batches, processes=2)) as results:
        async for batch in results:
            got.append(batch)
            children = max(children, len(multiprocessing.active_children()))
    assert children >= 1, "a build of this size chunks in worker processes"
    assert multiprocessing.active_children() == [], "the pool is gone when the build ends"
    expected = _flat(await _here(source, batches))
    assert _flat(got) == expected
    paths, chunks, terms = expected
    assert len(paths) == FILES and "pkg0/vanished.py" not in paths, "a file gone since the walk is left out"
    assert [path for b in got for path in b.gone] == ["pkg0/vanished.py"], "and named as gone (deleted)"
    assert len(chunks) == len(terms) >= FILES
    assert any("ledger" in t.split() for t in terms)


async def test_a_small_change_chunks_in_the_service_process(tmp_path: Path) -> None:
    files = _tree(tmp_path)[:30]
    source = ChunkSource(str(tmp_path), "ws1", None)
    async with aclosing(chunked(source, [*_batches(files), []], processes=2)) as results:
        async for _ in results:
            assert multiprocessing.active_children() == []


async def test_a_killed_worker_leaves_the_rest_to_the_service_process(tmp_path: Path) -> None:
    """A worker SIGKILLed after the first batch: every batch still arrives, with the same chunks."""
    files = _tree(tmp_path)
    source = ChunkSource(str(tmp_path), "ws1", None)
    batches = _batches(files)
    got: list[ChunkedBatch] = []
    async with aclosing(chunked(source, batches, processes=1)) as results:
        async for batch in results:
            if not got:
                (worker,) = multiprocessing.active_children()
                assert worker.pid is not None
                os.kill(worker.pid, signal.SIGKILL)
            got.append(batch)
    assert _flat(got) == _flat(await _here(source, batches))


async def test_a_build_that_stops_early_leaves_no_worker(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    source = ChunkSource(str(tmp_path), "ws1", None)
    async with aclosing(chunked(source, _batches(files), processes=2)) as results:
        async for _ in results:
            assert multiprocessing.active_children()
            break
    assert multiprocessing.active_children() == []
