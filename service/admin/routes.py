"""The admin dashboard's HTTP routes: the HTML pages under ``/admin`` and the JSON API under ``/admin/api``.

Every handler authenticates itself (the auth middleware lets ``/admin`` through for the login
page): ``require_admin`` for reads, ``require_admin_action`` (CSRF for cookie sessions) for
actions. An action posted by a plain HTML form (JavaScript off) answers with a redirect back to
the page and a one-shot notice; the page's script posts the same forms with ``Accept:
application/json`` and gets JSON.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
import orjson
from aiohttp import web
from redis.exceptions import RedisError

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
from service.admin.indexstate import index_state
from service.admin.model import JobStatus
from service.admin.queues import MAX_LIMIT, MAX_OFFSET, JobQuery, now_ms
from service.admin.sampler import ADMIN, AdminState, series
from service.errors import AgentSearchError, Forbidden, NotFound, Unauthorized, Unavailable, ValidationError
from service.state import ENGINE
from service.validation import Fields, read_json

routes = web.RouteTableDef()
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

NOTICE_COOKIE = "agentsearch_admin_notice"
JOB_QUERY_PARAMS = ("status", "kind", "surface", "tenant", "queue", "offset", "limit")
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}
STATIC_TYPES = {"admin.js": "text/javascript", "admin.css": "text/css"}


# ---- rendering ------------------------------------------------------------------------------------


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(ms: int | None) -> str:
    if ms is None:
        return ""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2, default=str).decode()


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("service.admin", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_TEMPLATES.filters.update(when=_when, duration=_duration, json=_json, compact=_compact, quote=lambda s: quote(str(s), safe=""))


def _page(name: str, status: int = 200, **context: Any) -> web.Response:
    html = _TEMPLATES.get_template(name).render(**context)
    return web.Response(text=html, status=status, content_type="text/html", headers=SECURITY_HEADERS)


def _api(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body, default=str), status=status, content_type="application/json", headers={"Cache-Control": "no-store"})


def _state(request: web.Request) -> AdminState:
    return request.app[ADMIN]


def _wants_json(request: web.Request) -> bool:
    """A plain HTML form post (JavaScript off) gets a redirect; anything else gets JSON."""
    is_form = request.content_type in {"application/x-www-form-urlencoded", "multipart/form-data"}
    return not is_form or "application/json" in request.headers.get("Accept", "")


def _redirect(location: str, notice: str | None = None) -> web.HTTPSeeOther:
    response = web.HTTPSeeOther(location=location, headers=SECURITY_HEADERS)
    if notice:
        response.set_cookie(NOTICE_COOKIE, quote(notice[:300]), max_age=60, path="/admin", httponly=True, samesite="Strict")
    return response


def _notice(request: web.Request) -> str | None:
    """The one-shot notice an action left for the page it redirected to (``_shown`` clears it)."""
    notice = request.cookies.get(NOTICE_COOKIE)
    return unquote(notice) if notice else None


def _shown(response: web.Response, notice: str | None) -> web.Response:
    if notice:
        response.del_cookie(NOTICE_COOKIE, path="/admin")
    return response


def _redis_guard(handler: Handler) -> Handler:
    """A dashboard handler whose Redis is down answers 503 with a clear message, not a 500."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (RedisError, OSError) as exc:
            raise Unavailable(f"Redis is unreachable ({exc}); the dashboard reads the queues from it") from None

    return guarded


# ---- parsing ------------------------------------------------------------------------------------------


def _bounded_int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"{name} must be an integer between {low} and {high}, got {raw!r}") from None
    if not low <= value <= high:
        raise ValidationError(f"{name} must be between {low} and {high}, got {value}")
    return value


