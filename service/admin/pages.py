"""The dashboard's HTML pages under ``/admin``, rendered on the server (readable with JavaScript off),
with the login form, logout, the chart and the page's static script and style.

Every page after login carries the header bar: the tabs (Busy, Queues, Retries, Scheduled, Dead),
each with its count, and the workers' totals, all from the page's one tally (``tally``), which the
page's tables read too. The tabs are plain links to server-rendered pages.

Every page authenticates itself (the auth middleware lets ``/admin`` through for the login page):
a browser without a session goes to the login form.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
import orjson
from aiohttp import web

from service.admin.auth import (
    AdminSession,
    check_same_origin,
    clear_login_cookie,
    require_admin,
    require_admin_action,
    set_login_cookie,
    verify_admin_token,
)
from service.admin.chart import chart_svg
from service.admin.handlers import (
    NOTICE_COOKIE,
    SECURITY_HEADERS,
    bounded_int,
    parse_job_query,
    redirect,
    redis_guard,
    state_of,
)
from service.admin.health import worker_health
from service.admin.indexstate import index_state
from service.admin.jobrecord import JobStatus
from service.admin.jobtable import JobQuery
from service.admin.queues import now_ms
from service.admin.sampler import AdminState, series
from service.admin.tally import Tab, Tally, tab_rows, tally
from service.errors import AgentSearchError, Forbidden, Unauthorized
from service.state import ENGINE

routes = web.RouteTableDef()

STATIC_TYPES = {"admin.js": "text/javascript", "admin.css": "text/css"}
# Rows per page of a tab.
TAB_PAGE = 50
# An argument longer than this (as JSON) or with more items is shown folded, its size in the summary.
FOLD_CHARS, FOLD_ITEMS = 200, 10


# ---- rendering ------------------------------------------------------------------------------------


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(ms: int | None) -> str:
    if ms is None:
        return ""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _bytes(value: int | None) -> str:
    if value is None:
        return ""
    return f"{value / 2**20:.0f} MiB" if value < 2**30 else f"{value / 2**30:.1f} GiB"


def _uptime(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s"


def _size(value: Any) -> str:
    """What a folded argument holds: ``512 items``, ``3 keys``, ``4000 characters``."""
    if isinstance(value, (list, tuple)):
        return f"{len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"{len(value)} key{'' if len(value) == 1 else 's'}"
    return f"{len(_compact(value))} characters"


def _folds(value: Any) -> bool:
    if isinstance(value, (list, tuple, dict)) and len(value) > FOLD_ITEMS:
        return True
    return len(_compact(value)) > FOLD_CHARS


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("service.admin", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_TEMPLATES.filters.update(
    when=_when, duration=_duration, json=_json, compact=_compact, quote=lambda s: quote(str(s), safe=""),
    bytes=_bytes, uptime=_uptime, size=_size, folds=_folds,
)  # fmt: skip


def _page(name: str, status: int = 200, **context: Any) -> web.Response:
    html = _TEMPLATES.get_template(name).render(**context)
    return web.Response(text=html, status=status, content_type="text/html", headers=SECURITY_HEADERS)


def _notice(request: web.Request) -> str | None:
    """The one-shot notice an action left for the page it redirected to (``_shown`` clears it)."""
    notice = request.cookies.get(NOTICE_COOKIE)
    return unquote(notice) if notice else None


def _shown(response: web.Response, notice: str | None) -> web.Response:
    if notice:
        response.del_cookie(NOTICE_COOKIE, path="/admin")
    return response


def _page_links(query: JobQuery, has_more: bool) -> dict[str, str | None]:
    base = {k: v for k, v in query.as_dict().items() if v not in (None, "") and k not in {"offset", "function"}}
    if query.function:
        base["kind"] = query.function

    def link(offset: int) -> str:
        return "/admin?" + urlencode({**base, "offset": offset}) + "#jobs"

    return {
        "newer": link(max(0, query.offset - query.limit)) if query.offset > 0 else None,
        "older": link(query.offset + query.limit) if has_more else None,
    }


# ---- pages ------------------------------------------------------------------------------------------


def _page_session(request: web.Request) -> AdminSession | web.Response:
    """The admin of a page request; a browser without a session goes to the login form, a non-admin gets it with 403."""
    try:
        return require_admin(request)
    except Unauthorized:
        raise redirect("/admin/login") from None
    except Forbidden as exc:
        return _page("login.html", status=403, error=exc.message)


async def page_tally(state: AdminState) -> Tally:
    """The one read of every count a page shows."""
    return await tally(state.reader, interval_s=state.engine.settings.worker_health_check_s)


def _chrome(request: web.Request, session: AdminSession, the_tally: Tally, current: str) -> dict[str, Any]:
    """What every page after login shows: who, the CSRF token, the header bar's tabs and counts."""
    return {
        "admin": session.caller.sub,
        "csrf": session.csrf_token(request.app[ENGINE].jwt_secret),
        "counts": the_tally.counts(),
        "counts_exact": the_tally.exact,
        "tabs": [(tab.value, tab.label) for tab in Tab],
        "current": current,
    }


