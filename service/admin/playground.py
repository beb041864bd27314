"""The search playground: one search run in process as a chosen caller, each hit with the channel scores behind its rank, the timings and the notices.

An operator picks a surface, a caller (``sub``, ``org``, ``teams``, ``plan``; for code a
workspace, whose owner is the caller) and a query. The search runs through the surface's own
``parse`` and ``search``, the ones ``run_search`` runs for the HTTP route, as that caller: the
results are what that caller gets (the search is not counted against the caller's rate limit). It
runs inside ``explaining()``, so the ranking code notes each hit's channel scores and bonuses
(``service.engine.explain``) without changing the answer. ``/admin/playground`` is a GET form (the
query is in the URL, so a trace can be bookmarked or shared; nothing changes, so no CSRF token);
``/admin/api/playground`` answers the same trace as JSON. Bad input (an unknown surface, an empty
or too long query, code without a workspace, a tenant that holds no records) is a 400 saying what
to fix.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from service.actions.model import SURFACE_NAME as ACTIONS
from service.admin.auth import require_admin
from service.admin.handlers import bounded_int, json_response, redis_guard, state_of
from service.admin.indexstate import distinct_tenants
from service.admin.pages import _chrome, _page, _page_session, page_tally
from service.auth import GLOBAL_TENANT, Caller, Plan
from service.catalog.keys import SURFACE_NAME as CATALOG
from service.code.model import SURFACE_NAME as CODE
from service.code.state import workspaces_of
from service.engine.deadline import Deadline, SearchAbandoned, search_budget_s
from service.engine.explain import explaining
from service.engine.store import Filter, Match
from service.errors import AgentSearchError, ValidationError
from service.state import ENGINE

if TYPE_CHECKING:
    from service.engine.runtime import Engine

routes = web.RouteTableDef()

PARAMS = ("surface", "sub", "org", "teams", "plan", "workspace", "query", "limit")
MAX_QUERY_CHARS = 2_000
MAX_NAME_CHARS = 200
DEFAULT_LIMIT, MAX_LIMIT = 10, 50
# Known tenants named in a message (the form's suggestions list them all).
TENANTS_NAMED = 20


@dataclass(frozen=True)
class PlaygroundSearch:
    """One playground search, validated: the surface, who searches, the workspace (code), the query."""

    surface: str
    caller: Caller
    workspace: str | None
    query: str
    limit: int
    notices: tuple[str, ...] = ()
    """What the caller's input left unclear (an org holding no records), shown with the trace."""

    def as_dict(self) -> dict[str, Any]:
        caller = self.caller
        return {
            "surface": self.surface,
            "caller": {"sub": caller.sub, "org": caller.org, "teams": list(caller.teams), "plan": caller.plan.value, "tenants": list(caller.tenants)},
            "workspace": self.workspace,
            "query": self.query,
            "limit": self.limit,
        }


# ---- input ---------------------------------------------------------------------------------------------


def form_values(params: Mapping[str, str]) -> dict[str, str]:
    """The form's fields as given (blank when absent), to fill the form in again."""
    return {name: params.get(name, "").strip() for name in PARAMS}


