"""What the dashboard's page and API handlers share: the admin state and the job-table query of a
request, and the answers (JSON, a redirect with a one-shot notice, 503 when Redis is down).

An action posted by a plain HTML form (JavaScript off) answers with a redirect back to the page
and a one-shot notice; the page's script posts the same forms with ``Accept: application/json``
and gets JSON (``answer_action``). A destructive action posted by a plain form is first answered
with a confirmation page (``needs_confirmation``); the script asks with ``confirm()`` instead.
Every dashboard request leaves one access-log line (``access_logged``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from service.admin.auth import ADMIN_SUB
from service.admin.jobrecord import JobStatus
from service.admin.jobtable import MAX_LIMIT, MAX_OFFSET, JobQuery
from service.admin.sampler import ADMIN, AdminState
from service.errors import AgentSearchError, Unavailable, ValidationError
from service.state import ENGINE

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Outcome = TypeVar("Outcome")

NOTICE_COOKIE = "agentsearch_admin_notice"
# The form field a confirmation page adds when it posts a destructive action again.
CONFIRMED_FIELD = "confirmed"
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


# ---- answering ------------------------------------------------------------------------------------


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body, default=str), status=status, content_type="application/json", headers={"Cache-Control": "no-store"})


def state_of(request: web.Request) -> AdminState:
    return request.app[ADMIN]


def wants_json(request: web.Request) -> bool:
    """A plain HTML form post (JavaScript off) gets a redirect; anything else gets JSON."""
    is_form = request.content_type in {"application/x-www-form-urlencoded", "multipart/form-data"}
    return not is_form or "application/json" in request.headers.get("Accept", "")


def redirect(location: str, notice: str | None = None) -> web.HTTPSeeOther:
    response = web.HTTPSeeOther(location=location, headers=SECURITY_HEADERS)
    if notice:
        response.set_cookie(NOTICE_COOKIE, quote(notice[:300]), max_age=60, path="/admin", httponly=True, samesite="Strict")
    return response


async def answer_action(
    request: web.Request,
    act: Callable[[], Awaitable[Outcome]],
    *,
    back: str,
    refused: str,
    done: Callable[[Outcome], str],
    status: int,
    body: Callable[[Outcome], Any] = lambda outcome: outcome,
    then: Callable[[Outcome], str] | None = None,
) -> web.Response:
    """Run a dashboard action and answer it. JSON: ``body`` of the outcome with ``status``, and a
    refusal raised as the API's error. A plain HTML form: a redirect with a one-shot notice, to
    ``back`` with ``"<refused>: <reason>"`` when refused, else to ``then`` of the outcome (``back``
    unless given) with ``done`` of it."""
    try:
        outcome = await act()
    except AgentSearchError as exc:
        if wants_json(request):
            raise
        raise redirect(back, f"{refused}: {exc.message}") from None
    if not wants_json(request):
        raise redirect(back if then is None else then(outcome), done(outcome))
    return json_response(body(outcome), status=status)


async def needs_confirmation(request: web.Request) -> bool:
    """A destructive action posted by a plain HTML form that no confirmation page posted yet."""
    if wants_json(request):
        return False  # the page's script confirmed with confirm(); an API client means it
    return (await request.post()).get(CONFIRMED_FIELD) != "1"


def access_logged(handler: Handler) -> Handler:
    """One INFO line per dashboard request: method, path, status, milliseconds and the admin."""

    @functools.wraps(handler)
    async def logged(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except AgentSearchError as exc:
            status = exc.status
            raise
        finally:
            ms = round((time.perf_counter() - started) * 1000, 1)
            user = request.get(ADMIN_SUB) or "-"
            log.info(
                "admin %s %s %s %sms user=%s", request.method, request.path, status, ms, user,
                extra={"method": request.method, "path": request.path, "status": status, "ms": ms, "user": user},
            )  # fmt: skip

    return logged


def redis_guard(handler: Handler) -> Handler:
    """A dashboard handler whose Redis is down answers 503 with a clear message, not a 500."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (RedisError, OSError) as exc:
            raise Unavailable(f"Redis is unreachable ({exc}); the dashboard reads the queues from it") from None

    return guarded


# ---- parsing ------------------------------------------------------------------------------------------


def bounded_int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
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
    state = state_of(request)
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
        offset=bounded_int(params, "offset", 0, 0, MAX_OFFSET),
        limit=bounded_int(params, "limit", 50, 1, MAX_LIMIT),
    )
