"""Loading the starter data set into a new data directory, once, through the ingest paths callers use.

What loads (``data/``, described in its README): global capabilities in a few domains and MCP
servers with their tools owned by the org ``demo`` (catalog), action templates with instances of the
user ``demo`` (actions), and this service's own source tree as demo's workspace (code).

Once per data directory, kept by a marker file (``MARKER``) in it:

- ``pending``: written at start on a new data directory (no index yet), before the engine opens;
  the load runs in the background after start and turns it into ``loaded``. A start that failed
  or stopped before that leaves it ``pending``, so the next start loads again (every write is an
  upsert: loading twice leaves the same records).
- ``loaded``: never loaded again, so a restart, or a user's deletions, are kept.
- ``skipped``: a data directory that held an index before it had a marker (data of its own): the
  starter set is never added to it.

Only `agentsearch serve` on the embedded default loads it (``Settings.loads_starter_data``); the
setting ``starter_data`` turns it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.actions.ingest import write_instances, write_templates
from service.actions.parsing import parse_instances_body, parse_templates_body
from service.auth import Caller, Plan
from service.catalog.routes import ingest_entities
from service.code.registration import register_workspace

if TYPE_CHECKING:
    from aiohttp import web

    from service.engine.runtime import Engine
    from service.settings import Settings

log = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parent / "data"
MARKER = "starter-data.json"
PENDING, LOADED, SKIPPED = "pending", "loaded", "skipped"

DEMO_SUB = "demo"
DEMO_ORG = "demo"
# The starter writes as demo with admin rights: capabilities and templates are global (admins write
# them), and the demo workspace lies under a plain base (admins register there in a multi-tenant
# deployment). What it owns is demo's: the workspace, the user instances, the org's MCP servers.
LOADER = Caller(sub=DEMO_SUB, org=DEMO_ORG, plan=Plan.PRO, admin=True)


def source_root() -> Path:
    """This service's own source tree (the ``service`` package), registered as demo's workspace."""
    return Path(__file__).resolve().parents[1]


def with_starter_base(settings: Settings) -> Settings:
    """``settings`` with the demo workspace's directory among the allowed bases, when the starter set
    loads (``starter_data`` on the embedded default); otherwise unchanged."""
    root = source_root()
    if not settings.loads_starter_data or root in settings.allowed_roots:
        return settings
    return settings.with_overrides(allowed_roots=(*settings.allowed_roots, root))


# ---- the marker ------------------------------------------------------------------------------------


def marker_state(data_dir: Path) -> str | None:
    """The marker's state (``pending``, ``loaded``, ``skipped``), or None when there is none."""
    try:
        state = json.loads((data_dir / MARKER).read_text()).get("state")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return PENDING  # unreadable: load again, which the upserts make harmless
    return str(state) if state in (PENDING, LOADED, SKIPPED) else PENDING


def _write_marker(data_dir: Path, state: str, **details: Any) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / MARKER
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"state": state, "at": time.time(), **details}, indent=2) + "\n")
    os.replace(tmp, path)


def starter_due(settings: Settings) -> bool:
    """Whether this start loads the starter set: it is on (the embedded default), and the data
    directory is new (no index yet: the pending marker is written now) or holds a pending marker.
    A directory with an index but no marker has data of its own and is marked skipped."""
    if not settings.loads_starter_data:
        return False
    state = marker_state(settings.data_dir)
    if state is None:
        if (settings.data_dir / "index").exists():
            _write_marker(settings.data_dir, SKIPPED, reason="the data directory held an index before starter data existed")
            return False
        _write_marker(settings.data_dir, PENDING)
        return True
    return state == PENDING


# ---- the load --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StarterLoad:
    """What one load wrote."""

    catalog_entities: int
    templates: int
    actions: int
    instances: int
    workspace: str
    seconds: float


_locks: dict[Path, asyncio.Lock] = {}


async def load_starter(engine: Engine, data: Path = DATA) -> StarterLoad | None:
    """Load the starter set from ``data`` into ``engine`` unless its data directory's marker says it
    is loaded or skipped; None then. One load at a time per data directory; the marker turns
    ``loaded`` when everything is written. Embedding follows through the workers."""
    data_dir = engine.settings.data_dir
    lock = _locks.setdefault(data_dir.resolve(), asyncio.Lock())
    async with lock:
        if marker_state(data_dir) in (LOADED, SKIPPED):
            return None
        started = time.perf_counter()
        catalog = json.loads((data / "catalog.json").read_text())
        entities = 0
        for body in catalog.values():
            entities += int((await ingest_entities(engine, LOADER, body))["written"])
        templates = parse_templates_body({"templates": [json.loads(line) for line in (data / "actions.jsonl").read_text().splitlines() if line.strip()]})
        written = await write_templates(engine, templates)
        instances = await write_instances(engine, parse_instances_body(json.loads((data / "instances.json").read_text()), LOADER))
        workspace, _ = await register_workspace(engine, LOADER, {"root": str(source_root())})
        load = StarterLoad(
            catalog_entities=entities,
            templates=written.templates,
            actions=written.actions,
            instances=instances,
            workspace=str(workspace["id"]),
            seconds=round(time.perf_counter() - started, 2),
        )
        _write_marker(data_dir, LOADED, **asdict(load))
        return load


async def load_in_background(engine: Engine, data: Path = DATA) -> StarterLoad | None:
    """``load_starter``, logging what it wrote; a failure is a warning (the marker stays pending,
    so the next start tries again) and never stops the service."""
    try:
        load = await load_starter(engine, data)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("starter data not loaded (the next start tries again): %s", exc, exc_info=True)
        return None
    if load is not None:
        log.info(
            "starter data loaded in %.1fs: %d catalog entities, %d action templates (%d actions), %d instances of user %s, workspace %s (%s)",
            load.seconds, load.catalog_entities, load.templates, load.actions, load.instances, DEMO_SUB, load.workspace, source_root(),
        )
    return load


def starter_context(data: Path = DATA) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context for the app (after the engine's): the load runs as a task beside serving,
    so the service answers at once; it is cancelled on shutdown if still running."""
    from service.state import ENGINE

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(load_in_background(app[ENGINE], data), name="starter-data")
        yield
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


def starter_in_place(settings: Settings) -> bool:
    """Whether the data directory holds (or is loading) the starter set: on, and not skipped."""
    return settings.loads_starter_data and marker_state(settings.data_dir) in (PENDING, LOADED)
