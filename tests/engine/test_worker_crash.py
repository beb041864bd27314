"""A worker killed with SIGKILL mid-embed: the records stay searchable and the sweeper completes them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from service.engine.records import tenant_filter
from service.engine.runtime import open_engine
from service.engine.search import retrieve
from tests.conftest import wait_until
from tests.engine.crash_worker import RECORDS, SPEC, crash_settings
from workers.settings import build_workers, run_workers, stop_workers

ROOT = Path(__file__).resolve().parents[2]


async def test_sigkill_mid_embed_then_sweeper_completes(tmp_path: Path, redis_prefix: str) -> None:
    data_dir = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.engine.crash_worker", str(data_dir), redis_prefix],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert line.strip() == b"written"
        # Kill while an embed job is in progress (arq marks it with an in-progress key).
        import redis.asyncio as aioredis

        probe = aioredis.from_url("redis://127.0.0.1:6379/0")
        try:

            async def job_running() -> bool:
                return bool([k async for k in probe.scan_iter(match=f"arq:in-progress:{redis_prefix}*")])

            await wait_until(job_running, timeout_s=120, interval_s=0.05)
        finally:
            await probe.aclose()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()

    engine = await open_engine(crash_settings(data_dir, redis_prefix))
    try:
        index = await engine.register("crashdocs", SPEC)
        counts = await index.counts()
        assert counts["records"] == RECORDS
        assert counts["pending"] > 0, "the kill landed before every record was embedded"
        found = await retrieve(engine.store, SPEC.name, "email attachment", tenant_filter(["user:alice"]), embedder=None)
        assert found.hits and found.hits[0].payload["key"] == "doc0", "pending records stay searchable lexically"

        workers = build_workers(engine)
        task = asyncio.create_task(run_workers(workers))
        try:

            async def all_embedded() -> bool:
                return (await index.counts())["pending"] == 0

            await wait_until(all_embedded, timeout_s=240, interval_s=0.5)
        finally:
            stop_workers(workers)
            await asyncio.wait_for(task, timeout=60)
        assert (await index.counts()) == {"records": RECORDS, "embedded": RECORDS, "pending": 0}
    finally:
        await engine.close()
