"""`python -m bench.loadtest`: a steady mixed search load on a real `agentsearch serve` over loopback.

Starts the service as its own process (embedded store, in-process workers, the shared Redis under a
queue prefix of its own, rate limits off: the test measures the engine, not the per-plan limiter),
loads real data (the MetaTool tools as capabilities, APIs.guru action templates with instances, a
workspace cut from the Python standard library), waits until everything is embedded, then sends
catalog, code and action searches at a fixed arrival rate (open loop: a request's latency counts
from the moment it was due, so a stalled server cannot hide its queue) while a background task
ingests packages every few seconds. Prints a markdown table: requests, errors, throughput and
p50/p99 latency per kind, with the machine and versions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import os
import random
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis

from bench.common import machine, percentile, versions
from bench.datasets import ACTIONS_CATALOG, COSQA_QUERIES, METATOOL_QUERIES, METATOOL_TOOLS, dataset
from service.actions.loader import read_catalog_file
from service.auth import mint_token
from service.engine.queue import forget_deployment

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = "redis://127.0.0.1:6379/0"
SECRET = "loadtest-secret-" + "0" * 32
# Share of each search kind in the mix; the rest of the arrivals are code searches.
MIX = (("catalog", 0.4), ("actions", 0.3), ("code", 0.3))
STDLIB_PACKAGES = ("json", "http")


@dataclass
class Samples:
    """Latencies (ms, from the due time) and failures of one request kind."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, due: float, status: int | str) -> None:
        self.latencies_ms.append((time.perf_counter() - due) * 1000)
        if status != 200:
            self.errors[str(status)] = self.errors.get(str(status), 0) + 1

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---- the service and its data ------------------------------------------------------------------


