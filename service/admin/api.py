"""The dashboard's JSON API under ``/admin/api``: counts, series, workers, index state and jobs, and
the job actions (retry, abort, warm-up, sweep) and the bulk actions of the Retries and Dead tabs.

Every handler authenticates itself: ``require_admin`` for reads, ``require_admin_action`` (CSRF
for cookie sessions) for actions. An action posted by a plain HTML form gets a redirect back to
its page with a notice instead of JSON; a destructive one (abort, delete) posted by a plain form
first gets a confirmation page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from service.admin.auth import require_admin, require_admin_action
from service.admin.handlers import (
    answer_action,
    json_response,
    needs_confirmation,
    parse_job_query,
    redis_guard,
    state_of,
)
from service.admin.health import worker_health
from service.admin.indexstate import index_state
from service.admin.operations import BULK_LIMIT, BulkOutcome
from service.admin.pages import confirm_page, page_tally
from service.admin.sampler import series
from service.admin.tally import Tab
from service.errors import NotFound, ValidationError
from service.state import ENGINE
from service.validation import Fields, read_json

routes = web.RouteTableDef()


@routes.get("/admin/api/overview")
@redis_guard
async def api_overview(request: web.Request) -> web.Response:
    require_admin(request)
    the_tally = await page_tally(state_of(request))
    return json_response({**the_tally.overview.as_dict(), **the_tally.as_dict()})


@routes.get("/admin/api/series")
@redis_guard
async def api_series(request: web.Request) -> web.Response:
    require_admin(request)
    return json_response(await series(state_of(request)))


@routes.get("/admin/api/workers")
@redis_guard
async def api_workers(request: web.Request) -> web.Response:
    require_admin(request)
    return json_response({"workers": await worker_health(state_of(request).reader), "health_check_interval_s": request.app[ENGINE].settings.worker_health_check_s})


@routes.get("/admin/api/index")
@redis_guard
async def api_index(request: web.Request) -> web.Response:
    require_admin(request)
    return json_response(await index_state(request.app[ENGINE]))


@routes.get("/admin/api/jobs")
@redis_guard
async def api_jobs(request: web.Request) -> web.Response:
    require_admin(request)
    query = parse_job_query(request, strict=True)
    return json_response((await state_of(request).table.list_jobs(query)).as_dict())


# Actions first: their paths end in /retry or /abort, which the detail route's pattern also matches.
@routes.post("/admin/api/jobs/{job_id:.+}/retry")
@redis_guard
async def api_retry(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    job_id = request.match_info["job_id"]
    return await answer_action(
        request,
        lambda: state_of(request).operations.retry(job_id, admin=session.caller.sub),
        back=_job_page(job_id),
        refused="Retry refused",
        then=lambda row: _job_page(row.id),
        done=lambda row: f"Job {job_id} retried as {row.id}.",
        body=lambda row: {"job": row.as_dict(full=True), "retry_of": job_id},
        status=201,
    )


@routes.post("/admin/api/jobs/{job_id:.+}/abort")
@redis_guard
async def api_abort(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    job_id = request.match_info["job_id"]
    if await needs_confirmation(request):
        return confirm_page(
            request, session, question=f"Abort job {job_id}?", action=request.path, fields=[], ids=[job_id], back=_job_page(job_id)
        )
    return await answer_action(
        request,
        lambda: state_of(request).operations.abort(job_id, admin=session.caller.sub),
        back=_job_page(job_id),
        refused="Abort refused",
        done=lambda _: f"Abort of job {job_id} requested.",
        status=202,
    )


def _job_page(job_id: str) -> str:
    return f"/admin/jobs/{quote(job_id, safe='')}"


@routes.get("/admin/api/jobs/{job_id:.+}")
@redis_guard
async def api_job(request: web.Request) -> web.Response:
    require_admin(request)
    job_id = request.match_info["job_id"]
    row = await state_of(request).reader.job(job_id)
    if row is None:
        raise NotFound(f"no job {job_id!r}: it never existed, or it finished over an hour ago and its result expired")
    return json_response(row.as_dict(full=True))


@routes.post("/admin/api/warm")
@redis_guard
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
    return await _enqueue(request, lambda: state_of(request).operations.warm_workspace(workspace_id, admin=session.caller.sub), "warm-up")


@routes.post("/admin/api/sweep")
@redis_guard
async def api_sweep(request: web.Request) -> web.StreamResponse:
    session = await require_admin_action(request)
    return await _enqueue(request, lambda: state_of(request).operations.sweep_now(admin=session.caller.sub), "sweep")


async def _enqueue(request: web.Request, act: Callable[[], Awaitable[dict[str, Any]]], what: str) -> web.Response:
    """A job enqueued from the dashboard (warm-up, sweep): back to the dashboard, or its id as JSON (202)."""
    return await answer_action(
        request, act, back="/admin", refused=f"The {what} was refused", done=lambda outcome: f"Enqueued the {what} as job {outcome['id']}.", status=202
    )


# The bulk actions: (tab, what the button says) -> the operation.
BULK = {
    ("retries", "retry"): "retry_now",
    ("retries", "delete"): "delete_waiting",
    ("dead", "retry"): "retry_dead",
    ("dead", "delete"): "delete_dead",
}


@routes.post("/admin/api/{tab:retries|dead}/{action:retry|delete}")
@redis_guard
async def api_bulk(request: web.Request) -> web.StreamResponse:
    """Retry or delete the jobs of the Retries or Dead tab: ``{"ids": [...]}`` or ``{"all": true}`` as JSON,
    or the form fields ``id`` (repeated) or ``all=1``. At most ``BULK_LIMIT`` jobs a request."""
    session = await require_admin_action(request)
    tab, verb = request.match_info["tab"], request.match_info["action"]
    ids, everything = await _bulk_selection(request)
    state = state_of(request)
    left = 0
    if everything:
        entries = (await page_tally(state)).entries[Tab(tab)]
        ids, left = [e.id for e in entries[:BULK_LIMIT]], max(0, len(entries) - BULK_LIMIT)
    back = f"/admin/{tab}"
    if verb == "delete" and await needs_confirmation(request):
        what = f"all {len(ids) + left} jobs" if everything else f"{len(ids)} job{'' if len(ids) == 1 else 's'}"
        fields = [("all", "1")] if everything else [("id", job_id) for job_id in ids]
        return confirm_page(request, session, question=f"Delete {what} from {tab.capitalize()}? This cannot be undone.", action=request.path, fields=fields, ids=ids, back=back)

    async def act() -> BulkOutcome:
        return await state.operations.bulk(BULK[(tab, verb)], ids, admin=session.caller.sub, left=left)

    return await answer_action(request, act, back=back, refused="Refused", done=lambda outcome: outcome.summary(), body=lambda outcome: outcome.as_dict(), status=200)


async def _bulk_selection(request: web.Request) -> tuple[list[str], bool]:
    """The ids a bulk action names, or True for all of the tab's jobs; 400 for neither or too many."""
    if request.content_type == "application/json":
        fields = Fields(await read_json(request))
        everything = fields.bool("all", default=False)
        ids = list(fields.str_list("ids", max_items=BULK_LIMIT, max_length=500))
        fields.reject_unknown()
    else:
        form = await request.post()
        everything = form.get("all") == "1"
        ids = [str(value) for value in form.getall("id", [])]
    if everything and ids:
        raise ValidationError("send either ids or all, not both")
    if not everything and not ids:
        raise ValidationError("select at least one job (ids, or the id form field), or send all to act on every job of the tab")
    if len(ids) > BULK_LIMIT:
        raise ValidationError(f"at most {BULK_LIMIT} ids at once, got {len(ids)}; send fewer, or all")
    return ids, everything