async def parse_playground(engine: Engine, params: Mapping[str, str]) -> PlaygroundSearch:
    """The search the query string asks for; 400 with what to fix."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ValidationError(f"unknown query parameter(s) {', '.join(unknown)}; use {', '.join(PARAMS)}")
    values = form_values(params)
    surfaces = sorted(set(engine.searches) & set(_SHAPES))
    surface = values["surface"]
    if surface not in surfaces:
        raise ValidationError(f"surface must be one of {', '.join(surfaces)}, got {surface!r}")
    query = values["query"]
    if not query:
        raise ValidationError("query is empty: type what the caller would search for")
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError(f"query is {len(query)} characters long; the playground takes at most {MAX_QUERY_CHARS}")
    for name in ("sub", "org", "teams", "workspace"):
        if len(values[name]) > MAX_NAME_CHARS:
            raise ValidationError(f"{name} is longer than {MAX_NAME_CHARS} characters")
    limit = bounded_int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    try:
        plan = Plan(values["plan"] or Plan.FREE.value)
    except ValueError:
        raise ValidationError(f"plan must be one of {', '.join(p.value for p in Plan)}, got {values['plan']!r}") from None
    teams = tuple(dict.fromkeys(team.strip() for team in values["teams"].split(",") if team.strip()))
    if teams and not values["org"]:
        raise ValidationError("teams need an org: a team belongs to its org (name the org, or clear teams)")
    sub = values["sub"]
    workspace = values["workspace"] or None
    if surface == CODE:
        sub = await _workspace_owner(engine, workspace, sub)
    elif workspace is not None:
        raise ValidationError(f"workspace is for code search only; clear it, or pick surface {CODE}")
    if not sub:
        raise ValidationError("sub is empty: name the user to search as (a token's sub claim)")
    caller = Caller(sub=sub, org=values["org"] or None, teams=teams, plan=plan)
    notices = await require_known_tenants(engine, caller)
    return PlaygroundSearch(surface, caller, workspace, query, limit, tuple(notices))


async def _workspace_owner(engine: Engine, workspace_id: str | None, sub: str) -> str:
    """The sub a code search runs as: the workspace's owner (``sub`` may name it, or be left blank)."""
    registry = workspaces_of(engine).registry
    ids = ", ".join(w.id for w in registry.all()[:TENANTS_NAMED]) or "none is registered"
    if workspace_id is None:
        raise ValidationError(f"code search needs a workspace: pick one ({ids})")
    workspace = registry.get(workspace_id)
    if workspace is None:
        raise ValidationError(f"no workspace {workspace_id!r}: pick one ({ids})")
    owner = workspace.tenant.removeprefix("user:")
    if sub and sub != owner:
        raise ValidationError(f"workspace {workspace_id} belongs to {workspace.tenant}, not user:{sub}; clear sub or set it to {owner}")
    return owner


def _collections(engine: Engine) -> list[str]:
    return sorted({index.collection for index in engine.surfaces.values()} | set(engine.other_tenant_collections))


async def known_tenants(engine: Engine) -> list[str]:
    """Every tenant holding records on some surface, or a workspace (global aside), sorted."""
    found: set[str] = {w.tenant for w in workspaces_of(engine).registry.all()}
    for collection in _collections(engine):
        found.update((await distinct_tenants(engine, collection))[0])
    found.discard(GLOBAL_TENANT)
    return sorted(found)


async def _holds_records(engine: Engine, tenant: str) -> bool:
    if workspaces_of(engine).registry.owned_by((tenant,)):
        return True
    only = Filter(must=(Match("tenant", tenant),))
    for collection in _collections(engine):
        if await engine.store.count(collection, only):
            return True
    return False


async def require_known_tenants(engine: Engine, caller: Caller) -> list[str]:
    """400 when none of the caller's own tenants (user, org, teams) holds a record or a workspace:
    the search would answer as nobody. An org or team holding nothing gets a notice (a typo?)."""
    own = [caller.user_tenant, *(t for t in (caller.org_tenant, *caller.team_tenants) if t)]
    empty = [tenant for tenant in own if not await _holds_records(engine, tenant)]
    if len(empty) == len(own):
        known = await known_tenants(engine)
        shown = ", ".join(known[:TENANTS_NAMED]) + (", …" if len(known) > TENANTS_NAMED else "") if known else "none yet"
        raise ValidationError(f"unknown tenant: no surface holds a record or workspace of {' or '.join(empty)}; known tenants: {shown}")
    return [f"{tenant} holds no records on any surface (a typo?); the search ran without it" for tenant in empty if tenant != caller.user_tenant]


# ---- the search ------------------------------------------------------------------------------------------


