"""Changing the default embeddings model: ``reindex`` fills the new model's vector beside the old one
while searches keep using the old one, then switches; a reindex killed mid-fill continues where it
stopped; records whose stored state is wrong are put back to pending.

Model A is the packaged MiniLM; model B is a real OpenAI-compatible HTTP server the test starts
(``model_server``), the only second model available offline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from service.engine.analyzer import ANALYZER_VERSION, query_terms, terms_text
from service.engine.embeddings import vector_name
from service.engine.records import DONE, PENDING, IndexRecord, tenant_filter
from service.engine.refresh import embed_records
from service.engine.reindex import MIGRATION_KEY, reindex
from service.engine.runtime import Engine
from service.engine.search import Mode, retrieve
from service.engine.serving import META_COLLECTION, SERVING_KEY, read_marker
from service.engine.startup import open_engine
from service.engine.store import VectorSpec, point_id
from service.settings import DEFAULT_MODEL, Settings
from service.surfaces import surfaces
from tests.engine.model_server import DIMENSIONS, MODEL_B, ModelServer, settings_b
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
# The records live in a real surface collection, as an ingest would write them.
COLLECTION = "catalog"
VECTOR_A = vector_name(DEFAULT_MODEL, 384)
VECTOR_B = vector_name(MODEL_B, DIMENSIONS)
REFUND = "Refund a card payment and send the money back to the customer"
TOPICS = [
    "Compute the square root of a floating point number",
    "Get the weather forecast for a city tomorrow",
    "Send an email message to a colleague with an attachment",
    "Resize an image and convert it to png",
    "Parse a csv file into rows and columns",
    "Schedule a meeting on the shared calendar",
    "Translate a paragraph from french to english",
    "List the open pull requests of a repository",
]
DOCS = {"refund": REFUND} | {f"topic-{i}-{j}": f"{text} (variant {j})" for i, text in enumerate(TOPICS) for j in range(5)}


def record(key: str, text: str) -> IndexRecord:
    return IndexRecord(key=key, tenant="global", kind="doc", embed_text=text, terms=terms_text(text))


async def index_with_model_a(settings: Settings) -> None:
    """Write and embed every doc with the packaged MiniLM (the real embed job's code path)."""
    engine = await open_engine(replace(settings, embeddings_batch_size=8), surfaces())
    try:
        docs = engine.records(COLLECTION)
        await docs.write((record(k, v) for k, v in DOCS.items()), embed=False)
        items = [(key, record(key, text).content_hash) for key, text in DOCS.items()]
        assert (await embed_records(engine, COLLECTION, items)).embedded == len(DOCS)
    finally:
        await engine.close()


async def open_with(settings: Settings) -> Engine:
    return await open_engine(settings, surfaces())


async def search(engine: Engine, query: str) -> tuple[str, Mode, str]:
    embedder = engine.embedders.default
    assert embedder is not None
    found = await retrieve(engine.store, COLLECTION, query, tenant_filter(["global"]), embedder=embedder, limit=3)
    return str(found.hits[0].payload["key"]), found.mode, embedder.vector_name


@pytest.mark.parametrize("store", ["edge", "qdrant-local"])
async def test_new_model_fills_beside_the_serving_one_then_switches(settings: Settings, model_b: ModelServer, store: str) -> None:
    """On the embedded default and on the qdrant-client adapter (local mode, ``qdrant_path``)."""
    settings = replace(settings, embeddings_batch_size=8, qdrant_path=settings.data_dir / "qdrant" if store == "qdrant-local" else None)
    await index_with_model_a(settings)
    engine = await open_with(settings_b(settings, model_b))
    try:
        # Configured B, but A's vectors are what the store has: A keeps serving until the switch.
        assert engine.embedders.default_model == DEFAULT_MODEL
        assert engine.embedders.configured is not None and engine.embedders.configured.model == MODEL_B
        assert await search(engine, "refund the customer's payment") == ("refund", Mode.HYBRID, VECTOR_A)

        model_b.hold_after = 2  # the third document batch waits at the gate: the fill is half done
        task = asyncio.create_task(reindex(engine))
        await wait_until(model_b.held.is_set, timeout_s=30)
        migration = await read_marker(engine.store, MIGRATION_KEY)
        assert migration is not None and migration["state"] == "filling" and migration["target_vector"] == VECTOR_B
        points, _ = await engine.store.scroll(COLLECTION, None, limit=100)
        assert sum(1 for p in points if p.payload.get("fill_vector") == VECTOR_B) == 16  # two batches of 8

        # Searches during the fill: still hybrid, still on A's vector, never asking model B.
        assert await search(engine, "refund the customer's payment") == ("refund", Mode.HYBRID, VECTOR_A)
        assert "refund the customer's payment" not in model_b.embedded_texts()

        model_b.release.set()
        report = await task
        assert report.switched and report.target_model == MODEL_B
        assert report.filled == len(DOCS) and report.serving_model == MODEL_B

        # After the switch: B serves, the query goes to model B, and finds the same record.
        assert engine.embedders.default_model == MODEL_B
        assert await search(engine, "refund a customer payment") == ("refund", Mode.HYBRID, VECTOR_B)
        assert "refund a customer payment" in model_b.embedded_texts()
        points, _ = await engine.store.scroll(COLLECTION, None, limit=100, with_vectors=True)
        assert len(points) == len(DOCS)
        for point in points:
            assert point.payload["vector_name"] == VECTOR_B and point.payload["embedded_hash"] == point.payload["content_hash"]
            assert len(point.vectors[VECTOR_B]) == DIMENSIONS
            assert set(point.vectors) == {VECTOR_B}  # A's vector is retired: no record uses it
        assert report.retired[COLLECTION] == VECTOR_A
        assert set(report.retired) == {index.collection for index in engine.surfaces.values()}
        assert (await read_marker(engine.store, MIGRATION_KEY) or {}).get("state") == "done"
    finally:
        await engine.close()

    # The switch is durable: a restarted process serves B at once; a second reindex has nothing to do.
    engine = await open_with(settings_b(settings, model_b))
    try:
        assert engine.embedders.default_model == MODEL_B
        assert (await read_marker(engine.store, SERVING_KEY) or {}).get("model") == MODEL_B
        before = len(model_b.requests)
        again = await reindex(engine)
        assert not again.switched and again.filled == 0 and again.repaired == 0
        assert len(model_b.requests) == before
    finally:
        await engine.close()

    # A process still configured with the old model follows the marker; lacking B's provider, it
    # cannot embed queries with the serving model, so its searches say so and answer lexically.
    engine = await open_with(settings)
    try:
        assert engine.embedders.default_model == MODEL_B and engine.embedders.default is None
        found = await retrieve(engine.store, COLLECTION, "refund payment", tenant_filter(["global"]), embedder=engine.embedders.default)
        assert found.mode == Mode.LEXICAL and found.notices == ["embeddings are not configured; lexical results only"]
        assert found.hits[0].payload["key"] == "refund"
    finally:
        await engine.close()


async def test_reindex_records_put_records_without_a_current_vector_back_to_pending(settings: Settings) -> None:
    await index_with_model_a(settings)
    engine = await open_with(settings)
    try:
        # A wrong hash over a current vector, and a record marked done whose vector is of another text.
        await engine.store.set_payload(COLLECTION, [point_id(COLLECTION, "refund")], {"content_hash": "0" * 32})
        await engine.store.set_payload(COLLECTION, [point_id(COLLECTION, "topic-0-0")], {"embedded_hash": "f" * 32})
        report = await reindex(engine)
        assert report.repaired == 2 and not report.switched and report.filled == 0
        docs = engine.records(COLLECTION)
        refund = await docs.get("refund")
        assert refund is not None and refund["content_hash"] == record("refund", REFUND).content_hash
        assert refund["embed_state"] == DONE
        stale = await docs.get("topic-0-0")
        assert stale is not None and stale["embed_state"] == PENDING and stale["pending_since"] == 0
        untouched = await docs.get("topic-1-0")
        assert untouched is not None and untouched["embed_state"] == DONE
        # It queued an embed job for the stale one: the job makes it current again.
        queued = await engine.redis.zrange(engine.queue.names.embed, 0, -1)
        assert len(queued) == 1
        item = ("topic-0-0", record("topic-0-0", DOCS["topic-0-0"]).content_hash)
        assert (await embed_records(engine, COLLECTION, [item])).embedded == 1
        assert (await docs.get("topic-0-0") or {}).get("embed_state") == DONE
    finally:
        await engine.close()


def reindex_env(settings: Settings, server: ModelServer) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "AGENTSEARCH_DATA_DIR": str(settings.data_dir),
        "REDIS_URL": settings.redis_url,
        "AGENTSEARCH_QUEUE_PREFIX": settings.queue_prefix,
        "AGENTSEARCH_JWT_SECRET": str(settings.jwt_secret),
        "AGENTSEARCH_EMBEDDINGS_MODEL": MODEL_B,
        "AGENTSEARCH_PROVIDER_ACME_BASE_URL": server.base_url,
        "AGENTSEARCH_EMBEDDINGS_BATCH_SIZE": "8",
    }


