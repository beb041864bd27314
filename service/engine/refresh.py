"""Freshness: embedding records in the background and sweeping up any whose embedding is stale.

Called by the arq jobs in ``workers/``; idempotent by construction: a record is embedded only
while its ``content_hash`` still equals the hash the job was enqueued with.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arq import Retry

from service.engine.records import DONE, PENDING, RecordIndex, can_embed
from service.engine.runtime import Engine
from service.engine.store import Filter, Match, Range, StoreError, VectorSpec
from service.engine.views import Document, embed_views
from service.errors import EmbeddingsDisabled, EmbeddingUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedOutcome:
    embedded: int
    stale: int
    missing: int

    def as_dict(self) -> dict[str, int]:
        return {"embedded": self.embedded, "stale": self.stale, "missing": self.missing}


def index_of(engine: Engine, collection: str) -> RecordIndex:
    for index in engine.surfaces.values():
        if index.collection == collection:
            return index
    raise LookupError(f"no surface owns collection {collection!r}")


async def embed_records(engine: Engine, collection: str, items: Sequence[tuple[str, str]]) -> EmbedOutcome:
    """Embed the records ``items`` (key, content hash) still current; skip stale and deleted ones."""
    index = index_of(engine, collection)
    wanted = dict(items)
    current = await index.get_many(list(wanted))
    stale = sum(1 for key, payload in current.items() if payload.get("content_hash") != wanted[key])
    missing = len(wanted) - len(current)
    # A record names its model and may name the dimensions asked of it (a workspace's
    # embeddings_dimensions): its vector must have the size its searches query.
    by_model: dict[tuple[str | None, int | None], list[tuple[str, str, Mapping[str, Any]]]] = defaultdict(list)
    for key, payload in current.items():
        if payload.get("content_hash") == wanted[key]:
            by_model[(payload.get("embed_model"), _dimensions(payload))].append((key, wanted[key], payload))
    embedded = 0
    for (model, dimensions), candidates in by_model.items():
        embedder = engine.embedders.get(model, dimensions)
        # Already embedded from this very text into this model's vector (a duplicate job, or a
        # sweeper batch): nothing to do. A vector of another model (the default changed) is redone.
        todo = {key: payload for key, _, payload in candidates if not is_embedded(payload, wanted[key], embedder.vector_name if embedder.dimensions else None)}
        documents = await index.documents(todo) if todo else {}
        missing += len(todo) - len(documents)  # a text the surface no longer has (its file changed since)
        rows = [(key, wanted[key], documents[key]) for key in todo if key in documents]
        if not rows:
            continue
        vectors = await embed_views(embedder, [doc for _, _, doc in rows])
        vector = VectorSpec(embedder.vector_name, embedder.dimensions)
        await engine.ensure_vector(collection, vector)
        try:
            embedded += await _write_vectors(index, vector.name, rows, vectors)
        except StoreError:
            # A reindex elsewhere may have retired this vector since this process added it: add it
            # again (the store answers whether it is there) and write once more.
            engine.forget_vector(collection, vector.name)
            await engine.ensure_vector(collection, vector)
            embedded += await _write_vectors(index, vector.name, rows, vectors)
    return EmbedOutcome(embedded=embedded, stale=stale, missing=missing)


async def embed_job(engine: Engine, collection: str, items: Sequence[Sequence[str]], job_try: int) -> dict[str, int]:
    """What an embed job runs: ``embed_records``, with embeddings off answered (the records stay
    pending, searched lexically, until a model serves) and a model or store failure retried later
    (arq ``Retry``, backing off with ``job_try``)."""
    try:
        outcome = await embed_records(engine, collection, [(str(key), str(content_hash)) for key, content_hash in items])
    except EmbeddingsDisabled:
        return {"embedded": 0, "disabled": len(items)}
    except (EmbeddingUnavailable, StoreError) as exc:
        log.warning("embed job will retry", extra={"collection": collection, "error": str(exc), "try": job_try})
        raise Retry(defer=min(5 * 2 ** (job_try - 1), 120)) from exc
    return outcome.as_dict()


def _dimensions(payload: Mapping[str, Any]) -> int | None:
    value = payload.get("embed_dimensions")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def is_embedded(payload: Mapping[str, Any], expected_hash: str, vector_name: str | None) -> bool:
    """The record has a vector computed from ``expected_hash`` in ``vector_name`` (None: any vector)."""
    if payload.get("embedded_hash") != expected_hash:
        return False
    stored = payload.get("vector_name")
    return vector_name is None or stored is None or stored == vector_name


async def _write_vectors(index: RecordIndex, vector_name: str, rows: list[tuple[str, str, Document]], vectors: list[list[float]]) -> int:
    """Write vectors of rows whose hash is still current (re-read: the embed took a while)."""
    store = index.engine.store
    latest = await index.get_many([key for key, _, _ in rows])
    current = [
        (index.point_id(key), expected_hash, values)
        for (key, expected_hash, _), values in zip(rows, vectors, strict=True)
        if latest.get(key, {}).get("content_hash") == expected_hash
    ]
    if current:
        await store.update_vectors(index.collection, [(pid, {vector_name: values}) for pid, _, values in current])
    for pid, expected_hash, _ in current:
        await store.set_payload(index.collection, [pid], {"embedded_hash": expected_hash, "embed_state": DONE, "vector_name": vector_name})
    written = len(current)
    # A write that landed between our re-read and set_payload would now look done: re-check once.
    after = await index.get_many([key for key, _, _ in rows])
    for key, payload in after.items():
        if payload.get("embed_state") == DONE and payload.get("embedded_hash") != payload.get("content_hash"):
            await store.set_payload(index.collection, [index.point_id(key)], {"embed_state": PENDING})
    return written


async def sweep(engine: Engine, *, max_records: int = 100_000, grace_s: float | None = None) -> dict[str, int]:
    """Re-enqueue every record pending for longer than ``grace_s``; returns how many per surface.

    Young pending records already have a queued job; re-enqueuing them in differently cut batches
    would embed them twice. The default grace is twice the job timeout, by which time arq has also
    re-run a job whose worker died.
    """
    grace = 2 * engine.settings.job_timeout_s if grace_s is None else grace_s
    cutoff = int(time.time() - grace)
    enqueued: dict[str, int] = {}
    for surface, index in engine.surfaces.items():
        items: list[tuple[str, str]] = []
        offset: str | None = None
        pending = Filter(must=(Match("embed_state", PENDING), Range("pending_since", lte=cutoff)))
        while len(items) < max_records:
            page, offset = await engine.store.scroll(index.collection, pending, limit=1024, offset=offset)
            items.extend((str(p.payload["key"]), str(p.payload["content_hash"])) for p in page if can_embed(engine, p.payload.get("embed_model")))
            if offset is None:
                break
        await index.enqueue_embedding(items)
        enqueued[surface] = len(items)
    return enqueued


__all__ = ["EmbedOutcome", "embed_job", "embed_records", "is_embedded", "sweep"]
