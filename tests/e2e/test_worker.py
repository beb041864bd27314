"""End to end with the worker in its own process: a front end (``agentsearch serve`` with
``AGENTSEARCH_WORKER_IN_PROCESS=false``) takes ingests and queues their jobs in the real Redis,
``agentsearch worker --burst`` drains the queues in a separate process, and the restarted front end
answers hybrid searches over what the worker embedded and indexed.

Why the processes run one after the other, not side by side as in production: production shares
the index through a Qdrant server, and the test machines cannot run a Qdrant server. Both
stores available here admit one process per directory (qdrant-edge behind our file lock, and
qdrant-client's local mode behind its own), so the front end stops before the worker opens the
store, and the worker exits (``--burst``) before the front end comes back. What is real: separate
processes, the queue in Redis between them, the worker's jobs (embedding, workspace indexing) and
the front end reading their results from disk. It runs on the embedded default and on the
qdrant-client adapter (the production adapter, in local mode on a directory: ``qdrant_path``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from service.settings import Settings
from tests.callers import ALICE_PRO, TEST_SECRET
from tests.code.trees import write_tree
from tests.helpers import ROOT, serving

PACKAGES = [
    {"type": "package", "id": "refunds", "name": "@alice/refunds", "summary": "Refund a card payment and send the money back to the customer."},
    {"type": "package", "id": "weather", "name": "@alice/weather", "summary": "Get the weather forecast for a city tomorrow."},
    {"type": "package", "id": "mailer", "name": "@alice/mailer", "summary": "Send an email message to a colleague with an attachment."},
]

REWORDED = "reimburse a purchase"


def environment(settings: Settings, store: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "AGENTSEARCH_DATA_DIR": str(settings.data_dir),
        "REDIS_URL": settings.redis_url,
        "AGENTSEARCH_QUEUE_PREFIX": settings.queue_prefix,
        "AGENTSEARCH_JWT_SECRET": TEST_SECRET,
        "AGENTSEARCH_ALLOWED_ROOTS": str(settings.allowed_roots[0]),
        "AGENTSEARCH_SINGLE_TENANT": "true",
        "AGENTSEARCH_WORKER_IN_PROCESS": "false",
        "AGENTSEARCH_RATE_LIMITS_ENABLED": "false",
    }
    if store == "qdrant-local":
        env["AGENTSEARCH_QDRANT_PATH"] = str(settings.data_dir / "qdrant")
    return env


@asynccontextmanager
async def front_end(env: dict[str, str]) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """``agentsearch serve`` as its own process, ready (model loaded); stopped with SIGTERM on exit."""
    async with serving(env, ready_timeout_s=120, stop_timeout_s=60, clean_exit=True) as served:
        yield served.session, served.base


async def call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with session.request(method, url, json=body, headers=ALICE_PRO) as response:
        data = await response.json()
        assert response.status < 300, (response.status, data)
        return data


def catalog_counts(status: dict[str, Any]) -> dict[str, int]:
    surfaces = status.get("surfaces", status)
    counts: dict[str, int] = surfaces["catalog"]
    return counts


@pytest.mark.parametrize("store", ["edge", "qdrant-local"])
async def test_front_end_queues_and_a_separate_worker_process_does_the_work(settings: Settings, store: str) -> None:
    env = environment(settings, store)
    tree = write_tree(settings.allowed_roots[0] / "repo")

    async with front_end(env) as (session, base):
        await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": PACKAGES})
        workspace = await call(session, "POST", f"{base}/v1/workspaces", {"root": str(tree)})
        counts = catalog_counts(await call(session, "GET", f"{base}/v1/index/status"))
        # No worker in this process: records are searchable lexically, their embedding is queued.
        assert counts["records"] >= len(PACKAGES) and counts["embedded"] == 0 and counts["pending"] == counts["records"]
        lexical = await call(session, "POST", f"{base}/v1/catalog/search", {"query": "refund the customer payment"})
        assert lexical["structuredContent"]["results"][0]["entity"].endswith("refunds")
        # A query sharing no word with the record: only its vector can find it, and it has none yet.
        unembedded = await call(session, "POST", f"{base}/v1/catalog/search", {"query": REWORDED})
        assert not any(hit["entity"].endswith("refunds") for hit in unembedded["structuredContent"]["results"])

    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "worker", "--burst",
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(worker.communicate(), timeout=300)
    assert worker.returncode == 0, out.decode()

    async with front_end(env) as (session, base):
        counts = catalog_counts(await call(session, "GET", f"{base}/v1/index/status"))
        assert counts["pending"] == 0 and counts["embedded"] == counts["records"] >= len(PACKAGES)
        hybrid = await call(session, "POST", f"{base}/v1/catalog/search", {"query": REWORDED})
        assert hybrid["structuredContent"]["mode"] == "hybrid", hybrid["structuredContent"]["notices"]
        assert hybrid["structuredContent"]["results"][0]["entity"].endswith("refunds")
        # The workspace was indexed by the worker's index job (its chunk cache and points are there).
        state = await call(session, "GET", f"{base}/v1/workspaces/{workspace['id']}")
        assert state["files"] > 0 and state["chunks"] > 0
        found = await call(session, "POST", f"{base}/v1/workspaces/{workspace['id']}/search", {"query": "refund payment money back customer"})
        assert found["meta"]["mode"] == "hybrid", found["notices"]
        assert found["results"][0]["path"] == "src/pkg/billing.py"
