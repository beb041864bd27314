"""A checkout's service as its own process for the relevance benchmark: started, loaded with the dev
sets' items over HTTP, waited on until every item is embedded, searched, and stopped.

``python -m service serve`` runs from the checkout given (working directory and ``PYTHONPATH`` that
tree, this interpreter), so the benchmark can serve another checkout beside its own: a baseline.
The process gets its own environment (no ``AGENTSEARCH_*`` of the caller's): the benchmark's JWT
secret, the in-process worker, rate limits off, a 120 s request deadline, workspace revalidation
every hour (steady-state queries), new workspaces embedded in full (``prewarm_embeddings``), and a
Redis queue prefix derived from its data directory, whose keys are deleted when it stops.

A baseline checkout may predate the ``ranking`` request field: ``WithoutRankingField`` sends its
served searches without it (the served ranking is the default there too).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from bench.relevance_sets import tool_capability
from service.actions.loader import http_batches
from service.auth import mint_token
from service.engine.queue import forget_deployment
from service.evaluation import QueryFailed, Target, ranked_ids, search_body

SECRET = "bench-secret-for-agentsearch-relevance-0123456789"
READY_TIMEOUT_S = 240.0
EMBED_TIMEOUT_S = 3_600.0
PROGRESS_EVERY_S = 30.0
BATCH = 500


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServiceUnderTest:
    """``python -m service serve`` from ``tree`` on a free loopback port, over ``data_dir``."""

    def __init__(self, tree: Path, data_dir: Path, *, allow_root: Path, label: str) -> None:
        self.tree = tree.resolve()
        self.data_dir = data_dir
        self.allow_root = allow_root
        self.label = label
        self.port = free_port()
        self.queue_prefix = "bench-relevance-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:10]
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.admin_token = mint_token(SECRET, sub="bench-admin", admin=True)
        self.user_token = mint_token(SECRET, sub="bench-user", plan="max")
        self.workspace: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _environment(self) -> dict[str, str]:
        kept = {name: value for name, value in os.environ.items() if not name.startswith("AGENTSEARCH_")}
        return {
            **kept,
            "PYTHONPATH": str(self.tree),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "AGENTSEARCH_JWT_SECRET": SECRET,
            "AGENTSEARCH_LOG_LEVEL": "WARNING",
            "AGENTSEARCH_QUEUE_PREFIX": self.queue_prefix,
            "AGENTSEARCH_WORKER_IN_PROCESS": "true",
            "AGENTSEARCH_RATE_LIMITS_ENABLED": "false",
            "AGENTSEARCH_REQUEST_DEADLINE_S": "120",
            "AGENTSEARCH_JOB_TIMEOUT_S": "600",
            "AGENTSEARCH_REVALIDATE_INTERVAL_S": "3600",
            "AGENTSEARCH_PREWARM_EMBEDDINGS": "true",
            "AGENTSEARCH_STARTER_DATA": "false",  # measured data only
        }

    async def __aenter__(self) -> ServiceUnderTest:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "service", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir), "--allow-root", str(self.allow_root)]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, cwd=self.tree, env=self._environment(), stdout=log, stderr=subprocess.STDOUT)
        self._http = aiohttp.ClientSession(base_url=self.url, timeout=aiohttp.ClientTimeout(total=900))
        try:
            await self._ready()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)
            self._process = None
        await _forget(self.queue_prefix)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def _ready(self) -> None:
        assert self._http is not None and self._process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.label}: agentsearch serve exited with {self._process.returncode}:\n{self.log_tail()}")
            try:
                async with self._http.get("/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: agentsearch serve not ready within {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")
            await asyncio.sleep(0.5)

    # ---- loading ---------------------------------------------------------------------------------

    def _headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def _send(self, method: str, path: str, body: bytes, token: str) -> Any:
        assert self._http is not None
        async with self._http.request(method, path, data=body, headers=self._headers(token)) as response:
            text = await response.text()
            if response.status >= 300:
                raise RuntimeError(f"{self.label}: {method} {path} answered {response.status}: {text[:500]}")
            return orjson.loads(text)

    async def load_tools(self, tools: dict[str, str]) -> None:
        """The MetaTool tools as built-in capabilities (an admin's ``PUT /v1/catalog/entities``)."""
        entities = [tool_capability(name, description) for name, description in tools.items()]
        for start in range(0, len(entities), BATCH):
            await self._send("PUT", "/v1/catalog/entities", orjson.dumps({"entities": entities[start : start + BATCH]}), self.admin_token)

    async def load_templates(self, templates: list[dict[str, Any]]) -> None:
        """Action templates of the global catalog (an admin's ``PUT /v1/actions/templates``)."""
        for body in http_batches(templates):
            await self._send("PUT", "/v1/actions/templates", body, self.admin_token)

    async def register_workspace(self, root: Path) -> str:
        """The code tree as the user's workspace (embedded in full: the service prewarms new workspaces)."""
        state = await self._send("POST", "/v1/workspaces", orjson.dumps({"root": str(root)}), self.user_token)
        self.workspace = str(state["id"])
        return self.workspace

    async def wait_embedded(self, surfaces: tuple[str, ...]) -> float:
        """Wait until nothing of ``surfaces`` (catalog, actions) nor the workspace is left to embed; seconds waited."""
        assert self._http is not None
        started = last_said = time.monotonic()
        while True:
            left: dict[str, int] = {}
            async with self._http.get("/v1/index/status", headers=self._headers(self.admin_token)) as response:
                counts = (await response.json())["surfaces"]
            for surface in surfaces:
                left[surface] = int(counts[surface]["pending"])
            if self.workspace is not None:
                async with self._http.get(f"/v1/workspaces/{self.workspace}", headers=self._headers(self.user_token)) as response:
                    state = await response.json()
                chunks, embedded = int(state["chunks"]), int(state["embedded"])
                done = state["state"] == "ready" and 0 < chunks <= embedded
                left["code"] = 0 if done else max(1, chunks - embedded)
            if not any(left.values()):
                return time.monotonic() - started
            now = time.monotonic()
            if now - started > EMBED_TIMEOUT_S:
                raise RuntimeError(f"{self.label}: still embedding after {EMBED_TIMEOUT_S:.0f} s: {left}\n{self.log_tail()}")
            if now - last_said > PROGRESS_EVERY_S:
                print(f"[{self.label}] embedding, left: {left} ({now - started:.0f} s)", file=sys.stderr, flush=True)
                last_said = now
            await asyncio.sleep(2.0)


async def _forget(prefix: str) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(os.environ.get("AGENTSEARCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
    try:
        await forget_deployment(client, prefix)
    finally:
        await client.aclose()


# ---- targets ---------------------------------------------------------------------------------------


class Timed:
    """A target whose every search is timed: milliseconds per call, in call order."""

    def __init__(self, inner: Target) -> None:
        self.inner = inner
        self.ms: list[float] = []

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]:
        started = time.perf_counter()
        try:
            return await self.inner.ranked(surface, query, mode, limit)
        finally:
            self.ms.append((time.perf_counter() - started) * 1000)


class WithoutRankingField:
    """A service that may not know the ``ranking`` request field: searches sent without it (served only)."""

    def __init__(self, service: ServiceUnderTest) -> None:
        self.service = service
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> WithoutRankingField:
        self._http = aiohttp.ClientSession(
            base_url=self.service.url,
            headers={"Authorization": f"Bearer {self.service.user_token}"},
            timeout=aiohttp.ClientTimeout(total=120),
        )
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]:
        assert self._http is not None and mode == "served", "a baseline is asked for its served ranking only"
        body = search_body(surface, query, mode, limit)
        body.pop("ranking", None)
        path = {"catalog": "/v1/catalog/search", "actions": "/v1/actions/search"}.get(surface) or f"/v1/workspaces/{self.service.workspace}/search"
        async with self._http.post(path, json=body) as response:
            status, raw = response.status, await response.read()
        if not 200 <= status < 300:
            raise QueryFailed(f"{status} {raw[:300].decode(errors='replace')}")
        return ranked_ids(surface, orjson.loads(raw))[:limit]
