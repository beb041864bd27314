"""Action search: which (service instance, action) pairs a caller can reach, by free-text query.

Modules: ``model`` (value objects, keys, collections), ``parsing`` (request bodies), ``index`` (the
in-memory lexical index), ``state`` (this process's copy of the catalog), ``ingest`` (writes),
``visibility`` (who sees what), ``ranking`` (the scoring formula), ``render`` (the result shape),
``search`` (one answer), ``routes`` (HTTP) and ``loader`` (the APIs.guru catalog file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.actions.model import ACTIONS_SPEC, META_COLLECTION, META_SPEC, SURFACE_NAME
from service.actions.routes import routes
from service.actions.search import SEARCH
from service.actions.state import ActionCatalog
from service.engine.surface import SurfaceDef

if TYPE_CHECKING:
    from service.engine.runtime import Engine


async def _open(engine: Engine) -> None:
    """The surface's state: this process's action catalog, over the templates' and instances' meta
    collection, which sits beside the surface's own."""
    engine.state[SURFACE_NAME] = ActionCatalog(engine, await engine.open_collection(META_SPEC))


SURFACE = SurfaceDef(name=SURFACE_NAME, spec=ACTIONS_SPEC, routes=routes, on_open=_open, search=SEARCH, tenant_collections=(META_COLLECTION,))