async def run_playground(engine: Engine, asked: PlaygroundSearch) -> dict[str, Any]:
    """Search as ``asked.caller`` (parse, then search within the request deadline) and trace it."""
    searcher = engine.searches[asked.surface]
    started = time.perf_counter()
    body = {"query": asked.query, "limit": asked.limit}
    try:
        request = await searcher.parse(engine, asked.caller, body, asked.workspace)
    except AgentSearchError as exc:
        raise _as_bad_input(exc) from None
    deadline = Deadline(search_budget_s(engine.settings.request_deadline_s))
    notices = list(asked.notices)
    with explaining() as explanation:
        task = asyncio.create_task(searcher.search(engine, asked.caller, request, deadline))  # the task keeps the explanation
    answer_body: dict[str, Any] = {}
    status = 200
    try:
        answer = await asyncio.wait_for(task, timeout=deadline.remaining_s())
        answer_body, status = answer.body, answer.status
    except (TimeoutError, SearchAbandoned):
        notices.append(f"the search did not finish within {engine.settings.request_deadline_s:g}s (the caller would get the deadline answer)")
    except AgentSearchError as exc:
        raise _as_bad_input(exc) from None
    total_ms = (time.perf_counter() - started) * 1000
    shape = _SHAPES[asked.surface]
    trace = {
        **asked.as_dict(),
        "status": status,
        "timings": {"totalMs": round(total_ms, 2), "phases": {name: round(ms, 2) for name, ms in deadline.tiles().items()}},
        **shape(answer_body, explanation.hits),
    }
    trace["notices"] = [*trace["notices"], *notices]
    return trace


def _as_bad_input(exc: AgentSearchError) -> AgentSearchError:
    """A refusal of the search's input is the form's 400; a failure of the service stays what it is."""
    return ValidationError(exc.message) if exc.status < 500 else exc


# ---- one trace per surface: rows of rank, id, score, lexical, dense, fused, bonuses, why ------------------


def _row(rank: int, ident: Any, title: Any, score: Any, lexical: Any, dense: Any, fused: Any, bonuses: dict[str, Any], why: list[str], evidence: Mapping[str, Any]) -> dict[str, Any]:
    return {"rank": rank, "id": str(ident), "title": "" if title is None else str(title), "score": score, "lexical": lexical, "dense": dense, "fused": fused, "bonuses": bonuses, "why": why, "evidence": dict(evidence)}


