"""Catalog search: capabilities by domain, guides, packages and exports, integrations, MCP servers and tools, secret references.

Modules: ``keys`` (the collection and its key scheme), ``model`` (the entity values), ``parsing``
(request bodies), ``ingest`` and ``records`` (writing entities as records), ``state`` (what the
catalog keeps open per engine), ``search`` (one search, start to finish), ``answers`` (the answer
kinds besides ranked hits), ``ranked`` (the ranked answer), ``ranking`` (retrieval, fusion and
arrangement), ``rerank`` (the rerank stage) and ``scorers`` (what it scores with), ``domains``,
``identity`` (exact package identity), ``lookup`` (entity detail), ``callshapes``, ``memories``,
``waiting``, ``render`` (the answer body) and ``routes`` (HTTP); ``refs``, ``cursor`` and
``markdown`` are the pure helpers they call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.catalog.keys import SPEC, SURFACE_NAME
from service.catalog.routes import routes
from service.catalog.search import SEARCH
from service.catalog.state import open_state
from service.catalog.waiting import load_waiting_items
from service.engine.surface import SurfaceDef

if TYPE_CHECKING:
    from service.engine.runtime import Engine


async def on_open(engine: Engine) -> None:
    """Open the catalog state (its record index, the rerank scorer, the waiting-items source) on ``engine``."""
    open_state(engine, load_waiting_items)


SURFACE = SurfaceDef(
    name=SURFACE_NAME,
    spec=SPEC,
    routes=routes,
    on_open=on_open,
    search=SEARCH,
    analyzed_fields=("identity_terms", "link_terms"),
)

__all__ = ["SURFACE"]
