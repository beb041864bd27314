"""`python -m bench.bench_overhead`: where one search's time goes, engine call vs the service around it.

One process: the app on a real loopback test server (in-process worker, rate limits off), loaded
with the load test's data (the MetaTool tools as capabilities, APIs.guru action templates with
instances, a workspace cut from the standard library), everything embedded first. Then, one request
at a time and each with a query text of its own (so no query vector comes from the cache), for each
surface (catalog ranked search, action search, workspace code search):

- **engine**: the query embedded, then the store's dense and BM25 top-50 under the surface's base
  filter, straight against the store (no parsing, ranking or rendering);
- **direct**: ``run_search`` in this process (parsing, rate limit, the surface's whole search and
  its rendering), no HTTP;
- **http**: the same search as a POST through aiohttp to the server (middleware, JSON both ways).

Prints a markdown table per surface: median and p90 ms of each, the service's overhead over the
engine, and the store calls one search makes (counted on the store object while it runs).
``--cached-vectors`` then searches every text once and measures again: a second table whose figures
leave the query embedding out (the service's own overhead, without the model's noise).
``--profile-seconds N`` then keeps sending HTTP searches for N seconds, so that ``py-spy record
--pid PID`` can sample them (the pid is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp.test_utils import TestServer

from bench.common import machine, percentile, versions
from bench.loadtest import action_templates, capabilities, catalog_queries, code_queries, copy_workspace, wait_embedded
from service.app import create_app
from service.auth import Caller, mint_token, verify_token_for
from service.engine.analyzer import query_terms, spoken
from service.engine.intents import task_terms
from service.engine.queue import forget_deployment
from service.engine.records import tenant_filter
from service.engine.runtime import Engine
from service.engine.store import Filter, Match
from service.engine.surface import run_search
from service.settings import Settings
from service.state import ENGINE

REDIS_URL = "redis://127.0.0.1:6379/0"
SECRET = "bench-overhead-secret-" + "0" * 32
SURFACES = ("catalog", "actions", "code")
ENGINE_PREFETCH = 50
# Store methods a search may call; each call is one round trip to the store.
READS = ("retrieve", "scroll", "count", "search_dense", "search_text", "search_hybrid", "search_batch")


@dataclass
class Series:
    """Milliseconds of one way of searching one surface, and the store calls each search made."""

    ms: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)


class StoreCalls:
    """Counts the store's read calls while installed on the engine's store object."""

    def __init__(self, store: Any) -> None:
        self.count = 0
        for name in READS:
            method = getattr(store, name, None)
            if method is not None:
                setattr(store, name, self._counted(method))

    def _counted(self, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await method(*args, **kwargs)

        return counted


def bench_settings(workdir: Path, prefix: str) -> Settings:
    return Settings(
        data_dir=workdir / "data",
        redis_url=REDIS_URL,
        queue_prefix=prefix,
        jwt_secret=SECRET,
        allowed_roots=(workdir / "workspaces",),
        single_tenant=True,
        rate_limits_enabled=False,
        log_level="WARNING",
    )


def auth(sub: str, **claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, sub=sub, **claims)}"}


USER = auth("loader", org="acme", plan="max")
ADMIN = auth("ops", admin=True)


async def put(http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    async with http.put(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise SystemExit(f"PUT {url} answered {response.status}: {await response.text()}")


async def load(http: aiohttp.ClientSession, base: str, workdir: Path, rng: random.Random, max_actions: int) -> dict[str, Any]:
    """The load test's data, written through the API; returns the action queries and the workspace id."""
    await put(http, f"{base}/v1/catalog/entities", {"entities": capabilities()}, ADMIN)
    templates = action_templates(max_actions)
    for start in range(0, len(templates), 100):
        await put(http, f"{base}/v1/actions/templates", {"templates": templates[start : start + 100]}, ADMIN)
    instances = [
        {"name": f"svc_{i}", "template": t["template"], "auth": {"type": "api_key", "secret_name": f"KEY_{i}"}}
        for i, t in enumerate(templates[:: max(1, len(templates) // 60)][:60])
    ]
    await put(http, f"{base}/v1/actions/instances", {"instances": instances}, USER)
    descriptions = sorted({a.get("description") or a["action"] for t in templates for a in t["actions"]})
    root = copy_workspace(workdir / "workspaces" / "stdlib")
    body = {"root": str(root), "search": {"embeddings_model": "local/all-MiniLM-L6-v2", "prewarm_embeddings": True}}
    async with http.post(f"{base}/v1/workspaces", json=body, headers=USER) as response:
        workspace = await response.json()
        if response.status not in (200, 201):
            raise SystemExit(f"workspace registration answered {response.status}: {workspace}")
    return {"actions": rng.sample(descriptions, len(descriptions)), "workspace": workspace["id"]}


def queries(rng: random.Random, data: dict[str, Any], count: int) -> dict[str, list[str]]:
    """``count`` distinct texts per surface, none shared with another surface's or repeated."""
    pools = {"catalog": catalog_queries(rng, count * 2), "actions": data["actions"], "code": code_queries(rng, min(500, count * 2))}
    seen: set[str] = set()
    out: dict[str, list[str]] = {}
    for surface, pool in pools.items():
        distinct = [q for q in dict.fromkeys(pool) if q not in seen]
        if len(distinct) < count:
            raise SystemExit(f"only {len(distinct)} distinct {surface} queries; lower --queries")
        out[surface] = distinct[:count]
        seen.update(out[surface])
    return out


class Bench:
    """The three ways of searching one surface, against one running app."""

    def __init__(self, engine: Engine, caller: Caller, http: aiohttp.ClientSession, base: str, workspace: str, code_filter: Filter) -> None:
        self.engine = engine
        self.caller = caller
        self.http = http
        self.base = base
        self.workspace = workspace
        self.code_filter = code_filter
        self.calls = StoreCalls(engine.store)

    def body(self, surface: str, query: str) -> dict[str, Any]:
        return {"query": query, "limit": 10} if surface == "code" else {"query": query}

    async def engine_only(self, surface: str, query: str) -> None:
        embedder = self.engine.embedders.default
        assert embedder is not None
        text, terms = (spoken(query), task_terms(query)) if surface == "catalog" else (query, None)
        vector = (await embedder.embed_queries([text]))[0]
        flt = {
            "catalog": tenant_filter(self.caller.tenants).and_(Match("scope", "ranked")),
            "actions": Filter(must=(Match("tenant", "global"),)),
            "code": self.code_filter,
        }[surface]
        records = self.engine.records(surface)
        await records.search_dense(embedder.vector_name, vector, flt, limit=ENGINE_PREFETCH)
        if terms is None:
            terms = query_terms(query)
        if terms:
            await records.search_text(terms, flt, limit=ENGINE_PREFETCH)

    async def direct(self, surface: str, query: str) -> None:
        target = self.workspace if surface == "code" else None
        answer = await run_search(self.engine, surface, self.caller, self.body(surface, query), target=target)
        if answer.status != 200:
            raise SystemExit(f"{surface} search answered {answer.status}: {answer.body}")

    async def over_http(self, surface: str, query: str) -> None:
        path = {"catalog": "/v1/catalog/search", "actions": "/v1/actions/search", "code": f"/v1/workspaces/{self.workspace}/search"}[surface]
        async with self.http.post(f"{self.base}{path}", json=self.body(surface, query), headers=USER) as response:
            await response.read()
            if response.status != 200:
                raise SystemExit(f"{surface} search answered {response.status}")

    async def timed(self, way: Callable[[str, str], Awaitable[None]], surface: str, query: str, series: Series) -> None:
        before = self.calls.count
        started = time.perf_counter()
        await way(surface, query)
        series.ms.append((time.perf_counter() - started) * 1000)
        series.calls.append(self.calls.count - before)


async def measure(bench: Bench, texts: dict[str, list[str]], warmup: int) -> dict[str, dict[str, Series]]:
    """Each surface's queries split in three, the three ways interleaved query by query."""
    results: dict[str, dict[str, Series]] = {}
    ways = {"engine": bench.engine_only, "direct": bench.direct, "http": bench.over_http}
    for surface in SURFACES:
        results[surface] = {name: Series() for name in ways}
        pool = texts[surface]
        third = len(pool) // 3
        for i in range(third):
            for n, (name, way) in enumerate(ways.items()):
                series = results[surface][name] if i >= warmup else Series()
                await bench.timed(way, surface, pool[n * third + i], series)
    return results


async def search_each_once(bench: Bench, texts: dict[str, list[str]]) -> None:
    """Search every text once, so the measured searches find their query vectors in the cache."""
    for surface, pool in texts.items():
        for query in pool:
            await bench.direct(surface, query)


def report(results: dict[str, dict[str, Series]], counts: dict[str, int], *, cached: bool) -> str:
    vectors = "query vectors from the cache (each text searched once before)" if cached else "uncached query texts"
    lines = [
        f"### Per-search time: the engine call alone vs the whole search, one request at a time, {vectors}",
        "",
        f"_machine: {machine()}; {versions()}_  ",
        f"_data: {counts['catalog']} catalog records, {counts['actions']} actions, {counts['code']} code chunks, all embedded_",
        "",
        "| surface | searches | engine p50 ms | direct p50 ms | http p50 ms | overhead p50 ms (http - engine) | http p90 ms | store calls per search (engine / search) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for surface, ways in results.items():
        engine, direct, http = ways["engine"], ways["direct"], ways["http"]
        calls = f"{_calls(engine)} / {_calls(direct)}"
        lines.append(
            f"| {surface} | {len(http.ms)} | {percentile(engine.ms, 50):.1f} | {percentile(direct.ms, 50):.1f} | "
            f"{percentile(http.ms, 50):.1f} | {percentile(http.ms, 50) - percentile(engine.ms, 50):.1f} | {percentile(http.ms, 90):.1f} | {calls} |"
        )
    lines += ["", "_direct: `run_search` in process, no HTTP; http: through aiohttp to the same process's server_"]
    return "\n".join(lines)


def _calls(series: Series) -> str:
    low, high = min(series.calls, default=0), max(series.calls, default=0)
    median = percentile(series.calls, 50)
    return f"{median:g}" if low == high else f"{median:g} ({low}-{high})"


async def profile(bench: Bench, texts: Sequence[tuple[str, str]], seconds: float, *, fresh: bool) -> None:
    """HTTP searches of ``texts`` in turn for ``seconds`` (``fresh``: each text made new, so embedded again)."""
    print(f"_profiling: HTTP searches for {seconds:g} s; pid {os.getpid()}_", file=sys.stderr, flush=True)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        surface, query = texts[n % len(texts)]
        await bench.over_http(surface, f"{query} {n}" if fresh else query)
        n += 1


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    prefix = f"agentsearch-overhead-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="agentsearch-overhead-") as tmp:
        workdir = Path(tmp)
        (workdir / "workspaces").mkdir()
        settings = bench_settings(workdir, prefix)
        server = TestServer(create_app(settings), host="127.0.0.1")
        await server.start_server()
        try:
            base = str(server.make_url("")).rstrip("/")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
                started = time.perf_counter()
                data = await load(http, base, workdir, rng, args.max_actions)
                await wait_embedded(http, base, data["workspace"])
                print(f"_setup: loaded and embedded in {time.perf_counter() - started:.0f} s_", file=sys.stderr, flush=True)
                engine: Engine = server.app[ENGINE]
                caller = verify_token_for(settings, SECRET, USER["Authorization"].split()[1])
                code_filter = await workspace_filter(engine, data["workspace"])
                counts = {s: await engine.records(s).count() for s in SURFACES}
                bench = Bench(engine, caller, http, base, data["workspace"], code_filter)
                texts = queries(rng, data, args.queries * 3)
                print(report(await measure(bench, texts, args.warmup), counts, cached=False), flush=True)
                if args.cached_vectors:
                    await search_each_once(bench, texts)
                    print("\n" + report(await measure(bench, texts, args.warmup), counts, cached=True), flush=True)
                if args.profile_seconds:
                    mixed = [(s, q) for s in SURFACES for q in texts[s][:50]]
                    await profile(bench, mixed, args.profile_seconds, fresh=not args.cached_vectors)
        finally:
            await server.close()
            client = aioredis.from_url(REDIS_URL)
            try:
                await forget_deployment(client, prefix)
            finally:
                await client.aclose()
    return 0


async def workspace_filter(engine: Engine, workspace: str) -> Filter:
    """The code surface's filter of ``workspace``: its tenant (read off one of its chunks) and id."""
    page, _ = await engine.records("code").scroll(Filter(must=(Match("workspace", workspace),)), limit=1)
    return Filter(must=(Match("tenant", str(page[0].payload["tenant"])), Match("workspace", workspace)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=60, help="searches per surface and way (default 60)")
    parser.add_argument("--warmup", type=int, default=5, help="first searches per surface left out of the figures (default 5)")
    parser.add_argument("--max-actions", type=int, default=1_000, help="action templates loaded, by their actions (default 1000, as the load test)")
    parser.add_argument("--cached-vectors", action="store_true", help="then measure again with every query vector cached (a second table)")
    parser.add_argument("--profile-seconds", type=float, default=0.0, help="then send HTTP searches this long, for py-spy (default 0: no)")
    parser.add_argument("--seed", type=int, default=7)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
