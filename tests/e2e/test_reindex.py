"""End to end: a model change on a running service. The service, restarted with a new default model,
keeps serving the old one; ``agentsearch reindex`` (its own process) finds the data directory held
by the service and queues the reindex job there; searches over HTTP go on during the fill, on the
old model's vectors; after the switch the service embeds queries with the new model.

Model A is the packaged MiniLM, model B a real OpenAI-compatible HTTP server the test starts.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import orjson

from service.settings import Settings
from tests.e2e.test_worker import PACKAGES, REWORDED, call, catalog_counts, environment, front_end
from tests.engine.model_server import ModelServer
from tests.helpers import ROOT, wait_until


async def search(session: aiohttp.ClientSession, base: str, query: str) -> dict[str, Any]:
    found: dict[str, Any] = (await call(session, "POST", f"{base}/v1/catalog/search", {"query": query}))["structuredContent"]
    return found


async def test_reindex_on_a_running_service_fills_while_it_serves_then_switches(settings: Settings) -> None:
    model_b = await ModelServer().start()
    try:
        env_a = {**environment(settings, "edge"), "AGENTSEARCH_WORKER_IN_PROCESS": "true"}
        async with front_end(env_a) as (session, base):
            await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": PACKAGES})

            async def embedded() -> bool:
                counts = catalog_counts(await call(session, "GET", f"{base}/v1/index/status"))
                return bool(counts["pending"] == 0 and counts["embedded"] == counts["records"] > 0)

            await wait_until(embedded, timeout_s=120)

        env_b = {
            **env_a,
            "AGENTSEARCH_EMBEDDINGS_MODEL": "acme/embed-b",
            "AGENTSEARCH_PROVIDER_ACME_BASE_URL": model_b.base_url,
            "AGENTSEARCH_EMBEDDINGS_BATCH_SIZE": "1",
        }
        async with front_end(env_b) as (session, base):
            # Configured B, serving A: the query never reaches model B.
            before = await search(session, base, REWORDED)
            assert before["mode"] == "hybrid" and before["results"][0]["entity"].endswith("refunds")
            assert REWORDED not in model_b.embedded_texts()

            model_b.hold_after = 1  # the second record's batch waits: the fill is half done
            reindex = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "service", "reindex", "--json",
                env=env_b, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                await wait_until(model_b.held.is_set, timeout_s=60)
                during = await search(session, base, REWORDED)
                assert during["mode"] == "hybrid" and during["results"][0]["entity"].endswith("refunds")
                assert REWORDED not in model_b.embedded_texts()
                model_b.release.set()
                out, err = await asyncio.wait_for(reindex.communicate(), timeout=120)
            finally:
                if reindex.returncode is None:
                    reindex.kill()
                    await reindex.wait()
            assert reindex.returncode == 0, err.decode()
            assert "the running service does the reindex" in err.decode()
            report = orjson.loads(out)
            assert report["switched"] is True and report["serving_model"] == "acme/embed-b"
            catalog = report["by_collection"]["catalog"]
            assert catalog["filled"] == catalog["records"] >= len(PACKAGES)

            after = await search(session, base, "refund the card payment")
            assert after["mode"] == "hybrid", after["notices"]
            assert "refund the card payment" in model_b.embedded_texts()  # the query now goes to model B
            assert after["results"][0]["entity"].endswith("refunds")
    finally:
        await model_b.close()
