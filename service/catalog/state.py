"""Per-engine catalog state: the record index, the rerank scorer (built once) and the waiting-items source."""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.catalog.keys import SURFACE_NAME
from service.catalog.rerank import Scorer, ScorerError, build_scorer
from service.catalog.waiting import WaitingSource, load_waiting_items
from service.engine.records import RecordIndex

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)


@dataclass
class CatalogState:
    index: RecordIndex
    scorer: Scorer | None
    waiting_source: WaitingSource  # swappable, so a test can make the check slow
    builtin_domains: Any = None  # domains.BuiltinDomains, filled and dropped by service.catalog.domains


# Keyed by id(engine); the weak reference guards against a recycled id after an engine is gone.
_STATES: dict[int, tuple[weakref.ref[Any], CatalogState]] = {}


def catalog_state(engine: Engine) -> CatalogState:
    """The catalog state of ``engine``, created on first use (the scorer is built once per engine)."""
    entry = _STATES.get(id(engine))
    if entry is not None and entry[0]() is engine:
        return entry[1]
    state = CatalogState(index=engine.records(SURFACE_NAME), scorer=_scorer(engine), waiting_source=load_waiting_items)
    for key in [k for k, (ref, _) in _STATES.items() if ref() is None]:
        del _STATES[key]
    _STATES[id(engine)] = (weakref.ref(engine), state)
    return state


def _scorer(engine: Engine) -> Scorer | None:
    """The configured scorer; None (searches report ``fallback-error: missing scorer``) when it cannot be built."""
    try:
        return build_scorer(engine.settings)
    except ScorerError as exc:
        log.warning("rerank scorer unavailable", extra={"reason": exc.reason, "error": str(exc)})
        return None
