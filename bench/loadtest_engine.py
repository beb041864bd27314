"""The engine-only load target: each surface's search work called in-process, with no HTTP and no rendering.

``EngineTarget.open`` opens the engine (``open_engine`` with the service's surfaces) on a data
directory a stopped ``agentsearch serve`` loaded, with the settings that service ran with, and
``send(kind, text)`` runs one search of ``kind`` the way its HTTP handler would after parsing the
body and before building the answer:

    catalog  ``service.catalog.search.search`` up to the cards: the built-in domains and the
             broad-query check (a broad query lists the domain index instead), the exact-package
             lookup, then the catalog's own ``ranked_hits`` (retrieval, arrangement, the rerank
             stage, memories, the Waiting check); not ``render_ranked``
    actions  ``service.actions.search.search`` up to the ranking: the current catalog, the
             caller's visible instances and units, ``rank``; not the result rows
    code     ``service.code.search.search_workspace`` (revalidation, lexical and semantic passes,
             fusion, the result lines), the body of ``search`` before ``as_dict``

The rate limiter and ``run_search``'s deadline task are left out with the HTTP layer; the load's
open loop, texts and p99 criterion are the service's (``bench.loadtest``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from service.actions.parsing import parse_search_body as parse_action_search
from service.actions.ranking import rank
from service.actions.state import catalog_for
from service.actions.visibility import select_units, visible_instances
from service.auth import Caller, caller_from_claims
from service.catalog.answers import SearchContext, exact_package_answer
from service.catalog.domains import cached_builtin_domains, domain_index, is_broad
from service.catalog.ranked import ranked_hits
from service.catalog.search import parse_body as parse_catalog_search
from service.code.parsing import parse_search_body as parse_code_search
from service.code.search import search_workspace
from service.code.state import workspaces_of
from service.code.workspace import Workspace
from service.engine.deadline import Deadline, search_budget_s
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.settings_loader import load_settings
from service.surfaces import surfaces

# A search still running after this long counts as an error (the service's client gives up then too).
SEND_TIMEOUT_S = 30.0


@dataclass
class EngineTarget:
    """The engine of a loaded data directory, opened in this process, and the caller the load searches as."""

    engine: Engine
    caller: Caller
    workspace: Workspace

    @classmethod
    async def open(cls, environ: Mapping[str, str], data_dir: Path, claims: dict[str, object], workspace_id: str) -> EngineTarget:
        """Open ``data_dir`` (no process may hold it) with the settings ``environ`` gives the service."""
        engine = await open_engine(load_settings(environ, data_dir=data_dir), surfaces())
        caller = caller_from_claims(dict(claims))
        try:
            load = getattr(engine.embedders.default, "load", None)
            if load is not None:  # the service is ready only once its model is loaded: so is this target
                await load()
            workspace = workspaces_of(engine).owned((caller.user_tenant,), workspace_id)
        except BaseException:
            await engine.close()
            raise
        return cls(engine, caller, workspace)

    async def send(self, kind: str, text: str) -> int | str:
        """Run one search of ``kind``: 200 when it finished, else the exception's name."""
        try:
            await asyncio.wait_for(SEARCHES[kind](self, text), timeout=SEND_TIMEOUT_S)
        except Exception as exc:
            return type(exc).__name__
        return 200

    async def close(self) -> None:
        await self.engine.close()


async def catalog_search(target: EngineTarget, text: str) -> None:
    engine, caller = target.engine, target.caller
    request = parse_catalog_search({"query": text})
    ctx = SearchContext(engine, caller, request, Deadline(search_budget_s(engine.settings.request_deadline_s)))
    query = (request.query or "").strip()
    builtins = await cached_builtin_domains(engine)
    if is_broad(query, builtins, None):
        await domain_index(engine, caller)
        return
    if await exact_package_answer(ctx, query) is not None:
        return
    await ranked_hits(ctx, query, None)


async def action_search(target: EngineTarget, text: str) -> None:
    engine = target.engine
    request = parse_action_search({"query": text})
    index = await catalog_for(engine).current()
    instances = await visible_instances(engine, target.caller)
    units = select_units(index, instances, request)
    await rank(engine, index, units, request.query, request.limit, mode=request.ranking)


async def code_search(target: EngineTarget, text: str) -> None:
    engine = target.engine
    request = parse_code_search({"query": text, "limit": 10})
    await search_workspace(engine, target.workspace, request, deadline_s=search_budget_s(engine.settings.request_deadline_s))


SEARCHES: dict[str, Callable[[EngineTarget, str], Awaitable[None]]] = {
    "catalog": catalog_search,
    "actions": action_search,
    "code": code_search,
}
