"""The search surfaces of the service: each one's collection, routes, jobs and CLI commands, listed once.

A surface is a package under ``service/`` (``catalog``, ``code``, ``actions``) whose
``__init__`` exposes ``SURFACE``, a ``SurfaceDef``. Add a surface by naming its package in
``SURFACE_PACKAGES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from service.engine.store import CollectionSpec

if TYPE_CHECKING:
    from service.engine.runtime import Engine

SURFACE_PACKAGES: tuple[str, ...] = ("service.actions", "service.catalog", "service.code")


@dataclass(frozen=True)
class SurfaceDef:
    """What one surface plugs into the service."""

    name: str
    spec: CollectionSpec
    routes: web.RouteTableDef
    on_open: Callable[[Engine], Awaitable[None]] | None = None
    add_cli: Callable[[Any], None] | None = None
    jobs: dict[str, tuple[Callable[..., Awaitable[Any]], bool]] = field(default_factory=dict)
    """arq job name -> (coroutine taking ``ctx`` first, runs on the fast queue)."""
    analyzed_fields: tuple[str, ...] = ()
    """Payload fields besides ``terms`` that hold analyzer output (``reindex`` upgrades them)."""
    bulk_embedding: bool = False
    """Its records arrive in bulk (workspace chunks): their embed jobs go to the bulk queue, behind
    which no interactive write's embedding waits."""


def surfaces() -> list[SurfaceDef]:
    return [importlib.import_module(name).SURFACE for name in SURFACE_PACKAGES]


async def register_surfaces(engine: Engine) -> None:
    """Create (or open) every surface's collection on ``engine`` and run its start-up hook."""
    for surface in surfaces():
        await engine.register(surface.name, surface.spec, surface.analyzed_fields, bulk=surface.bulk_embedding)
        if surface.on_open is not None:
            await surface.on_open(engine)


def setup_surface_routes(app: web.Application) -> None:
    for surface in surfaces():
        app.router.add_routes(surface.routes)


def add_cli_commands(subparsers: Any) -> None:
    for surface in surfaces():
        if surface.add_cli is not None:
            surface.add_cli(subparsers)


def surface_jobs() -> dict[str, tuple[Callable[..., Awaitable[Any]], bool]]:
    jobs: dict[str, tuple[Callable[..., Awaitable[Any]], bool]] = {}
    for surface in surfaces():
        jobs.update(surface.jobs)
    return jobs
