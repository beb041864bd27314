"""A chunk's store point holds no text: embedding reads it from the workspace's cache, in a job
that runs where the workspace is, and a default-model reindex fills chunk vectors the same way
(or, for texts this process does not hold, sends them to be embedded where they are)."""

from __future__ import annotations

from collections.abc import Sequence

from service.code.ingest import write_points
from service.code.model import COLLECTION
from service.code.semantic import index_workspace
from service.code.state import workspaces_of
from service.code.texts import EMBED_JOB
from service.code.workspace import SearchConfig
from service.engine.embeddings import vector_name
from service.engine.records import DONE, PENDING, RecordTexts
from service.engine.refresh import embed_records
from service.engine.reindex import reindex
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.engine.views import Document
from service.settings import DEFAULT_MODEL, Settings
from service.surfaces import surfaces
from tests.code.trees import write_tree
from tests.engine.model_server import DIMENSIONS, MODEL_B, ModelServer, settings_b
from tests.queues import queued_functions

TENANT = "user:alice"
VECTOR_A = vector_name(DEFAULT_MODEL, 384)
VECTOR_B = vector_name(MODEL_B, DIMENSIONS)


async def chunk_points(engine: Engine) -> list[tuple[str, dict[str, object], set[str]]]:
    """Every chunk point: its key, payload and the names of the vectors it has."""
    found = []
    offset = None
    while True:
        page, offset = await engine.store.scroll(COLLECTION, None, limit=256, offset=offset)
        for point in page:
            [whole] = await engine.store.retrieve(COLLECTION, [point.id], with_vectors=True)
            found.append((str(point.payload["key"]), dict(point.payload), set(whole.vectors)))
        if offset is None:
            return found


async def index_and_embed_with_model_a(settings: Settings) -> str:
    """A workspace indexed, its chunks given points (a cold workspace's have none) and every chunk
    embedded with the packaged model (the embed job's code path)."""
    root = write_tree(settings.allowed_roots[0] / "repo")
    engine = await open_engine(settings, surfaces())
    try:
        workspaces = workspaces_of(engine)
        workspace, _ = await workspaces.register(TENANT, root, SearchConfig())
        await index_workspace(engine, workspace.id, deadline=None)
        assert await chunk_points(engine) == [], "a cold workspace's chunks have no points"
        runtime = await workspaces.runtime(workspace)
        assert await write_points(engine, workspace, runtime.cache, queue=False) == runtime.cache.chunk_count()
        points = await chunk_points(engine)
        assert points
        outcome = await embed_records(engine, COLLECTION, [(key, str(payload["content_hash"])) for key, payload, _ in points])
        assert outcome.embedded == len(points)
        return workspace.id
    finally:
        await engine.close()


async def test_a_chunk_point_holds_no_text_and_its_vector_comes_from_the_cached_text(settings: Settings) -> None:
    await index_and_embed_with_model_a(settings)
    engine = await open_engine(settings, surfaces())
    try:
        for _key, payload, vectors in await chunk_points(engine):
            assert not payload.get("embed_text") and not payload.get("terms"), "the text is in the cache alone"
            assert payload["embed_state"] == DONE and payload["vector_name"] == VECTOR_A and VECTOR_A in vectors
    finally:
        await engine.close()


async def test_reindex_fills_chunk_vectors_from_the_cache_and_switches(settings: Settings, model_b: ModelServer) -> None:
    await index_and_embed_with_model_a(settings)
    engine = await open_engine(settings_b(settings, model_b), surfaces())
    try:
        report = await reindex(engine)
        assert report.switched
        for key, payload, vectors in await chunk_points(engine):
            assert payload["vector_name"] == VECTOR_B and VECTOR_B in vectors, key
            assert payload["embed_state"] == DONE
    finally:
        await engine.close()


class _HeldElsewhere:
    """Stands in for a process that does not hold the workspaces (a worker of another node): the
    real chunk texts, but none served. A second node cannot run here (several nodes share a Qdrant
    server, which this machine has not), so this is the one way to reach that path."""

    def __init__(self, real: RecordTexts) -> None:
        self.real = real
        self.job = EMBED_JOB

    def owner(self, key: str) -> str:
        return self.real.owner(key)

    async def documents(self, engine: Engine, items: Sequence[tuple[str, str]]) -> dict[str, Document]:
        return {}


async def test_chunks_whose_texts_are_on_another_node_are_sent_there_after_the_switch(settings: Settings, model_b: ModelServer) -> None:
    wid = await index_and_embed_with_model_a(settings)
    engine = await open_engine(settings_b(settings, model_b), surfaces())
    index = engine.records("code")
    real = index.texts
    try:
        index.texts = _HeldElsewhere(real)
        report = await reindex(engine)
        assert report.switched
        points = await chunk_points(engine)
        assert all(payload["embed_state"] == PENDING for _, payload, _ in points), "pending until their node embeds them"
        queued = await queued_functions(engine, engine.queue.names.bulk)
        assert queued and set(queued) == {EMBED_JOB}, "queued for the node that holds the workspace (one machine: the bulk queue)"

        index.texts = real  # the node that holds the workspace runs the queued job
        items = [(key, str(payload["content_hash"])) for key, payload, _ in points]
        assert all(key.startswith(f"{wid}|") for key, _ in items)
        assert (await embed_records(engine, COLLECTION, items)).embedded == len(items)
        for key, payload, vectors in await chunk_points(engine):
            assert payload["embed_state"] == DONE and payload["vector_name"] == VECTOR_B and VECTOR_B in vectors, key
    finally:
        index.texts = real
        await engine.close()