@routes.get("/admin")
@redis_guard
async def dashboard_page(request: web.Request) -> web.Response:
    """The dashboard, fully rendered on the server (readable with JavaScript off)."""
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    state = state_of(request)
    query = parse_job_query(request, strict=False)
    notice = _notice(request)
    the_tally = await page_tally(state)
    jobs = await state.table.list_jobs(query)
    history = await series(state)
    engine = request.app[ENGINE]
    response = _page(
        "dashboard.html",
        **_chrome(request, session, the_tally, "dashboard"),
        overview=the_tally.overview.as_dict(),
        workers=await worker_health(state.reader),
        jobs=jobs.as_dict(),
        links=_page_links(query, jobs.has_more),
        index=await index_state(engine),
        chart=chart_svg(history["samples"], now_ms()),
        statuses=[s.value for s in JobStatus],
        surfaces=sorted(engine.surfaces),
        queues=list(state.reader.queues),
        query=query.as_dict(),
        notice=notice,
        generated=_when(now_ms()),
        interval_s=state.interval_s,
        refresh_ms=int(1000 * min(5.0, max(1.0, state.interval_s))),
    )
    return _shown(response, notice)


@routes.get("/admin/{tab:busy|queues|retries|scheduled|dead}")
@redis_guard
async def tab_page(request: web.Request) -> web.Response:
    """One tab: its jobs (``offset``, 50 a page) in the tab's order, and on Busy the processes, on Queues the counts."""
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    state = state_of(request)
    tab = Tab(request.match_info["tab"])
    offset = bounded_int(request.query, "offset", 0, 0, 1_000_000)
    notice = _notice(request)
    the_tally = await page_tally(state)
    rows = await tab_rows(state.reader, state.table.hydrate_finished, the_tally, tab, offset=offset, limit=TAB_PAGE)
    total = the_tally.count(tab)
    listed = len(the_tally.entries[tab])
    response = _page(
        "tab.html",
        **_chrome(request, session, the_tally, tab.value),
        tab=tab.value,
        label=tab.label,
        jobs=[row.as_dict() for row in rows],
        total=total,
        offset=offset,
        newer=f"/admin/{tab.value}?offset={max(0, offset - TAB_PAGE)}" if offset > 0 else None,
        older=f"/admin/{tab.value}?offset={offset + TAB_PAGE}" if offset + TAB_PAGE < listed else None,
        overview=the_tally.overview.as_dict(),
        processes=[p.as_dict(the_tally.at_ms) for p in the_tally.processes],
        unreported=the_tally.unreported,
        notice=notice,
    )
    return _shown(response, notice)


def confirm_page(request: web.Request, session: AdminSession, *, question: str, action: str, fields: list[tuple[str, str]], ids: list[str], back: str) -> web.Response:
    """Ask before a destructive action posted by a plain form (JavaScript off): the same post again, confirmed."""
    return _page(
        "confirm.html",
        admin=session.caller.sub,
        csrf=session.csrf_token(request.app[ENGINE].jwt_secret),
        question=question,
        action=action,
        fields=fields,
        ids=ids,
        back=back,
        notice=None,
    )


@routes.get("/admin/jobs/{job_id:.+}")
@redis_guard
async def job_page(request: web.Request) -> web.Response:
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    state = state_of(request)
    job_id = request.match_info["job_id"]
    row = await state.reader.job(job_id)
    notice = _notice(request)
    response = _page(
        "job.html",
        status=200 if row is not None else 404,
        **_chrome(request, session, await page_tally(state), ""),
        job_id=job_id,
        job=row.as_dict(full=True) if row is not None else None,
        notice=notice,
        refresh_ms=int(1000 * min(5.0, max(1.0, state.interval_s))),
    )
    return _shown(response, notice)


@routes.get("/admin/login")
async def login_page(request: web.Request) -> web.Response:
    return _page("login.html", error=None)


@routes.post("/admin/login")
async def login(request: web.Request) -> web.StreamResponse:
    """Check the admin token of the form and keep it in the HttpOnly, SameSite=Strict cookie."""
    check_same_origin(request)
    form = await request.post()
    token = str(form.get("token") or "").strip()
    if not token:
        return _page("login.html", status=400, error="paste an admin token (agentsearch token --sub NAME --admin prints one)")
    try:
        verify_admin_token(request, token)
    except AgentSearchError as exc:
        return _page("login.html", status=exc.status, error=exc.message)
    response = redirect("/admin")
    set_login_cookie(request, response, token)
    raise response


@routes.post("/admin/logout")
@redis_guard
async def logout(request: web.Request) -> web.StreamResponse:
    await require_admin_action(request)
    response = redirect("/admin/login")
    clear_login_cookie(response)
    raise response


@routes.get("/admin/chart.svg")
@redis_guard
async def chart(request: web.Request) -> web.Response:
    require_admin(request)
    history = await series(state_of(request))
    return web.Response(text=chart_svg(history["samples"], now_ms()), content_type="image/svg+xml", headers={"Cache-Control": "no-store"})


@routes.get("/admin/static/{name}")
async def static(request: web.Request) -> web.Response:
    """The page's script and style (no secrets: served without a login)."""
    name = request.match_info["name"]
    if name not in STATIC_TYPES:
        raise web.HTTPNotFound()
    body = resources.files("service.admin").joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=STATIC_TYPES[name], headers={"Cache-Control": "no-cache"})
