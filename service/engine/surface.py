"""The surface contract: what one search surface hands the engine and the service (``SurfaceDef``).

The engine knows surfaces only through the ``SurfaceDef`` list it is opened with
(``service.engine.startup.open_engine``); it never imports a surface package. The app, the
command line and the workers get that list from ``service.surfaces.surfaces()``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from service.engine.store import CollectionSpec

if TYPE_CHECKING:
    from service.engine.runtime import Engine


@dataclass(frozen=True)
class JobDef:
    """One arq job: its coroutine (taking ``ctx`` first) and whether it runs on the fast queue."""

    function: Callable[..., Awaitable[Any]]
    fast: bool


@dataclass(frozen=True)
class SurfaceDef:
    """What one surface plugs into the service."""

    name: str
    spec: CollectionSpec
    routes: web.RouteTableDef
    on_open: Callable[[Engine], Awaitable[None]] | None = None
    add_cli: Callable[[Any], None] | None = None
    jobs: dict[str, JobDef] = field(default_factory=dict)
    """arq job name -> its job."""
    analyzed_fields: tuple[str, ...] = ()
    """Payload fields besides ``terms`` that hold analyzer output (``reindex`` upgrades them)."""
    bulk_embedding: bool = False
    """Its records arrive in bulk (workspace chunks): their embed jobs go to the bulk queue, behind
    which no interactive write's embedding waits."""
    tenant_collections: tuple[str, ...] = ()
    """Collections besides its own whose points carry a tenant in their key (re-keyed with it when
    old team keys are migrated, ``service.engine.teams``)."""


def surface_jobs(surfaces: Sequence[SurfaceDef]) -> dict[str, JobDef]:
    """Every surface's arq jobs, by name."""
    jobs: dict[str, JobDef] = {}
    for surface in surfaces:
        jobs.update(surface.jobs)
    return jobs
