"""The serving model: which embeddings model answers searches, kept as a marker every process reads.

The markers (the serving model's, a running migration's, the team-key check's) are points of the
``engine_meta`` collection, so they live where the vectors live and every front end and worker reads
the same ones. A process reads the serving marker at start (``load_serving``) and every
``SERVING_REFRESH_S`` seconds (``refresh_serving``): a reindex elsewhere may switch it
(``service.engine.reindex``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from service.engine.embeddings import EmbedderRegistry, ModelRef
from service.engine.store import CollectionSpec, PointRecord, Store, point_id

log = logging.getLogger(__name__)

META_COLLECTION = "engine_meta"
META_SPEC = CollectionSpec(name=META_COLLECTION)
SERVING_KEY = "serving_model"
# How often every process re-reads the serving marker; a reindex's switch waits two of these.
SERVING_REFRESH_S = 5.0


async def read_marker(store: Store, key: str) -> Mapping[str, Any] | None:
    points = await store.retrieve(META_COLLECTION, [point_id(META_COLLECTION, key)])
    return points[0].payload if points else None


async def write_marker(store: Store, key: str, payload: Mapping[str, Any]) -> None:
    body = {**payload, "key": key, "tenant": "global", "terms": "", "updated_at": time.time()}
    await store.upsert(META_COLLECTION, [PointRecord(id=point_id(META_COLLECTION, key), payload=body)])


def _ref(payload: Mapping[str, Any] | None, prefix: str = "") -> ModelRef | None:
    if not payload or not payload.get(f"{prefix}model"):
        return None
    dimensions = payload.get(f"{prefix}dimensions")
    return ModelRef(str(payload[f"{prefix}model"]), int(dimensions) if dimensions else None)


async def load_serving(store: Store, registry: EmbedderRegistry) -> None:
    """Read (or, on a new store, write) the serving marker; the registry serves what it names."""
    await store.ensure_collection(META_SPEC)
    configured = registry.configured
    marker = _ref(await read_marker(store, SERVING_KEY))
    if configured is not None and marker is None:
        await write_marker(store, SERVING_KEY, {"model": configured.model, "dimensions": configured.dimensions})
        marker = configured
    _serve(registry, marker)


async def refresh_serving(store: Store, registry: EmbedderRegistry) -> None:
    """Follow a switch made by another process (a reindex run elsewhere)."""
    _serve(registry, _ref(await read_marker(store, SERVING_KEY)))


def _serve(registry: EmbedderRegistry, marker: ModelRef | None) -> None:
    if marker == registry.serving or registry.configured is None:
        return
    registry.set_serving(marker)
    if marker is not None and marker != registry.configured:
        log.warning(
            "the configured embeddings model does not serve yet; run `agentsearch reindex` to fill its vectors and switch",
            extra={"serving": marker.model, "configured": registry.configured.model},
        )
    else:
        log.info("serving embeddings model", extra={"model": marker.model if marker else None})
