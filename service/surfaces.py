"""The search surfaces of the service: each one's collection, routes, jobs and CLI commands, listed once.

A surface is a package under ``service/`` (``catalog``, ``code``, ``actions``) whose
``__init__`` exposes ``SURFACE``, a ``SurfaceDef`` (the contract, ``service.engine.surface``).
Add a surface by naming its package in ``SURFACE_PACKAGES``. The app, the command line and the
workers hand ``surfaces()`` to the engine (``service.engine.startup.open_engine``), which imports none.
"""

from __future__ import annotations

import importlib
from typing import Any

from aiohttp import web

from service.engine.surface import JobDef, SurfaceDef
from service.engine.surface import surface_jobs as jobs_of

SURFACE_PACKAGES: tuple[str, ...] = ("service.actions", "service.catalog", "service.code")


def surfaces() -> list[SurfaceDef]:
    return [importlib.import_module(name).SURFACE for name in SURFACE_PACKAGES]


def setup_surface_routes(app: web.Application) -> None:
    for surface in surfaces():
        app.router.add_routes(surface.routes)


def add_cli_commands(subparsers: Any) -> None:
    for surface in surfaces():
        if surface.add_cli is not None:
            surface.add_cli(subparsers)


def surface_jobs() -> dict[str, JobDef]:
    return jobs_of(surfaces())


__all__ = ["SURFACE_PACKAGES", "SurfaceDef", "add_cli_commands", "setup_surface_routes", "surface_jobs", "surfaces"]