async def test_a_reindex_killed_mid_fill_continues_where_it_stopped(settings: Settings, model_b: ModelServer) -> None:
    """The reindex runs as the real ``agentsearch reindex`` process, killed with SIGKILL mid-fill."""
    settings = replace(settings, embeddings_batch_size=8)
    await index_with_model_a(settings)
    env = reindex_env(settings, model_b)
    command = [sys.executable, "-m", "service", "reindex", "--json"]

    model_b.hold_after = 2
    first = await asyncio.create_subprocess_exec(*command, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await wait_until(model_b.held.is_set, timeout_s=60)
    first.send_signal(signal.SIGKILL)
    await first.communicate()
    assert first.returncode == -signal.SIGKILL
    model_b.hold_after = None
    model_b.release.set()
    sent_before_crash = sum(len(batch) for batch in model_b.document_batches())
    assert sent_before_crash == 24  # two batches written, the third lost with the process

    second = await asyncio.create_subprocess_exec(*command, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(second.communicate(), timeout=120)
    assert second.returncode == 0, err.decode()
    report = orjson.loads(out)
    assert report["switched"] is True and report["serving_model"] == MODEL_B
    assert report["filled"] == len(DOCS) - 16, report  # only what the killed run had not written
    assert "reindex: fill catalog" in err.decode()

    engine = await open_with(settings_b(settings, model_b))
    try:
        assert engine.embedders.default_model == MODEL_B
        assert await search(engine, "refund a customer payment") == ("refund", Mode.HYBRID, VECTOR_B)
        meta = await engine.store.retrieve(META_COLLECTION, [point_id(META_COLLECTION, MIGRATION_KEY)])
        assert meta[0].payload["state"] == "done"
    finally:
        await engine.close()


async def test_the_old_vector_stays_where_a_record_names_the_old_model(settings: Settings, model_b: ModelServer) -> None:
    """A workspace that names the old default model explicitly keeps its vectors after the switch;
    collections where nothing uses the old vector lose it."""
    settings = replace(settings, embeddings_batch_size=8)
    await index_with_model_a(settings)
    engine = await open_engine(settings, surfaces())
    try:
        pinned = replace(record("pinned", "Pinned to the packaged model on purpose"), embed_model=DEFAULT_MODEL)
        await engine.records(COLLECTION).write([pinned], embed=False)
        assert (await embed_records(engine, COLLECTION, [("pinned", pinned.content_hash)])).embedded == 1
    finally:
        await engine.close()

    engine = await open_with(settings_b(settings, model_b))
    try:
        report = await reindex(engine)
        assert report.switched and COLLECTION not in report.retired
        assert report.retired and set(report.retired.values()) == {VECTOR_A}  # the other collections
        [point] = await engine.store.retrieve(COLLECTION, [point_id(COLLECTION, "pinned")], with_vectors=True)
        assert point.payload["vector_name"] == VECTOR_A and set(point.vectors) == {VECTOR_A}
        [refund] = await engine.store.retrieve(COLLECTION, [point_id(COLLECTION, "refund")], with_vectors=True)
        assert set(refund.vectors) == {VECTOR_A, VECTOR_B} and refund.payload["vector_name"] == VECTOR_B
    finally:
        await engine.close()


async def test_an_embed_job_adds_back_a_vector_another_process_retired(settings: Settings) -> None:
    """The store call drops the vector behind the engine's back, as a reindex in another process
    would: this process still believes the vector exists, and its embed job must not fail for good."""
    engine = await open_engine(settings, surfaces())
    try:
        docs = engine.records(COLLECTION)
        first = replace(record("first", "Compress a folder into a zip archive"), embed_model=DEFAULT_MODEL)
        second = replace(record("second", "Unpack a tarball into a directory"), embed_model=DEFAULT_MODEL)
        await docs.write([first, second], embed=False)
        assert (await embed_records(engine, COLLECTION, [("first", first.content_hash)])).embedded == 1
        await engine.ensure_vector(COLLECTION, VectorSpec("keeps-the-collection-searchable", 4))
        await engine.store.drop_vector(COLLECTION, VECTOR_A)

        assert (await embed_records(engine, COLLECTION, [("second", second.content_hash)])).embedded == 1
        [point] = await engine.store.retrieve(COLLECTION, [point_id(COLLECTION, "second")], with_vectors=True)
        assert len(point.vectors[VECTOR_A]) == 384 and point.payload["embed_state"] == DONE
    finally:
        await engine.close()


async def test_reindex_brings_terms_of_an_older_analyzer_up_to_date(settings: Settings) -> None:
    """Records written before the analyzer folded the plural of whole identifiers (version 1, no
    ``analyzer`` field) kept ``getitems``: the one-word query ``getitems`` (term ``getitem``) missed them.
    The stored state is written by hand as version 1 wrote it: that code no longer exists."""
    engine = await open_engine(replace(settings, embeddings_model=None), surfaces())
    try:
        docs = engine.records(COLLECTION)
        await docs.write([record("loader", "def getItems(self): load every row")], embed=False)
        pid = point_id(COLLECTION, "loader")
        [fresh] = await engine.store.retrieve(COLLECTION, [pid])
        assert fresh.payload["analyzer"] == ANALYZER_VERSION and "getitem" in fresh.payload["terms"].split()
        version_1 = "def getitems get item self load every row"
        await engine.store.overwrite_payload(COLLECTION, pid, {**{k: v for k, v in fresh.payload.items() if k != "analyzer"}, "terms": version_1})

        async def found(query: str) -> list[str]:
            hits = await engine.store.search_text(COLLECTION, query_terms(query), tenant_filter(["global"]))
            return [str(hit.payload["key"]) for hit in hits]

        assert query_terms("getitems") == "getitem" and await found("getitems") == []
        report = await reindex(engine)
        assert report.reanalyzed == 1 and report.repaired == 0
        [upgraded] = await engine.store.retrieve(COLLECTION, [pid])
        assert upgraded.payload["terms"] == "def getitem get item self load every row" and upgraded.payload["analyzer"] == ANALYZER_VERSION
        assert await found("getitems") == ["loader"]
        assert (await reindex(engine)).reanalyzed == 0  # nothing left to bring up to date
    finally:
        await engine.close()
