"""The HTTP skeleton: probes, contract, JSON errors, auth, deadline, Server-Timing, request ids, body limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.settings import Settings
from tests.callers import ADMIN, TEST_SECRET, auth, forged, token_of
from tests.helpers import running_app


async def test_healthz_and_readyz(client: TestClient[Any, Any]) -> None:
    response = await client.get("/healthz")
    assert response.status == 200 and (await response.json()) == {"status": "ok"}
    response = await client.get("/readyz")
    body = await response.json()
    assert body["checks"]["redis"] == "ok"
    assert body["checks"]["store"].startswith("ok (qdrant-edge)")
    assert body["checks"]["model"] in {"unloaded", "loading", "ready"}


async def test_readyz_turns_ready_once_the_model_loaded(client: TestClient[Any, Any]) -> None:
    deadline = time.monotonic() + 120
    while True:
        response = await client.get("/readyz")
        if response.status == 200:
            break
        assert time.monotonic() < deadline, await response.text()
        await asyncio.sleep(0.5)
    assert (await response.json())["status"] == "ready"


async def test_openapi_json_serves_the_contract(client: TestClient[Any, Any]) -> None:
    response = await client.get("/openapi.json")
    contract = await response.json()
    assert contract["openapi"].startswith("3.")
    assert "/v1/index/status" in contract["paths"]


async def test_metrics_in_prometheus_format(client: TestClient[Any, Any]) -> None:
    await client.get("/healthz")
    response = await client.get("/metrics")
    assert response.status == 200
    assert "agentsearch_requests_total" in await response.text()


async def test_missing_token_is_401_with_json_error(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/index/status")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    body = await response.json()
    assert body["error"]["code"] == "unauthorized" and "Authorization" in body["error"]["message"]


async def test_forged_expired_and_unsigned_tokens_are_401(client: TestClient[Any, Any]) -> None:
    wrong_key = token_of(forged("mallory"))
    expired = jwt.encode({"sub": "a", "exp": int(time.time()) - 10}, TEST_SECRET, algorithm="HS256")
    unsigned = jwt.encode({"sub": "a"}, None, algorithm="none")
    for token, reason in [(wrong_key, "bad signature"), (expired, "expired"), (unsigned, "HS256"), ("garbage", "malformed token")]:
        response = await client.get("/v1/index/status", headers={"Authorization": f"Bearer {token}"})
        assert response.status == 401, token
        assert reason in (await response.json())["error"]["message"]
    response = await client.get("/v1/index/status", headers={"Authorization": "Basic abc"})
    assert response.status == 401


async def test_bad_claims_are_401(client: TestClient[Any, Any]) -> None:
    token = jwt.encode({"sub": "a", "plan": "platinum", "exp": int(time.time()) + 60}, TEST_SECRET, algorithm="HS256")
    response = await client.get("/v1/index/status", headers={"Authorization": f"Bearer {token}"})
    assert response.status == 401
    assert "plan" in (await response.json())["error"]["message"]


async def test_index_status_for_a_caller(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/index/status", headers=auth("alice"))
    assert response.status == 200
    body = await response.json()
    assert body["scope"] == "caller" and body["store"] == "qdrant-edge"
    admin = await (await client.get("/v1/index/status", headers=ADMIN)).json()
    assert admin["scope"] == "all-tenants"


async def test_unknown_route_is_json_404(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/nothing-here", headers=auth())
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"
    response = await client.get("/nowhere")
    assert response.status == 404 and "error" in await response.json()


async def test_request_id_and_server_timing_headers(client: TestClient[Any, Any]) -> None:
    response = await client.get("/healthz", headers={"X-Request-Id": "abc123"})
    assert response.headers["X-Request-Id"] == "abc123"
    assert "total;dur=" in response.headers["Server-Timing"]
    generated = await client.get("/healthz")
    assert len(generated.headers["X-Request-Id"]) >= 8


async def test_deadline_answers_504_with_a_clear_body(settings: Settings) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    async with running_app(settings, request_deadline_s=0.3, worker_in_process=False, setup=lambda app: app.router.add_get("/v1/slow", slow)) as test_client:
        started = time.monotonic()
        response = await test_client.get("/v1/slow", headers=auth())
        assert response.status == 504
        assert time.monotonic() - started < 3
        body = await response.json()
        assert body["error"]["code"] == "deadline_exceeded" and "0.3s" in body["error"]["message"]


async def test_an_answer_that_comes_back_past_the_deadline_is_still_504(settings: Settings) -> None:
    """The handler consumes its own cancellation and answers late: the kind of bug in a dependency
    that would otherwise let a request run past the deadline and answer as if in time."""

    async def stubborn(request: web.Request) -> web.Response:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            await asyncio.sleep(0.1)
        return web.json_response({"late": True})

    status, body = await _get_from(settings, stubborn, deadline_s=0.3)
    assert status == 504 and body["error"]["code"] == "deadline_exceeded" and "0.3s" in body["error"]["message"]


async def test_a_dependencys_own_timeout_is_503_not_the_deadline(settings: Settings) -> None:
    async def times_out(request: web.Request) -> web.Response:
        raise TimeoutError("upstream read timed out")

    status, body = await _get_from(settings, times_out, deadline_s=5.0)
    assert status == 503 and body["error"]["code"] == "unavailable" and "did not answer in time" in body["error"]["message"]


async def _get_from(settings: Settings, handler: Callable[[web.Request], Awaitable[web.Response]], *, deadline_s: float) -> tuple[int, Any]:
    """The status and JSON body of a GET of ``handler``, mounted at /v1/probe of an app with ``deadline_s``."""
    async with running_app(settings, request_deadline_s=deadline_s, worker_in_process=False, setup=lambda app: app.router.add_get("/v1/probe", handler)) as test_client:
        response = await test_client.get("/v1/probe", headers=auth())
        return response.status, await response.json()


async def test_oversized_body_is_413_json(settings: Settings) -> None:
    async def echo(request: web.Request) -> web.Response:
        from service.validation import read_json

        return web.json_response(await read_json(request))

    async with running_app(settings, client_max_size=1024, worker_in_process=False, setup=lambda app: app.router.add_post("/v1/echo", echo)) as test_client:
        response = await test_client.post("/v1/echo", data=b"[" + b"1," * 2000 + b"1]", headers=auth())
        assert response.status == 413
        assert (await response.json())["error"]["code"] == "payload_too_large"
        response = await test_client.post("/v1/echo", data=b"{not json", headers=auth())
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "invalid_json"