class Service:
    """`python -m service serve` as a child process on a free loopback port."""

    def __init__(self, workdir: Path, prefix: str, extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log = workdir / "service.log"
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "AGENTSEARCH_JWT_SECRET": SECRET,
            "AGENTSEARCH_QUEUE_PREFIX": prefix,
            "AGENTSEARCH_RATE_LIMITS_ENABLED": "false",
            "AGENTSEARCH_LOG_LEVEL": "WARNING",
            "AGENTSEARCH_ALLOWED_ROOTS": str(workdir / "workspaces"),
            "AGENTSEARCH_SINGLE_TENANT": "true",  # the load's user registers under the plain base
            **(extra_env or {}),
        }
        command = [sys.executable, "-m", "service", "serve", "--port", str(self.port), "--data-dir", str(workdir / "data")]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    async def wait_ready(self, http: aiohttp.ClientSession, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"agentsearch serve exited ({self.process.returncode}); see {self.log}")
            try:
                async with http.get(f"{self.url}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.3)
        raise SystemExit(f"agentsearch serve not ready within {timeout_s:.0f}s; see {self.log}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def headers(sub: str, **claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, sub=sub, **claims)}"}


USER = headers("loader", org="acme", plan="max")
ADMIN = headers("ops", admin=True)


async def put(http: aiohttp.ClientSession, url: str, body: dict[str, Any], auth: dict[str, str]) -> dict[str, Any]:
    async with http.put(url, json=body, headers=auth) as response:
        answer: dict[str, Any] = await response.json()
        if response.status != 200:
            raise SystemExit(f"PUT {url} answered {response.status}: {answer}")
        return answer


def capabilities() -> list[dict[str, Any]]:
    tools: dict[str, str] = orjson.loads(dataset(METATOOL_TOOLS).read_bytes())
    return [{"type": "capability", "id": name, "domain": "metatool", "title": name, "summary": text.strip() or name} for name, text in tools.items()]


def catalog_queries(rng: random.Random, count: int) -> list[str]:
    with dataset(METATOOL_QUERIES).open(newline="") as handle:
        queries = [row["Query"] for row in csv.DictReader(handle)]
    return rng.sample(queries, count)


def action_templates(max_actions: int) -> list[dict[str, Any]]:
    chosen, total = [], 0
    for raw in read_catalog_file(dataset(ACTIONS_CATALOG)):
        if len(raw["actions"]) <= 12:
            chosen.append(raw)
            total += len(raw["actions"])
            if total >= max_actions:
                break
    return chosen


def code_queries(rng: random.Random, count: int) -> list[str]:
    rows = orjson.loads(dataset(COSQA_QUERIES).read_bytes())
    return [row["query"] for row in rng.sample(rows, count)]


def copy_workspace(target: Path) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for package in STDLIB_PACKAGES:
        shutil.copytree(stdlib / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


async def load_data(http: aiohttp.ClientSession, service: Service, rng: random.Random) -> dict[str, Any]:
    """Everything the searches hit; returns the action queries and the workspace id."""
    base = service.url
    await put(http, f"{base}/v1/catalog/entities", {"entities": capabilities()}, ADMIN)
    templates = action_templates(1_000)
    for start in range(0, len(templates), 100):
        await put(http, f"{base}/v1/actions/templates", {"templates": templates[start : start + 100]}, ADMIN)
    instances = [
        {"name": f"svc_{i}", "template": t["template"], "auth": {"type": "api_key", "secret_name": f"KEY_{i}"}}
        for i, t in enumerate(templates[:: max(1, len(templates) // 60)][:60])
    ]
    await put(http, f"{base}/v1/actions/instances", {"instances": instances}, USER)
    descriptions = [a.get("description") or a["action"] for t in templates for a in t["actions"]]
    root = copy_workspace(service.workdir / "workspaces" / "stdlib")
    async with http.post(f"{base}/v1/workspaces", json={"root": str(root), "search": {"embeddings_model": "local/all-MiniLM-L6-v2", "prewarm_embeddings": True}}, headers=USER) as response:
        workspace = await response.json()
        if response.status not in (200, 201):
            raise SystemExit(f"workspace registration answered {response.status}: {workspace}")
    return {"action_queries": rng.sample(descriptions, min(300, len(descriptions))), "workspace": workspace["id"], "templates": len(templates)}


async def wait_embedded(http: aiohttp.ClientSession, base: str, workspace: str, timeout_s: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        async with http.get(f"{base}/v1/index/status", headers=ADMIN) as response:
            surfaces = (await response.json())["surfaces"]
        async with http.get(f"{base}/v1/workspaces/{workspace}", headers=USER) as response:
            state = await response.json()
        if all(s["pending"] == 0 for s in surfaces.values()) and state.get("chunks") and state.get("embedded") == state["chunks"]:
            return {"surfaces": surfaces, "chunks": state["chunks"]}
        await asyncio.sleep(1.0)
    raise SystemExit(f"embedding did not finish within {timeout_s:.0f}s")


# ---- the load ----------------------------------------------------------------------------------


async def one_search(http: aiohttp.ClientSession, url: str, body: dict[str, Any], due: float, samples: Samples) -> None:
    try:
        async with http.post(url, json=body, headers=USER) as response:
            await response.read()
            samples.add(due, response.status)
    except (aiohttp.ClientError, TimeoutError) as exc:
        samples.add(due, type(exc).__name__)


async def background_ingest(http: aiohttp.ClientSession, base: str, stop: asyncio.Event, every_s: float, samples: Samples) -> None:
    batch = 0
    while not stop.is_set():
        due = time.perf_counter()
        entities = [
            {"type": "package", "id": f"load-{batch}-{i}", "name": f"@load/pkg-{batch}-{i}", "summary": f"Background package {batch}.{i}: export and sync reports."}
            for i in range(5)
        ]
        try:
            async with http.put(f"{base}/v1/catalog/entities", json={"entities": entities}, headers=USER) as response:
                await response.read()
                samples.add(due, response.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            samples.add(due, type(exc).__name__)
        batch += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)


async def drive(http: aiohttp.ClientSession, base: str, data: dict[str, Any], rng: random.Random, rate: float, duration_s: float, ingest_every_s: float) -> dict[str, Samples]:
    samples = {kind: Samples() for kind, _ in MIX} | {"ingest": Samples()}
    queries = {
        "catalog": catalog_queries(rng, 300),
        "actions": data["action_queries"],
        "code": code_queries(rng, 300),
    }
    urls = {"catalog": f"{base}/v1/catalog/search", "actions": f"{base}/v1/actions/search", "code": f"{base}/v1/workspaces/{data['workspace']}/search"}
    stop = asyncio.Event()
    ingest = asyncio.create_task(background_ingest(http, base, stop, ingest_every_s, samples["ingest"]))
    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    total = int(rate * duration_s)
    for n in range(total):
        due = started + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pick, kind = rng.random(), "code"
        for name, share in MIX:
            if pick < share:
                kind = name
                break
            pick -= share
        body: dict[str, Any] = {"query": rng.choice(queries[kind])}
        if kind == "code":
            body["limit"] = 10
        tasks.append(asyncio.create_task(one_search(http, urls[kind], body, due, samples[kind])))
    await asyncio.gather(*tasks)
    stop.set()
    await ingest
    return samples


def report(samples: dict[str, Samples], elapsed_s: float, rate: float, setup: dict[str, Any]) -> str:
    lines = [
        f"### Load: {rate:g} searches/s offered for {elapsed_s:.0f} s, mixed {', '.join(f'{k} {s:.0%}' for k, s in MIX)}, ingest in the background",
        "",
        f"_machine: {machine()}; {versions()}_  ",
        f"_data: {setup['capabilities']} catalog records (the MetaTool tools), {setup['templates']} action templates ({setup['actions']} actions), "
        f"a workspace of {setup['chunks']} chunks (stdlib {', '.join(STDLIB_PACKAGES)}), all embedded before the load; rate limits off_",
        "",
        "| kind | requests | errors | throughput (req/s) | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    every = Samples()
    for kind in [*(k for k, _ in MIX), "ingest"]:
        s = samples[kind]
        if kind != "ingest":
            every.latencies_ms += s.latencies_ms
            for code, count in s.errors.items():
                every.errors[code] = every.errors.get(code, 0) + count
        lines.append(_row(kind, s, elapsed_s))
    lines.insert(len(lines) - 1, _row("**all searches**", every, elapsed_s))
    failures = {code: n for s in samples.values() for code, n in s.errors.items()}
    lines += ["", f"_errors by status: {failures or 'none'}_"]
    return "\n".join(lines)


def _row(kind: str, s: Samples, elapsed_s: float) -> str:
    n = len(s.latencies_ms)
    return (
        f"| {kind} | {n} | {s.error_count} | {n / elapsed_s:.1f} | {percentile(s.latencies_ms, 50):.1f} | "
        f"{percentile(s.latencies_ms, 99):.1f} | {max(s.latencies_ms, default=float('nan')):.1f} |"
    )


async def forget_keys(prefix: str) -> None:
    client = aioredis.from_url(REDIS_URL)
    try:
        await forget_deployment(client, prefix)
    finally:
        await client.aclose()


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    prefix = f"agentsearch-loadtest-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="agentsearch-load-") as tmp:
        workdir = Path(tmp)
        (workdir / "workspaces").mkdir()
        service = Service(workdir, prefix)
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(limit=args.connections)
        try:
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
                await service.wait_ready(http)
                setup_started = time.perf_counter()
                data = await load_data(http, service, rng)
                embedded = await wait_embedded(http, service.url, data["workspace"])
                print(f"_setup: data loaded and embedded in {time.perf_counter() - setup_started:.0f} s_\n", file=sys.stderr, flush=True)
                started = time.perf_counter()
                samples = await drive(http, service.url, data, rng, args.rate, args.duration, args.ingest_every)
                elapsed = time.perf_counter() - started
                setup = {
                    "capabilities": embedded["surfaces"]["catalog"]["records"],
                    "templates": data["templates"],
                    "actions": embedded["surfaces"]["actions"]["records"],
                    "chunks": embedded["chunks"],
                }
                print(report(samples, elapsed, args.rate, setup), flush=True)
                alive = service.process.poll() is None
        finally:
            service.stop()
            await forget_keys(prefix)
    errors = sum(s.error_count for s in samples.values())
    return 0 if alive and errors == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="searches per second, all kinds together (default 20)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--ingest-every", type=float, default=2.0, help="seconds between background ingest batches of 5 packages (default 2)")
    parser.add_argument("--connections", type=int, default=64, help="most open client connections (default 64)")
    parser.add_argument("--seed", type=int, default=7)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
