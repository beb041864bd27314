"""Records on the real engine: written first and searchable lexically at once, embedded by the real worker job,
stale jobs skipped, the sweeper repairing lost enqueues, and the index surviving a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from service.engine.analyzer import terms_text
from service.engine.records import DONE, PENDING, IndexRecord, RecordIndex, collection_spec, tenant_filter
from service.engine.refresh import embed_records, sweep
from service.engine.runtime import Engine
from service.engine.search import Mode, retrieve
from service.engine.startup import open_engine
from service.settings import DEFAULT_MODEL, Settings
from service.surfaces import surfaces
from workers.jobs import embed_records_job

SPEC = collection_spec("testdocs")


def record(key: str, text: str, tenant: str = "user:alice") -> IndexRecord:
    return IndexRecord(key=key, tenant=tenant, kind="doc", embed_text=text, terms=terms_text(text), payload={"title": key})


DOCS = {
    "mail": "Send an email message to a colleague with an attachment",
    "sqrt": "Compute the square root of a floating point number",
    "weather": "Get the weather forecast for a city tomorrow",
}


@pytest.fixture
async def docs(engine: Engine) -> AsyncIterator[RecordIndex]:
    index = await engine.register("testdocs", SPEC)
    yield index


async def test_written_records_are_searchable_lexically_at_once(engine: Engine, docs: RecordIndex) -> None:
    result = await docs.write(record(k, v) for k, v in DOCS.items())
    assert result.written == 3 and result.to_embed == 3
    found = await retrieve(engine.store, docs.collection, "square root", tenant_filter(["user:alice"]), embedder=engine.embedders.default)
    assert [h.payload["key"] for h in found.hits] == ["sqrt"], "only the BM25 side finds anything before embedding"
    assert (await docs.counts()) == {"records": 3, "embedded": 0, "pending": 3}


async def test_embed_job_makes_records_semantically_findable(engine: Engine, docs: RecordIndex) -> None:
    await docs.write(record(k, v) for k, v in DOCS.items())
    items = [(k, record(k, v).content_hash) for k, v in DOCS.items()]
    outcome = await embed_records(engine, docs.collection, items)
    assert outcome.embedded == 3 and outcome.stale == 0
    assert (await docs.counts()) == {"records": 3, "embedded": 3, "pending": 0}
    found = await retrieve(
        engine.store, docs.collection, "write a mail to my coworker", tenant_filter(["user:alice"]), embedder=engine.embedders.default
    )
    assert found.mode is Mode.HYBRID
    assert found.hits[0].payload["key"] == "mail", "found through the embedding: no query word is in the text"


async def test_unchanged_rewrite_keeps_the_vector_and_changed_text_goes_pending(engine: Engine, docs: RecordIndex) -> None:
    await docs.write(record(k, v) for k, v in DOCS.items())
    await embed_records(engine, docs.collection, [(k, record(k, v).content_hash) for k, v in DOCS.items()])
    again = await docs.write(record(k, v) for k, v in DOCS.items())
    assert again.to_embed == 0, "unchanged texts are not re-embedded"
    changed = await docs.write([record("sqrt", "Compute the cube root of a number")])
    assert changed.to_embed == 1
    payload = await docs.get("sqrt")
    assert payload is not None and payload["embed_state"] == PENDING
    assert (await docs.get("mail") or {})["embed_state"] == DONE


async def test_stale_embed_job_does_not_overwrite_a_newer_record(engine: Engine, docs: RecordIndex) -> None:
    old = record("sqrt", DOCS["sqrt"])
    await docs.write([old])
    newer = record("sqrt", "Compute the cube root of a number")
    await docs.write([newer])
    outcome = await embed_records(engine, docs.collection, [("sqrt", old.content_hash)])
    assert outcome.embedded == 0 and outcome.stale == 1
    payload = await docs.get("sqrt")
    assert payload is not None and payload["embed_state"] == PENDING and "embedded_hash" not in payload
    outcome = await embed_records(engine, docs.collection, [("sqrt", newer.content_hash)])
    assert outcome.embedded == 1
    assert (await docs.get("sqrt") or {})["embedded_hash"] == newer.content_hash


async def test_deleted_record_is_skipped_by_its_job(engine: Engine, docs: RecordIndex) -> None:
    rec = record("mail", DOCS["mail"])
    await docs.write([rec])
    await docs.delete(["mail"])
    outcome = await embed_records(engine, docs.collection, [("mail", rec.content_hash)])
    assert outcome.missing == 1 and outcome.embedded == 0


async def test_sweeper_enqueues_every_pending_record(engine: Engine, docs: RecordIndex) -> None:
    await docs.write((record(k, v) for k, v in DOCS.items()), embed=False)
    assert (await sweep(engine))["testdocs"] == 0, "young pending records are left to their queued jobs"
    enqueued = await sweep(engine, grace_s=-1)
    assert enqueued["testdocs"] == 3
    queued = await engine.redis.zcard(engine.queue.names.embed)
    assert queued >= 1


async def test_with_embeddings_off_jobs_end_at_once_and_the_sweeper_leaves_records_alone(settings: Settings) -> None:
    engine = await open_engine(replace(settings, embeddings_model=None), surfaces())
    try:
        index = await engine.register("testdocs", SPEC)
        written = await index.write(record(k, v) for k, v in DOCS.items())
        assert written.written == 3 and written.to_embed == 0, "no model serves: writes queue no embed job"
        assert await engine.redis.zcard(engine.queue.names.embed) == 0
        items = [[k, record(k, v).content_hash] for k, v in DOCS.items()]
        # A job queued before the model was switched off ends without a retry (no Retry raised).
        assert await embed_records_job({"engine": engine, "job_try": 1}, index.collection, items) == {"embedded": 0, "disabled": 3}
        assert (await sweep(engine, grace_s=-1))["testdocs"] == 0, "nothing can embed them: no jobs are queued"
        assert await engine.redis.zcard(engine.queue.names.embed) == 0
        assert (await index.counts())["pending"] == 3, "the records stay, served lexically"
        # A record that names a model of its own is still embedded by a job.
        pinned = replace(record("pinned", "Pinned to the packaged model"), embed_model=DEFAULT_MODEL)
        assert (await index.write([pinned])).to_embed == 1
        assert await engine.redis.zcard(engine.queue.names.embed) == 1
    finally:
        await engine.close()


async def test_tenant_filter_keeps_other_tenants_out(engine: Engine, docs: RecordIndex) -> None:
    await docs.write([record("a", "secret roadmap for project falcon", tenant="org:acme"), record("b", "falcon notes", tenant="org:other")])
    found = await retrieve(engine.store, docs.collection, "falcon", tenant_filter(["global", "org:acme"]), embedder=None)
    assert [h.payload["key"] for h in found.hits] == ["a"]
    assert found.notices == ["embeddings are not configured; lexical results only"]


async def test_restart_keeps_records_and_vectors(settings: Settings) -> None:
    engine = await open_engine(settings, surfaces())
    index = await engine.register("testdocs", SPEC)
    await index.write(record(k, v) for k, v in DOCS.items())
    await embed_records(engine, index.collection, [(k, record(k, v).content_hash) for k, v in DOCS.items()])
    await engine.close()
    reopened = await open_engine(replace(settings), surfaces())
    try:
        index = await reopened.register("testdocs", SPEC)
        assert (await index.counts()) == {"records": 3, "embedded": 3, "pending": 0}
        found = await retrieve(
            reopened.store, index.collection, "write a mail to my coworker", tenant_filter(["user:alice"]), embedder=reopened.embedders.default
        )
        assert found.hits[0].payload["key"] == "mail"
    finally:
        await reopened.close()
