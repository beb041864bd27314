"""A child process for the crash test: writes records, enqueues their embedding and runs the worker until killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from service.engine.analyzer import terms_text
from service.engine.records import IndexRecord, collection_spec
from service.engine.startup import open_engine
from service.settings import Settings
from service.surfaces import surfaces
from tests.callers import TEST_SECRET
from tests.helpers import MODEL_ARTIFACTS, REDIS_URL
from workers.settings import build_workers, run_workers

SPEC = collection_spec("crashdocs")
RECORDS = 600


def crash_settings(data_dir: Path, prefix: str) -> Settings:
    """The worker's settings, in the child and in the test. A killed job runs again once arq's
    in-progress key of it expires, ``job_timeout_s`` + 10 s after it started (the test waits that
    long); the timeout leaves an embed job of 512 short records (about a second) room on a busy
    machine, and one that overran it would be tried again. The suite's shared model-artifact
    directory spares the child an ONNX export."""
    return Settings(
        data_dir=data_dir,
        redis_url=REDIS_URL,
        queue_prefix=prefix,
        jwt_secret=TEST_SECRET,
        job_timeout_s=12,
        sweep_interval_s=2,
        model_artifact_dir=MODEL_ARTIFACTS,
    )


def records() -> list[IndexRecord]:
    texts = [f"document number {i} about topic {i % 7} with some words to embed: alpha beta gamma {i}" for i in range(RECORDS)]
    texts[0] = "Send an email message to a colleague with an attachment"
    return [IndexRecord(key=f"doc{i}", tenant="user:alice", kind="doc", embed_text=t, terms=terms_text(t)) for i, t in enumerate(texts)]


async def main(data_dir: Path, prefix: str) -> None:
    engine = await open_engine(crash_settings(data_dir, prefix), surfaces())
    index = await engine.register("crashdocs", SPEC)
    await index.write(records())
    print("written", flush=True)
    await run_workers(build_workers(engine))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