def parse_job_query(request: web.Request, *, strict: bool) -> JobQuery:
    """The job table's filters from the query string; ``strict`` (the API) refuses unknown parameters."""
    params = request.query
    if strict:
        unknown = sorted(set(params) - set(JOB_QUERY_PARAMS))
        if unknown:
            raise ValidationError(f"unknown query parameter(s) {', '.join(unknown)}; use {', '.join(JOB_QUERY_PARAMS)}")
        # The page's own form sends empty selects (meaning "any"); the API takes a value or no parameter.
        empty = [name for name in ("status", "queue", "offset", "limit") if name in params and not params[name].strip()]
        if empty:
            raise ValidationError(f"query parameter(s) {', '.join(empty)} are empty; give a value or leave the parameter out")
    text = {name: params.get(name, "").strip() for name in ("status", "kind", "surface", "tenant", "queue")}
    for name in ("kind", "tenant"):
        if len(text[name]) > 200:
            raise ValidationError(f"{name} is longer than 200 characters")
    status = None
    if text["status"]:
        try:
            status = JobStatus(text["status"])
        except ValueError:
            raise ValidationError(f"status must be one of {', '.join(s.value for s in JobStatus)}, got {text['status']!r}") from None
    state = _state(request)
    if text["queue"] and text["queue"] not in state.reader.queues:
        raise ValidationError(f"queue must be one of {', '.join(state.reader.queues)}, got {text['queue']!r}")
    surfaces = sorted(request.app[ENGINE].surfaces)
    if text["surface"] and text["surface"] not in surfaces:
        raise ValidationError(f"surface must be one of {', '.join(surfaces)}, got {text['surface']!r}")
    return JobQuery(
        status=status,
        function=text["kind"] or None,
        surface=text["surface"] or None,
        tenant=text["tenant"] or None,
        queue=text["queue"] or None,
        offset=_bounded_int(params, "offset", 0, 0, MAX_OFFSET),
        limit=_bounded_int(params, "limit", 50, 1, MAX_LIMIT),
    )


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


# ---- HTML pages ---------------------------------------------------------------------------------------


def _page_session(request: web.Request) -> AdminSession | web.Response:
    """The admin of a page request; a browser without a session goes to the login form, a non-admin gets it with 403."""
    try:
        return require_admin(request)
    except Unauthorized:
        raise _redirect("/admin/login") from None
    except Forbidden as exc:
        return _page("login.html", status=403, error=exc.message)


