"""Catalog search: capabilities by domain, guides, packages and exports, integrations, MCP servers and tools, secret references.

Modules: ``keys`` (collection and key scheme), ``models`` (entity validation), ``ingest``,
``ranking`` (fusion and arrangement), ``domains``, ``identity`` (exact package identity),
``lookup`` (entity detail), ``callshapes``, ``memories``, ``waiting``, ``timing``, ``render``,
``search`` (one search, start to finish) and ``routes``; ``refs``, ``markdown`` and ``rerank`` are
the pure helpers they call.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from service.catalog.keys import COLLECTION, SPEC, SURFACE_NAME
from service.catalog.routes import routes
from service.engine.store import VectorSpec
from service.engine.surface import SurfaceDef
from service.errors import EmbeddingUnavailable

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)


async def on_open(engine: Engine) -> None:
    """Create the default model's vector up front, so dense search works before the first embed job lands."""
    try:
        embedder = engine.embedders.default
    except EmbeddingUnavailable:
        return
    if embedder is not None and embedder.dimensions:
        await engine.store.ensure_vector(COLLECTION, VectorSpec(embedder.vector_name, embedder.dimensions))


SURFACE = SurfaceDef(name=SURFACE_NAME, spec=SPEC, routes=routes, on_open=on_open, analyzed_fields=("identity_terms", "link_terms"))

__all__ = ["SURFACE"]