def _catalog(body: Mapping[str, Any], hits: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Cards carry the blend's parts (``scoreFrom``); the name and parent adjustments come from the explanation."""
    doc = body.get("structuredContent") or {}
    intents = doc.get("intents") or []
    rows = []
    for rank, card in enumerate(doc.get("results") or [], start=1):
        parts = card.get("scoreFrom") or {}
        noted = hits.get(str(card.get("entity")), {})
        bonuses: dict[str, Any] = {}
        if "identity" in noted:
            bonuses["name"] = noted["identity"]
        if noted.get("parent") and parts.get("parent"):  # the best-matching parent's members do not move
            bonuses[f"parent {parts['parent']['entity']}"] = noted["parent"]
        if "rerankScore" in card:
            bonuses["rerank"] = card["rerankScore"]
        score = card.get("score")
        fused = None
        if isinstance(score, (int, float)) and not intents:  # intents shift scores per intent list
            fused = round(score - sum(v for k, v in bonuses.items() if k != "rerank"), 4)
        why = [*(card.get("whyMatched") or []), *(f"intent: {text}" for text in parts.get("intents") or [])]
        ident = card.get("entity") or card.get("id") or card.get("domain")
        rows.append(_row(rank, ident, card.get("title") or card.get("summary") or card.get("description"), score, parts.get("lexical"), parts.get("cosine"), fused, bonuses, why, noted))
    notices = list(doc.get("notices") or [])
    if doc.get("kind") == "error" and doc.get("error"):
        notices.append(str(doc["error"].get("message")))
    meta = {key: doc[key] for key in ("kind", "mode", "intents", "telemetry") if key in doc}
    return {"kind": doc.get("kind"), "mode": doc.get("mode"), "notices": notices, "meta": meta, "results": rows}


def _code(body: Mapping[str, Any], hits: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Result lines carry the final score and path adjustment; each chunk's evidence comes from the explanation."""
    rows = []
    for rank, line in enumerate(body.get("results") or [], start=1):
        noted = hits.get(f"{line['path']}:{line['start_line']}", {})
        adjustment = line.get("adjustment") or {}
        bonuses: dict[str, Any] = {}
        if adjustment.get("weight", 1.0) != 1.0:
            bonuses[f"path ({adjustment.get('category')})"] = f"×{adjustment['weight']}"
        if noted.get("literal"):
            bonuses["literal match"] = "yes"
        why = [f"found by {line.get('source')}", *([f"symbol {line['symbol']}"] if line.get("symbol") else [])]
        ident = f"{line['path']}:{line['line']}"
        rows.append(_row(rank, ident, line.get("snippet"), line.get("score"), noted.get("bm25"), noted.get("cosine"), noted.get("fused"), bonuses, why, noted))
    meta = dict(body.get("meta") or {})
    return {"kind": "ranked", "mode": meta.get("mode"), "notices": list(body.get("notices") or []), "meta": meta, "results": rows}


def _actions(body: Mapping[str, Any], hits: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Rows carry the final score; the keyword and cosine signals and the bonuses come from the explanation."""
    rows = []
    for rank, result in enumerate(body.get("results") or [], start=1):
        noted = hits.get(f"{result.get('template')}|{result.get('service', '')}|{result.get('action')}", {})
        bonuses = {name: noted[key] for name, key in (("connected", "connectedBonus"), ("risk", "riskBonus")) if noted.get(key)}
        blend = noted.get("blend")
        fused = None
        if blend and noted.get("keyword") is not None and noted.get("cosine") is not None:
            fused = round(blend["keyword"] * noted["keyword"] + blend["embedding"] * noted["cosine"], 4)
        why = [f"tier {result.get('tier')}", f"risk {result.get('risk')}", "connected" if (result.get("auth") or {}).get("connected") else "not connected"]
        ident = f"{result.get('service') or result.get('template')}.{result.get('action')}"
        rows.append(_row(rank, ident, result.get("description"), result.get("score"), noted.get("keyword"), noted.get("cosine"), fused, bonuses, why, noted))
    meta = dict(body.get("meta") or {})
    return {"kind": meta.get("mode"), "mode": meta.get("ranking"), "notices": list(body.get("notices") or []), "meta": meta, "results": rows}


_SHAPES = {CATALOG: _catalog, CODE: _code, ACTIONS: _actions}


# ---- routes ----------------------------------------------------------------------------------------------


@routes.get("/admin/playground")
@redis_guard
async def playground_page(request: web.Request) -> web.Response:
    """The form, and after a search its trace; bad input renders the form again with the message (400)."""
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    engine = request.app[ENGINE]
    trace = None
    error = None
    if request.query:
        try:
            trace = await run_playground(engine, await parse_playground(engine, request.query))
        except AgentSearchError as exc:
            if exc.status >= 500:
                raise
            error = exc.message
    values = form_values(request.query)
    values["surface"] = values["surface"] or CATALOG
    tenants = await known_tenants(engine)
    return _page(
        "playground.html",
        status=400 if error else 200,
        **_chrome(request, session, await page_tally(state_of(request)), "playground"),
        form=values,
        surfaces=sorted(set(engine.searches) & set(_SHAPES)),
        plans=[plan.value for plan in Plan],
        users=[t.removeprefix("user:") for t in tenants if t.startswith("user:")],
        orgs=[t.removeprefix("org:") for t in tenants if t.startswith("org:")],
        tenants=tenants,
        workspaces=[{"id": w.id, "tenant": w.tenant, "root": str(w.root)} for w in workspaces_of(engine).registry.all()],
        trace=trace,
        error=error,
        json_link="/admin/api/playground?" + urlencode({k: v for k, v in values.items() if v}),
        notice=None,
    )


@routes.get("/admin/api/playground")
@redis_guard
async def api_playground(request: web.Request) -> web.Response:
    """The trace of the same search as JSON (the page's parameters)."""
    require_admin(request)
    engine = request.app[ENGINE]
    return json_response(await run_playground(engine, await parse_playground(engine, request.query)))