@routes.get("/admin")
@_redis_guard
async def dashboard_page(request: web.Request) -> web.Response:
    """The dashboard, fully rendered on the server (readable with JavaScript off)."""
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    state = _state(request)
    query = parse_job_query(request, strict=False)
    notice = _notice(request)
    overview = await state.reader.overview()
    jobs = await state.reader.list_jobs(query)
    history = await series(state)
    engine = request.app[ENGINE]
    response = _page(
        "dashboard.html",
        admin=session.caller.sub,
        csrf=session.csrf_token(engine.jwt_secret),
        overview=overview.as_dict(),
        workers=await state.reader.workers(),
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


@routes.get("/admin/jobs/{job_id:.+}")
@_redis_guard
async def job_page(request: web.Request) -> web.Response:
    session = _page_session(request)
    if isinstance(session, web.Response):
        return session
    state = _state(request)
    job_id = request.match_info["job_id"]
    row = await state.reader.job(job_id)
    notice = _notice(request)
    response = _page(
        "job.html",
        status=200 if row is not None else 404,
        admin=session.caller.sub,
        csrf=session.csrf_token(request.app[ENGINE].jwt_secret),
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
    response = _redirect("/admin")
    set_login_cookie(request, response, token)
    raise response


@routes.post("/admin/logout")
@_redis_guard
async def logout(request: web.Request) -> web.StreamResponse:
    await require_admin_action(request)
    response = _redirect("/admin/login")
    clear_login_cookie(response)
    raise response


@routes.get("/admin/chart.svg")
@_redis_guard
async def chart(request: web.Request) -> web.Response:
    require_admin(request)
    history = await series(_state(request))
    return web.Response(text=chart_svg(history["samples"], now_ms()), content_type="image/svg+xml", headers={"Cache-Control": "no-store"})


@routes.get("/admin/static/{name}")
async def static(request: web.Request) -> web.Response:
    """The page's script and style (no secrets: served without a login)."""
    name = request.match_info["name"]
    if name not in STATIC_TYPES:
        raise web.HTTPNotFound()
    body = resources.files("service.admin").joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=STATIC_TYPES[name], headers={"Cache-Control": "no-cache"})


# ---- JSON API -------------------------------------------------------------------------------------------


@routes.get("/admin/api/overview")
@_redis_guard
async def api_overview(request: web.Request) -> web.Response:
    require_admin(request)
    return _api((await _state(request).reader.overview()).as_dict())


@routes.get("/admin/api/series")
@_redis_guard
async def api_series(request: web.Request) -> web.Response:
    require_admin(request)
    return _api(await series(_state(request)))


@routes.get("/admin/api/workers")
@_redis_guard
async def api_workers(request: web.Request) -> web.Response:
    require_admin(request)
    return _api({"workers": await _state(request).reader.workers(), "health_check_interval_s": request.app[ENGINE].settings.worker_health_check_s})


@routes.get("/admin/api/index")
@_redis_guard
async def api_index(request: web.Request) -> web.Response:
    require_admin(request)
    return _api(await index_state(request.app[ENGINE]))


@routes.get("/admin/api/jobs")
@_redis_guard
async def api_jobs(request: web.Request) -> web.Response:
    require_admin(request)
    query = parse_job_query(request, strict=True)
    return _api((await _state(request).reader.list_jobs(query)).as_dict())


# Actions first: their paths end in /retry or /abort, which the detail route's pattern also matches.
@routes.post("/admin/api/jobs/{job_id:.+}/retry")
@_redis_guard
async def api_retry(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    job_id = request.match_info["job_id"]
    try:
        row = await _state(request).actions.retry(job_id, admin=session.caller.sub)
    except AgentSearchError as exc:
        if _wants_json(request):
            raise
        raise _redirect(f"/admin/jobs/{quote(job_id, safe='')}", f"Retry refused: {exc.message}") from None
    if not _wants_json(request):
        raise _redirect(f"/admin/jobs/{quote(row.id, safe='')}", f"Job {job_id} retried as {row.id}.")
    return _api({"job": row.as_dict(full=True), "retry_of": job_id}, status=201)


@routes.post("/admin/api/jobs/{job_id:.+}/abort")
@_redis_guard
async def api_abort(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    job_id = request.match_info["job_id"]
    try:
        outcome = await _state(request).actions.abort(job_id, admin=session.caller.sub)
    except AgentSearchError as exc:
        if _wants_json(request):
            raise
        raise _redirect(f"/admin/jobs/{quote(job_id, safe='')}", f"Abort refused: {exc.message}") from None
    if not _wants_json(request):
        raise _redirect(f"/admin/jobs/{quote(job_id, safe='')}", f"Abort of job {job_id} requested.")
    return _api(outcome, status=202)


@routes.get("/admin/api/jobs/{job_id:.+}")
@_redis_guard
async def api_job(request: web.Request) -> web.Response:
    require_admin(request)
    job_id = request.match_info["job_id"]
    row = await _state(request).reader.job(job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}: it never existed, or it finished over an hour ago and its result expired")
    return _api(row.as_dict(full=True))


@routes.post("/admin/api/warm")
@_redis_guard
async def api_warm(request: web.Request) -> web.StreamResponse:
    """Re-enqueue a workspace's warm-up: ``{"workspace": "ws_..."}`` as JSON or a form field."""
    session = await require_admin_action(request)
    if request.content_type == "application/json":
        fields = Fields(await read_json(request))
        workspace_id = fields.str("workspace", required=True, max_length=200, non_empty=True)
        fields.reject_unknown()
    else:
        workspace_id = str((await request.post()).get("workspace") or "").strip()
        if not workspace_id:
            raise ValidationError("workspace is required: the id of a registered workspace (ws_...)")
    return await _enqueue_action(request, lambda: _state(request).actions.warm_workspace(workspace_id, admin=session.caller.sub), "warm-up")


@routes.post("/admin/api/sweep")
@_redis_guard
async def api_sweep(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    return await _enqueue_action(request, lambda: _state(request).actions.sweep_now(admin=session.caller.sub), "sweep")


async def _enqueue_action(request: web.Request, act: Any, what: str) -> web.StreamResponse:
    try:
        outcome = await act()
    except AgentSearchError as exc:
        if _wants_json(request):
            raise
        raise _redirect("/admin", f"The {what} was refused: {exc.message}") from None
    if not _wants_json(request):
        raise _redirect("/admin", f"Enqueued the {what} as job {outcome['id']}.")
    return _api(outcome, status=202)

