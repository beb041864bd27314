"""Operational routes: liveness, readiness (Redis, store, model), Prometheus metrics and the API contract."""

from __future__ import annotations

import logging
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.engine.store import StoreError
from service.redact import mask_text
from service.state import ENGINE

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

REQUESTS = Counter("agentsearch_requests_total", "HTTP requests", ["route", "method", "status"])
LATENCY = Histogram("agentsearch_request_seconds", "HTTP request latency", ["route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20))

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Ready when Redis answers and the store counts; reports the model's state too.

    Public, so each check says only which dependency is down and a short fixed cause (``down:
    unreachable``): never exception text, URLs or paths. The details go to the log (masked).
    """
    engine = request.app[ENGINE]
    checks: dict[str, Any] = {"redis": await _redis_check(engine), "store": await _store_check(engine)}
    default = engine.embedders.default
    checks["model"] = default.state if default is not None else "disabled"
    checks["model_runtime"] = default.runtime if default is not None else "disabled"
    ready = checks["redis"] == "ok" and checks["store"].startswith("ok") and checks["model"] in {"ready", "disabled"}
    return web.Response(
        body=orjson.dumps({"status": "ready" if ready else "not-ready", "checks": checks}),
        status=200 if ready else 503,
        content_type="application/json",
    )


async def _redis_check(engine: Engine) -> str:
    try:
        await engine.redis.ping()
    except AuthenticationError as exc:
        return _down("redis", "refused our credentials", exc)
    except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
        return _down("redis", "unreachable", exc)
    except Exception as exc:  # any failure means not ready; the log has the detail
        return _down("redis", "error", exc)
    _LAST_CAUSE.pop("redis", None)
    return "ok"


async def _store_check(engine: Engine) -> str:
    try:
        for index in engine.surfaces.values():
            await engine.store.count(index.collection)
    except StoreError as exc:
        return _down("store", "unavailable", exc)
    except Exception as exc:  # a closed store raises whatever its engine raises
        return _down("store", "not open", exc)
    _LAST_CAUSE.pop("store", None)
    return f"ok ({engine.store.backend})"


# The cause each dependency was last reported down for: the log says so once per change, not per probe.
_LAST_CAUSE: dict[str, str] = {}


def _down(dependency: str, cause: str, exc: BaseException) -> str:
    if _LAST_CAUSE.get(dependency) != cause:
        _LAST_CAUSE[dependency] = cause
        log.warning("readiness: %s is down (%s)", dependency, cause, extra={"dependency": dependency, "error": mask_text(f"{type(exc).__name__}: {exc}")})
    return f"down: {cause}"


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


def load_contract() -> dict[str, Any]:
    text = resources.files("service").joinpath("openapi.yaml").read_text()
    contract: dict[str, Any] = yaml.safe_load(text)
    return contract


@routes.get("/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(load_contract()), content_type="application/json")


@routes.get("/openapi.yaml")
async def openapi_yaml(request: web.Request) -> web.Response:
    return web.Response(text=resources.files("service").joinpath("openapi.yaml").read_text(), content_type="application/yaml")


@web.middleware
async def metrics_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    finally:
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        REQUESTS.labels(route, request.method, str(status)).inc()
        LATENCY.labels(route).observe(time.perf_counter() - started)
