"""Faults caused for real on real components: Redis stopped and restarted mid-traffic, the service
SIGKILLed and restarted, the embeddings endpoint and the rerank scorer hanging, the data disk full.

Each promise these tests check is listed, with its test, in RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from service.engine.store.edge import DISK_RESERVE_BYTES
from service.settings import ProviderSettings, Settings
from tests.callers import ADMIN, SEARCHER, auth
from tests.catalog.fixtures import reranking_app
from tests.helpers import ServiceProcess, running_app, wait_until, with_settings
from tests.reliability.faults_disk import ext4_volume, fill_until_free
from tests.reliability.faults_endpoints import DIMENSIONS, FaultyEndpoint
from tests.reliability.faults_redis import RedisProcess
from tests.reliability.faults_service import call, packages


async def catalog_counts(session: aiohttp.ClientSession, base: str) -> dict[str, int]:
    status, body = await call(session, "GET", f"{base}/v1/index/status", caller=ADMIN)
    assert status == 200, body
    counts: dict[str, int] = body["surfaces"]["catalog"]
    return counts


async def found_ids(session: aiohttp.ClientSession, base: str, query: str) -> tuple[set[str], dict[str, Any]]:
    status, body = await call(session, "POST", f"{base}/v1/catalog/search", {"query": query, "limit": 50})
    assert status == 200, body
    doc = body["structuredContent"]
    return {r["entity"] for r in doc.get("results", [])}, doc


async def test_redis_outage_keeps_searches_answering_and_loses_no_ingest(tmp_path: Path) -> None:
    """Redis is stopped while searches and ingests run, then started again empty (every queued job
    lost): searches answer throughout, every acknowledged ingest stays searchable, and the sweeper
    embeds what was written during the outage."""
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    service = ServiceProcess(
        tmp_path / "data",
        tmp_path / "service.log",
        REDIS_URL=redis.url,
        AGENTSEARCH_QUEUE_PREFIX="faults-redis",
        AGENTSEARCH_JOB_TIMEOUT_S="4",
        AGENTSEARCH_SWEEP_INTERVAL_S="2",
        AGENTSEARCH_WORKER_HEALTH_CHECK_S="2",
    )
    try:
        await service.start()
        base = service.url
        async with aiohttp.ClientSession() as session:
            status, body = await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": packages("before", 5, "Invoice billing")})
            assert status == 200, body
            await wait_until(lambda: _no_pending(session, base), timeout_s=60)
            per_package = (await catalog_counts(session, base))["records"] / 5

            searches: list[tuple[float, int]] = []
            stop = asyncio.Event()

            async def keep_searching() -> None:
                while not stop.is_set():
                    started = time.monotonic()
                    async with session.post(f"{base}/v1/catalog/search", json={"query": "invoice billing helper"}, headers=SEARCHER) as response:
                        await response.read()
                        searches.append((time.monotonic() - started, response.status))
                    await asyncio.sleep(0.3)  # under the max plan's 240 searches a minute

            searcher = asyncio.create_task(keep_searching())
            redis.stop()
            searches_before_outage = len(searches)
            during: list[str] = []
            for batch in range(3):
                entities = packages(f"during{batch}", 4, "Weather forecast")
                status, body = await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": entities})
                assert status == 200, f"an ingest during the outage failed: {body}"
                during += [f"package:{e['id']}" for e in entities]
                await asyncio.sleep(1.0)
            ids, doc = await found_ids(session, base, "weather forecast helper")
            assert set(during) <= ids, "records written during the outage are searchable lexically at once"
            outage_searches = len(searches)
            redis.start()  # back, empty: the embed jobs enqueued before the outage are gone too
            restarted = time.monotonic()
            await wait_until(lambda: _no_pending(session, base), timeout_s=90, interval_s=0.5)
            caught_up_s = time.monotonic() - restarted
            stop.set()
            await searcher

            counts = await catalog_counts(session, base)
            assert counts["records"] == per_package * (5 + len(during)) and counts["embedded"] == counts["records"]
            ids, doc = await found_ids(session, base, "meteorology prediction")  # no shared word: the vectors find them
            assert doc["mode"] == "hybrid" and set(during) <= ids, doc
            assert outage_searches - searches_before_outage >= 5 and len(searches) > outage_searches
            failed = [status for _, status in searches if status != 200]
            assert not failed, f"searches failed during the outage: {failed}"
            slowest = max(seconds for seconds, _ in searches)
            assert slowest < 5.0
            print(f"\nfigure redis outage: {outage_searches - searches_before_outage} searches during the outage, all 200, slowest {slowest * 1000:.0f} ms; caught up {caught_up_s:.1f} s after Redis came back")
    finally:
        service.stop()
        redis.stop()


async def _no_pending(session: aiohttp.ClientSession, base: str) -> bool:
    counts = await catalog_counts(session, base)
    return counts["records"] > 0 and counts["pending"] == 0


MAIL_TEMPLATE = {
    "template": "mailer",
    "display_name": "Mailer",
    "description": "Transactional email",
    "actions": [
        {"action": "send_email", "description": "Send an email message", "risk": "write"},
        {"action": "list_bounces", "description": "List bounced messages", "risk": "read"},
    ],
}
MAILER_INSTANCE = {"name": "mailer_prod", "template": "mailer", "auth": {"type": "api_key", "secret_name": "MAILER_KEY"}}


async def test_service_killed_and_restarted_keeps_everything_acknowledged(tmp_path: Path, redis_prefix: str) -> None:
    """The service is SIGKILLed right after its last acknowledgement (no shutdown, no flush): started
    again on the same data directory (the lock a dead process held is free), every catalog entity,
    action template and instance and workspace it acknowledged is there, and embedding completes."""
    workspace = tmp_path / "workspaces" / "shop"
    (workspace / "billing").mkdir(parents=True)
    (workspace / "billing" / "refunds.py").write_text("def refund_payment(payment_id, reason):\n    return {'refunded': payment_id, 'why': reason}\n")
    (workspace / "billing" / "invoices.py").write_text("def compute_invoice_total(lines, tax_rate):\n    return sum(lines) * (1 + tax_rate)\n")
    service = ServiceProcess(
        tmp_path / "data",
        tmp_path / "service.log",
        AGENTSEARCH_QUEUE_PREFIX=redis_prefix,
        AGENTSEARCH_JOB_TIMEOUT_S="4",
        AGENTSEARCH_SWEEP_INTERVAL_S="2",
        AGENTSEARCH_ALLOWED_ROOTS=str(tmp_path / "workspaces"),
        AGENTSEARCH_SINGLE_TENANT="true",
    )
    try:
        await service.start()
        async with aiohttp.ClientSession() as session:
            base = service.url
            acknowledged: list[str] = []
            for batch in range(4):
                entities = packages(f"kept{batch}", 10, "Shipping label printing")
                status, body = await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": entities})
                assert status == 200, body
                acknowledged += [f"package:{e['id']}" for e in entities]
            status, body = await call(session, "PUT", f"{base}/v1/actions/templates", {"templates": [MAIL_TEMPLATE]}, caller=ADMIN)
            assert status == 200, body
            status, body = await call(session, "PUT", f"{base}/v1/actions/instances", {"instances": [MAILER_INSTANCE]})
            assert status == 200, body
            status, registered = await call(session, "POST", f"{base}/v1/workspaces", {"root": str(workspace)})
            assert status in (200, 201), registered
            status, code = await call(session, "POST", f"{base}/v1/workspaces/{registered['id']}/search", {"query": "refund_payment"})
            assert status == 200 and code["results"], code
            before = await catalog_counts(session, base)
        service.kill()

        started = time.monotonic()
        await service.start()
        print(f"\nfigure kill -9: ready again {time.monotonic() - started:.1f} s after SIGKILL, {before['records']} catalog records kept")
        async with aiohttp.ClientSession() as session:
            base = service.url
            after = await catalog_counts(session, base)
            assert after["records"] == before["records"], (before, after)
            ids, _ = await found_ids(session, base, "shipping label printing helper")
            assert set(acknowledged) <= ids
            status, actions = await call(session, "POST", f"{base}/v1/actions/search", {"query": "send an email"})
            assert status == 200 and ("mailer_prod", "send_email") in {(r.get("service"), r["action"]) for r in actions["results"]}, actions
            status, state = await call(session, "GET", f"{base}/v1/workspaces/{registered['id']}")
            assert status == 200 and state["files"] == 2, state
            status, again = await call(session, "POST", f"{base}/v1/workspaces/{registered['id']}/search", {"query": "refund_payment"})
            assert status == 200 and again["results"][0]["path"] == code["results"][0]["path"], again
            # Whatever the kill left pending is embedded after the restart (the sweeper's grace is 2 x 4 s).
            await wait_until(lambda: _no_pending(session, base), timeout_s=60, interval_s=0.5)
            ids, doc = await found_ids(session, base, "print a parcel postage sticker")
            assert doc["mode"] == "hybrid" and set(acknowledged) & ids, doc
    finally:
        service.stop()


async def _timed(client: TestClient[Any, Any], path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    response = await client.post(path, json=body, headers=headers)
    answer: dict[str, Any] = await response.json()
    assert response.status == 200, answer
    return time.monotonic() - started, answer


async def test_embeddings_endpoint_hanging_or_failing_answers_lexically_inside_the_deadline(settings: Settings) -> None:
    """The remote embeddings endpoint first hangs, then answers HTTP 500: catalog, action and code
    searches each answer 200 with lexical results and a notice, within the embeddings timeout and
    far inside the request deadline; ingest goes on, and embedding catches up once it answers."""
    endpoint = FaultyEndpoint()
    await endpoint.start()
    timeout_s, deadline_s = 1.0, 8.0
    configured = with_settings(
        settings,
        embeddings_model="remote/embed",
        embeddings_dimensions=DIMENSIONS,
        providers=(ProviderSettings(id="remote", base_url=f"{endpoint.url}/v1"),),
        embeddings_timeout_s=timeout_s,
        request_deadline_s=deadline_s,
    )
    root = settings.allowed_roots[0] / "shop"
    root.mkdir()
    (root / "refunds.py").write_text("def refund_payment(payment_id, reason):\n    return {'refunded': payment_id, 'why': reason}\n")
    try:
        async with running_app(configured) as client:
            alice = auth("alice", plan="max")
            response = await client.put("/v1/catalog/entities", json={"entities": packages("tide", 6, "Tide table lookup")}, headers=alice)
            assert response.status == 200, await response.text()
            response = await client.put("/v1/actions/templates", json={"templates": [MAIL_TEMPLATE]}, headers=ADMIN)
            assert response.status == 200, await response.text()
            response = await client.put("/v1/actions/instances", json={"instances": [MAILER_INSTANCE]}, headers=alice)
            assert response.status == 200, await response.text()
            response = await client.post("/v1/workspaces", json={"root": str(root), "search": {"embeddings_model": "remote/embed", "embeddings_dimensions": DIMENSIONS}}, headers=alice)
            workspace = await response.json()
            assert response.status in (200, 201), workspace
            await wait_until(lambda: _all_embedded(client), timeout_s=60)
            _, healthy = await _timed(client, "/v1/catalog/search", {"query": "tide table lookup"}, alice)
            assert healthy["structuredContent"]["mode"] == "hybrid", healthy["structuredContent"].get("notices")

            for mode, reason in (("hang", "timed out"), ("error", "HTTP 500")):
                endpoint.mode = mode
                seconds, catalog = await _timed(client, "/v1/catalog/search", {"query": f"tide table lookup {mode}"}, alice)
                doc = catalog["structuredContent"]
                assert doc["mode"] == "lexical" and any(reason in n and n.endswith("; lexical results only") for n in doc["notices"]), doc.get("notices")
                assert "package:tide-0" in {r["entity"] for r in doc["results"]}
                assert seconds < timeout_s + 1.0, seconds
                # A request of several intents asks the model once (their batch), not again for the whole.
                long_query = f"Find the tide table lookup for Lisbon tomorrow morning. Then also show the tide table lookup for Porto {mode}"
                seconds, catalog = await _timed(client, "/v1/catalog/search", {"query": long_query}, alice)
                doc = catalog["structuredContent"]
                assert doc["mode"] == "lexical" and sum(n.endswith("; lexical results only") for n in doc["notices"]) == 1, doc.get("notices")
                assert "package:tide-0" in {r["entity"] for r in doc["results"]}
                assert seconds < timeout_s + 1.0, seconds
                seconds, actions = await _timed(client, "/v1/actions/search", {"query": f"send an email {mode}"}, alice)
                assert any(reason in n and "lexical results only" in n for n in actions["notices"]), actions["notices"]
                assert ("mailer_prod", "send_email") in {(r.get("service"), r["action"]) for r in actions["results"]}
                assert seconds < timeout_s + 1.0, seconds
                seconds, code = await _timed(client, f"/v1/workspaces/{workspace['id']}/search", {"query": f"give the customer money back {mode}"}, alice)
                assert code["meta"]["mode"] == "lexical" and code["meta"]["fallback"] == "embeddings_unavailable", code["meta"]
                assert reason in code["notices"][0], code["notices"]
                assert seconds < deadline_s / 2, seconds
                print(f"\nfigure embeddings {mode}: code search answered lexically in {seconds * 1000:.0f} ms (timeout {timeout_s:g} s, deadline {deadline_s:g} s)")
            assert endpoint.cancelled >= 1, "the hung calls were abandoned, not awaited"

            # Ingest is not held up by the failing endpoint; its embedding waits for it to come back.
            started = time.monotonic()
            response = await client.put("/v1/catalog/entities", json={"entities": packages("late", 3, "Harbour pilot booking")}, headers=alice)
            assert response.status == 200 and time.monotonic() - started < timeout_s, await response.text()
            endpoint.mode = "ok"
            _, recovered = await _timed(client, "/v1/catalog/search", {"query": "harbour pilot booking"}, alice)
            assert recovered["structuredContent"]["mode"] == "hybrid" and "package:late-0" in {r["entity"] for r in recovered["structuredContent"]["results"]}
            await wait_until(lambda: _all_embedded(client), timeout_s=60, interval_s=0.5)
    finally:
        await endpoint.close()


async def _all_embedded(client: TestClient[Any, Any]) -> bool:
    response = await client.get("/v1/index/status", headers=ADMIN)
    surfaces = (await response.json())["surfaces"]
    return all(surfaces[name]["records"] > 0 and surfaces[name]["pending"] == 0 for name in ("catalog", "actions"))


async def test_hanging_rerank_scorer_keeps_every_search_inside_its_budget(settings: Settings) -> None:
    """The rerank scorer never answers while several paid callers search at once: each answer comes
    back within the rerank budget (plus the search itself), in hybrid order, marked fallback-timeout,
    and every call left hanging at the scorer is abandoned."""
    endpoint = FaultyEndpoint(mode="hang")
    await endpoint.start()
    budget_s = 0.5
    configured = with_settings(settings, embeddings_model=None, rerank_enabled=True, rerank_url=endpoint.url, rerank_budget_s=budget_s)
    try:
        async with reranking_app(configured) as client:
            # Near-identical summaries: BM25 ties them, so the pool is large and has no clear winner.
            response = await client.put("/v1/catalog/entities", json={"entities": packages("report", 14, "Quarterly report builder")}, headers=auth("alice"))
            assert response.status == 200, await response.text()
            query = {"query": "quarterly report builder"}
            _, unranked = await _timed(client, "/v1/catalog/search", query, auth("alice", plan="free"))
            assert unranked["structuredContent"]["telemetry"]["jevRerank"]["outcome"] == "skipped-plan"
            hybrid_order = [r["entity"] for r in unranked["structuredContent"]["results"]]

            answers = await asyncio.gather(*(_timed(client, "/v1/catalog/search", query, auth("alice", plan=plan)) for plan in ("standard", "pro", "max") * 2))
            for seconds, answer in answers:
                doc = answer["structuredContent"]
                assert doc["telemetry"]["jevRerank"]["outcome"] == "fallback-timeout", doc["telemetry"]
                assert [r["entity"] for r in doc["results"]] == hybrid_order
                assert budget_s <= seconds < budget_s + 1.0, seconds
                assert doc["phaseTimings"]["jevRerankMs"] < (budget_s + 0.25) * 1000
            print(f"\nfigure rerank hang: {len(answers)} concurrent searches answered in {min(a[0] for a in answers) * 1000:.0f}-{max(a[0] for a in answers) * 1000:.0f} ms (budget {budget_s * 1000:.0f} ms)")
            assert endpoint.calls >= len(answers)
            await wait_until(lambda: endpoint.cancelled == endpoint.calls, timeout_s=5, interval_s=0.05)
    finally:
        await endpoint.close()


async def test_full_data_volume_refuses_writes_clearly_and_corrupts_nothing(tmp_path: Path, redis_prefix: str) -> None:
    """The data directory's volume (a real ext4 file system) fills up under the service: ingests are
    refused with 507 and a message that says what to do, the process stays up and answers searches,
    everything acknowledged before is intact, and once space is freed writes and restarts work."""
    with ext4_volume(tmp_path / "disk", 320) as volume:
        service = ServiceProcess(volume / "data", tmp_path / "service.log", AGENTSEARCH_QUEUE_PREFIX=redis_prefix)
        try:
            await service.start()
            filler = fill_until_free(volume, DISK_RESERVE_BYTES + 12 * 2**20)
            base = service.url
            async with aiohttp.ClientSession() as session:
                acknowledged: list[str] = []
                refused: tuple[int, Any] | None = None
                for batch in range(120):
                    entities = [dict(e, readme=f"Harbour crane manual {batch}. " * 3000) for e in packages(f"crane{batch}", 10, "Harbour crane scheduling")]
                    status, body = await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": entities})
                    if status != 200:
                        refused = (status, body)
                        break
                    acknowledged += [f"package:{e['id']}" for e in entities]
                assert refused is not None, "the volume never filled"
                status, body = refused
                assert status == 507 and body["error"]["code"] == "insufficient_storage", refused
                assert "MB free" in body["error"]["message"] and "Free space on that volume" in body["error"]["message"]
                assert acknowledged, "some writes were acknowledged before the volume filled"
                print(f"\nfigure disk full: {len(acknowledged)} packages acknowledged, then 507 with {shutil.disk_usage(volume).free // 2**20} MB free")

                assert service.alive(), service.log_tail()
                ids, _ = await found_ids(session, base, "harbour crane scheduling helper")
                assert set(acknowledged[:50]) <= ids
                before = await catalog_counts(session, base)

                filler.unlink()
                status, body = await call(session, "PUT", f"{base}/v1/catalog/entities", {"entities": packages("after", 3, "Harbour crane scheduling")})
                assert status == 200, body
            service.stop()
            await service.start()
            async with aiohttp.ClientSession() as session:
                after = await catalog_counts(session, service.url)
                assert after["records"] == before["records"] + 3 * before["records"] // len(acknowledged), (before, after)
                status, body = await call(session, "POST", f"{service.url}/v1/catalog/search", {"entity": [acknowledged[0], acknowledged[-1], "package:after-2"]})
                assert status == 200 and not body["isError"], body
        finally:
            service.stop()
