"""A worker killed with SIGKILL while an embed job runs: the records stay searchable, and after a
restart that job's records (and every other) are embedded."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from service.engine.queue import deserialize
from service.engine.records import DONE, tenant_filter
from service.engine.search import retrieve
from service.engine.startup import open_engine
from service.surfaces import surfaces
from tests.helpers import wait_until
from tests.workers.crash_worker import RECORDS, SPEC, crash_settings
from workers.settings import build_workers, run_workers, stop_workers

ROOT = Path(__file__).resolve().parents[2]


async def test_sigkill_mid_embed_then_sweeper_completes(tmp_path: Path, redis_prefix: str) -> None:
    data_dir = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.crash_worker", str(data_dir), redis_prefix],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert line.strip() == b"written"
        # Kill while an embed job is in progress: arq marks a running job with an in-progress key of
        # its id, and embed job ids are `<prefix>:embed:...` (the sweeper's cron run sets one too, so
        # any in-progress key would not do).
        import redis.asyncio as aioredis

        probe = aioredis.from_url("redis://127.0.0.1:6379/0")
        running: list[str] = []
        try:

            async def embed_job_running() -> bool:
                running.extend([k.decode() async for k in probe.scan_iter(match=f"arq:in-progress:{redis_prefix}:embed:*")])
                return bool(running)

            await wait_until(embed_job_running, timeout_s=120, interval_s=0.05)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            killed_job = running[0].removeprefix("arq:in-progress:")
            body = await probe.get(f"arq:job:{killed_job}")
        finally:
            await probe.aclose()
        assert body is not None, "the killed job is still queued for a re-run"
        job = deserialize(body)
        assert job["f"] == "embed_records"
        killed_keys = [key for key, _ in job["a"][1]]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()

    engine = await open_engine(crash_settings(data_dir, redis_prefix), surfaces())
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
        records = await index.get_many(killed_keys)
        assert len(records) == len(killed_keys) and all(r["embed_state"] == DONE for r in records.values()), "the killed job's records are embedded"
    finally:
        await engine.close()
