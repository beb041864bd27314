"""Workspace code search: chunk-level hybrid (lexical + semantic, RRF) search over a
registered workspace, with ``path:line:snippet`` output, regex, path and glob scope, and a
graceful lexical fallback.

Modules: ``walker``, ``chunker``, ``languages``, ``trigram`` (the index), ``prefilter`` (what a regex requires),
``pattern`` (compiling a regex), ``rematch`` and ``matchers`` (regex matching in killable processes),
``scope``, ``skipped`` (building blocks); ``model`` (collection and keys), ``workspace`` (settings
and the durable registry), ``roots`` (who may register which root), ``parsing`` (request bodies),
``registration``, ``cache`` (the chunk cache on disk), ``ingest`` (revalidation: writing the
records), ``state`` (the open workspaces of an engine), ``residency`` (closing idle ones),
``watcher`` (watching an open workspace's root), ``status`` (a workspace's index state),
``lexical``, ``semantic``, ``ranking``, ``render``, ``search`` (one search: ``parse``, ``search``,
``SEARCH``), ``routes`` (HTTP), ``jobs`` (arq), ``cli`` (``agentsearch index`` / ``search``) and
``surface`` (the surface's definition, ``SURFACE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.engine.surface import SurfaceDef


def __getattr__(name: str) -> SurfaceDef:
    """``SURFACE`` (``service.code.surface``) is imported on first use, so a module of this package
    (the command line's ``search`` asking a running service) loads without the surface's routes,
    jobs, engine state and model code."""
    if name == "SURFACE":
        from service.code.surface import SURFACE

        return SURFACE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SURFACE"]
