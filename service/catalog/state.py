"""Per-engine catalog state: the record index, the rerank scorer (built once) and the waiting-items source.

The catalog's ``on_open`` puts it on the engine (``open_state``); every catalog module reads and
writes the collection through its ``index``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import Caller
from service.catalog.keys import SURFACE_NAME
from service.catalog.scorers import Scorer, ScorerError, build_scorer
from service.engine.records import RecordIndex

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# Loads the caller's open waiting items (``waiting.load_waiting_items``, or a test's stand-in).
WaitingSource = Callable[["Engine", Caller], Awaitable[list[dict[str, Any]]]]


@dataclass
class CatalogState:
    index: RecordIndex
    scorer: Scorer | None
    waiting_source: WaitingSource  # swappable, so a test can make the check slow
    builtin_domains: Any = None  # domains.BuiltinDomains, filled and dropped by service.catalog.domains


def open_state(engine: Engine, waiting_source: WaitingSource) -> CatalogState:
    """Open the catalog state on ``engine`` (the surface's ``on_open``)."""
    state = CatalogState(index=engine.records(SURFACE_NAME), scorer=_scorer(engine), waiting_source=waiting_source)
    engine.state[SURFACE_NAME] = state
    return state


def catalog_state(engine: Engine) -> CatalogState:
    """The catalog state the surface opened on ``engine``."""
    state: CatalogState = engine.state_of(SURFACE_NAME)
    return state


def catalog_index(engine: Engine) -> RecordIndex:
    """The catalog's records on ``engine``."""
    return catalog_state(engine).index


def _scorer(engine: Engine) -> Scorer | None:
    """The configured scorer; None (searches report ``fallback-error: missing scorer``) when it cannot be built."""
    try:
        return build_scorer(engine.settings)
    except ScorerError as exc:
        log.warning("rerank scorer unavailable", extra={"reason": exc.reason, "error": str(exc)})
        return None
