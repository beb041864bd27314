"""HTTP answers: a JSON response, and the response to one search of any surface."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from service.engine.analytics import recorded_search
from service.middleware import caller_of, record_timing
from service.state import ENGINE
from service.validation import read_json


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json", headers=headers)


async def search_response(request: web.Request, surface: str, *, target: str | None = None) -> web.Response:
    """Run the request body as a search of ``surface`` (``run_search``: parse, rate limit, deadline)
    and answer it, its phases in ``Server-Timing``; the search is recorded for the analytics page."""
    answer = await recorded_search(request.app[ENGINE], surface, caller_of(request), await read_json(request), target=target)
    for phase, duration_ms in answer.timings_ms.items():
        record_timing(request, phase, duration_ms)
    return json_response(answer.body, status=answer.status, headers=answer.headers or None)
