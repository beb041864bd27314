"""The semantic pass: which model a workspace uses, embedding a small cold scope at query time,
warming a workspace in the background, and dense retrieval over the scope's chunk vectors.

The scope limit (``settings.semantic_scope_limit``, 800) bounds what a query may have to
embed itself: a scope whose chunks are all embedded (warm) runs hybrid at any size; one with at
most 800 chunks not yet embedded embeds them now (they stay embedded); more than that falls back
to lexical with a notice saying so, and a cold workspace is then warmed in the background
(``warm_workspace`` job on the fast queue), so later searches use the cached chunk index.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.code.ingest import queue_cold, write_points
from service.code.model import COLLECTION, SURFACE_NAME
from service.code.state import Workspaces, workspaces_of
from service.code.workspace import Workspace
from service.engine.embeddings import Embedder
from service.engine.records import DONE, PENDING
from service.engine.store import DenseQuery, Filter, Match, StoreError, VectorSpec
from service.engine.views import Document, embed_views

if TYPE_CHECKING:
    from service.code.cache import ChunkCache
    from service.code.trigram import Within
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

SCOPE_TOO_LARGE = "semantic search scope is too large; narrow path or glob"
WARMING_SCHEDULED = "background index warming scheduled; later searches will use the cached chunk index"
WARMING_RUNNING = "background index warming is in progress; later searches will use the cached chunk index"
# Chunks embedded per model call at query time (progress granularity for the CLI as well).
EMBED_BATCH = 64
WARM_JOB = "warm_workspace"
INDEX_JOB = "index_workspace"


def embedder_for(engine: Engine, workspace: Workspace) -> Embedder | None:
    """The workspace's embedder: its own model, else the service default; None when neither exists.

    Raises ``EmbeddingUnavailable`` for a model that cannot be built (an unconfigured provider)."""
    model = workspace.search.embeddings_model or engine.embedders.default_model
    if not model:
        return None
    return engine.embedders.get(model, workspace.search.embeddings_dimensions)


@dataclass(frozen=True)
class ScopeState:
    """Embedding state of the chunks a query may see."""

    chunks: int
    embedded: int

    @property
    def unembedded(self) -> int:
        return self.chunks - self.embedded


async def scope_state(workspaces: Workspaces, flt: Filter, chunks: int) -> ScopeState:
    """The state of a scope holding ``chunks`` chunks (the cache's count) under ``flt``: how many
    of them are embedded (one store count, as ``Workspaces.counts``); the pending ones only matter
    to a fallback (``cold_chunks``)."""
    return ScopeState(chunks=chunks, embedded=await workspaces.records.count(flt.and_(Match("embed_state", DONE))))


async def cold_chunks(workspaces: Workspaces, flt: Filter, state: ScopeState) -> int:
    """The chunks of ``state`` neither embedded nor queued for embedding (``Workspaces.counts``' ``cold``)."""
    pending = await workspaces.records.count(flt.and_(Match("embed_state", PENDING)))
    return max(state.chunks - state.embedded - pending, 0)


async def prepare_scope(engine: Engine, workspace: Workspace, cache: ChunkCache, within: Within, flt: Filter, chunks: int) -> int:
    """Give the scope's ``chunks`` chunks that have no point a cold one, so ``embed_scope`` finds
    them: a cold workspace's chunks have none until embedded (a warm one's have theirs, and one
    store count says so). Returns how many were written."""
    if await workspaces_of(engine).records.count(flt) >= chunks:
        return 0
    return await write_points(engine, workspace, cache, within.path or within.directory, within.paths, queue=False)


async def embed_scope(engine: Engine, embedder: Embedder, flt: Filter, limit: int, progress: Callable[[int], object] | None = None) -> int:
    """Embed every chunk under ``flt`` that has no current vector (at most ``limit``); returns how many."""
    not_done = Filter(must=flt.must, should=flt.should, must_not=(*flt.must_not, Match("embed_state", DONE)))
    records = engine.records(SURFACE_NAME)
    page, _ = await records.scroll(not_done, limit=limit)
    documents = await records.documents({str(p.payload["key"]): p.payload for p in page})
    items = [(str(p.payload["key"]), str(p.payload["content_hash"]), documents[str(p.payload["key"])]) for p in page if str(p.payload["key"]) in documents]
    # Batches of similar length pad less: the model's cost follows the longest text of a batch.
    items.sort(key=lambda item: len(item[2].text))
    embedded = 0
    for start in range(0, len(items), EMBED_BATCH):
        batch = items[start : start + EMBED_BATCH]
        embedded += await embed_items(engine, embedder, batch)
        if progress is not None:
            progress(len(batch))
    return embedded


async def embed_items(engine: Engine, embedder: Embedder, items: Sequence[tuple[str, str, Document]]) -> int:
    """Embed (key, content hash, document) items and store the vectors of those whose hash is still current.

    A point deleted or changed meanwhile (a concurrent revalidation) is skipped: keys name the
    chunk text, so a current hash means the vector fits."""
    if not items:
        return 0
    records = engine.records(SURFACE_NAME)
    vectors = await embed_views(embedder, [doc for _, _, doc in items])
    vector = VectorSpec(embedder.vector_name, embedder.dimensions)
    await engine.ensure_vector(COLLECTION, vector)
    current = {key: payload.get("content_hash") for key, payload in (await records.get_many([key for key, _, _ in items])).items()}
    written = 0
    for (key, expected, _), values in zip(items, vectors, strict=True):
        if current.get(key) != expected:
            continue
        try:
            await records.update_vectors([(key, {vector.name: values})])
            await records.set_payload([key], {"embedded_hash": expected, "embed_state": DONE, "vector_name": vector.name})
        except StoreError:
            continue  # deleted between the read and the write
        written += 1
    return written


# The payload field the semantic ranking reads of a dense hit (the chunk itself comes from the cache).
SEMANTIC_FIELDS = ("key",)


async def dense_query(engine: Engine, embedder: Embedder, vector: Sequence[float], flt: Filter, depth: int) -> DenseQuery:
    """The scope's nearest chunks as a store query (its vector made sure of), asking only for ``SEMANTIC_FIELDS``."""
    await engine.ensure_vector(COLLECTION, VectorSpec(embedder.vector_name, embedder.dimensions))
    return DenseQuery(embedder.vector_name, vector, flt, limit=depth, fields=SEMANTIC_FIELDS)


async def schedule_warming(engine: Engine, workspace: Workspace) -> bool:
    """Enqueue the warm job (fast queue); False when Redis refused (the next fallback tries again)."""
    # One id per workspace and minute: arq drops repeats while one is queued, running or just done.
    job_id = f"{engine.queue.names.prefix}:{WARM_JOB}:{workspace.id}:{int(time.time() // 60)}"
    job = await engine.queue.enqueue(WARM_JOB, workspace.id, job_id=job_id, fast=True)
    if job is None:
        return False
    await workspaces_of(engine).mark_warm(workspace)
    return True


async def schedule_indexing(engine: Engine, workspace: Workspace, *, always: bool = False) -> bool:
    """Enqueue the index job (fast queue): after a registration (``always``: new settings must
    apply), or to finish a build a search could not (at most one a minute)."""
    suffix = uuid.uuid4().hex if always else str(int(time.time() // 60))
    job_id = f"{engine.queue.names.prefix}:{INDEX_JOB}:{workspace.id}:{suffix}"
    return await engine.queue.enqueue(INDEX_JOB, workspace.id, job_id=job_id, fast=True) is not None


class IndexNotComplete(Exception):
    """The job's time ran out before the workspace was fully indexed; it is retried to continue."""


async def index_workspace(engine: Engine, workspace_id: str, *, deadline: float | None) -> dict[str, int]:
    """Build or revalidate a workspace's index (the job behind registration and partial builds)."""
    workspaces = workspaces_of(engine)
    workspace = workspaces.registry.get(workspace_id)
    if workspace is None:
        return {"missing": 1}
    fresh = await workspaces.revalidate(workspace, force=True, deadline=deadline, wait_s=_wait(deadline))
    if fresh.busy or (fresh.report is not None and not fresh.report.complete):
        raise IndexNotComplete(workspace_id)
    result = {"files": fresh.report.files_seen if fresh.report else 0}
    if workspace.search.prewarm_embeddings:
        result["queued"] = await warm(engine, workspace_id, deadline=deadline)
    return result


async def warm(engine: Engine, workspace_id: str, *, deadline: float | None) -> int:
    """Index the workspace fully, mark it warm and queue every cold chunk for embedding."""
    workspaces = workspaces_of(engine)
    workspace = workspaces.registry.get(workspace_id)
    if workspace is None:
        return 0
    fresh = await workspaces.revalidate(workspace, deadline=deadline, wait_s=_wait(deadline))
    if fresh.busy or (fresh.report is not None and not fresh.report.complete):
        raise IndexNotComplete(workspace_id)
    workspace = await workspaces.mark_warm(workspace)
    runtime = await workspaces.runtime(workspace)
    queued = await queue_cold(engine, workspace, runtime.cache)
    log.info("workspace warming", extra={"workspace": workspace_id, "queued": queued})
    return queued


def _wait(deadline: float | None) -> float:
    if deadline is None:
        return 3_600.0
    return max(deadline - time.monotonic(), 0.0)


__all__ = [
    "SCOPE_TOO_LARGE",
    "IndexNotComplete",
    "ScopeState",
    "cold_chunks",
    "dense_query",
    "embed_scope",
    "embedder_for",
    "index_workspace",
    "prepare_scope",
    "schedule_warming",
    "warm",
]
