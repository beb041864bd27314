"""Bulk embedding (workspace code warming) has a queue and a worker of its own: a catalog write's
embedding never waits behind the code-warming backlog."""

from __future__ import annotations

from dataclasses import replace

from service.code.texts import EMBED_JOB
from service.settings import DEFAULT_MODEL, Settings
from service.state import ENGINE
from tests.callers import ADMIN, ALICE_PRO
from tests.code.trees import copy_stdlib_packages
from tests.helpers import running_app, wait_until

PACKAGE = {"type": "package", "id": "refunds", "name": "@acme/refunds", "summary": "Refund a card payment and send the money back to the customer."}


async def test_a_catalog_write_is_embedded_while_the_code_warming_backlog_waits(settings: Settings) -> None:
    # Small embed batches: a prewarmed workspace of a few hundred chunks becomes a long bulk backlog.
    settings = replace(settings, embeddings_batch_size=4, rate_limits_enabled=False)
    root = copy_stdlib_packages(settings.allowed_roots[0] / "stdlib", ("email", "json"))
    async with running_app(settings) as client:
        engine = client.app[ENGINE]
        names = engine.queue.names
        response = await client.post("/v1/workspaces", json={"root": str(root), "search": {"embeddings_model": DEFAULT_MODEL, "prewarm_embeddings": True}}, headers=ADMIN)
        assert response.status in (200, 201), await response.json()

        async def backlog() -> bool:
            return bool(await engine.redis.zcard(names.bulk) >= 40)

        await wait_until(backlog, timeout_s=120, interval_s=0.1)
        assert await engine.redis.zcard(names.embed) == 0, "code warming does not use the interactive embed queue"

        response = await client.put("/v1/catalog/entities", json={"entities": [PACKAGE]}, headers=ALICE_PRO)
        assert response.status == 200, await response.json()

        async def catalog_embedded() -> bool:
            return (await engine.records("catalog").counts())["pending"] == 0

        await wait_until(catalog_embedded, timeout_s=60, interval_s=0.05)
        bulk_left = await engine.redis.zcard(names.bulk)
        code_pending = (await engine.records("code").counts())["pending"]
        assert bulk_left > 0 and code_pending > 0, "the catalog record was embedded before the bulk backlog drained"

        overview = await (await client.get("/admin/api/overview", headers=ADMIN)).json()
        assert "bulk" in overview["queues"] and overview["queues"]["bulk"]["queued"] + overview["queues"]["bulk"]["in_progress"] > 0
        jobs = await (await client.get("/admin/api/jobs?queue=bulk&status=queued&limit=5", headers=ADMIN)).json()
        assert jobs["jobs"] and {job["queue"] for job in jobs["jobs"]} == {"bulk"} and {job["function"] for job in jobs["jobs"]} == {EMBED_JOB}

