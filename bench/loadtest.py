"""`python -m bench.loadtest`: search load on a real `agentsearch serve` over loopback, at a fixed rate or as a capacity search.

Starts the service as its own process (embedded store, in-process workers, the shared Redis under a
queue prefix of its own, rate limits off: the test measures the engine, not the per-plan limiter),
loads real data (the MetaTool tools as capabilities, APIs.guru action templates with instances, a
workspace cut from the Python standard library), waits until everything is embedded, then sends
catalog, code and action searches at a fixed arrival rate (open loop: a request's latency counts
from the moment it was due, so a stalled server cannot hide its queue).

Two modes:

    fixed rate (default)  ``--rate`` searches/s for ``--duration`` s of the mix, packages ingested in
                          the background every ``--ingest-every`` s; a markdown table of requests,
                          errors, throughput and p50/p99 per kind. Texts come from 300-query pools
                          (the query-embedding cache answers many) unless ``--uncached``.
    ``--capacity``        for the mix and each surface alone (``--surfaces``), the highest offered
                          rate whose ``--hold`` s run has no error and p99 <= ``--p99-ms``: rates
                          probed geometrically from ``--start-rate`` until one fails, then bisected
                          to ``--resolution``; every step printed, then a table of capacities. The
                          texts are uncached by default (``bench.loadtexts``: no text sent twice in
                          the run, checked at the end), and the same search is then run engine-only
                          (``bench.loadtest_engine``: in-process on the loaded data, no HTTP, no
                          rendering) for the service / engine-only ratio.

``--service-tree PATH`` (repeatable) runs the service from another checkout (a ``git worktree`` of an
earlier commit), each tree on its own data, so two versions are measured the same way in one run;
the engine-only target always runs from this tree.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import math
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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import orjson
import redis.asyncio as aioredis

from bench.common import machine, percentile, versions
from bench.datasets import ACTIONS_CATALOG, COSQA_QUERIES, METATOOL_QUERIES, METATOOL_TOOLS, dataset
from bench.loadtexts import SentTexts, UniqueTexts, real_pools
from service.actions.loader import read_catalog_file
from service.auth import mint_token
from service.engine.queue import forget_deployment

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = "redis://127.0.0.1:6379/0"
SECRET = "loadtest-secret-" + "0" * 32
# Share of each search kind in the mix; the rest of the arrivals are code searches.
MIX = (("catalog", 0.4), ("actions", 0.3), ("code", 0.3))
SURFACES = ("mix", "catalog", "actions", "code")
STDLIB_PACKAGES = ("json", "http")
USER_CLAIMS: dict[str, Any] = {"sub": "loader", "org": "acme", "plan": "max"}
ENGINE_ONLY = "engine-only"
WARM_UP_SEARCHES = 10


@dataclass(frozen=True)
class DataSize:
    """How much of each data set a run loads."""

    capabilities: int | None  # None: every MetaTool tool
    actions: int
    instances: int
    packages: tuple[str, ...]


FULL = DataSize(capabilities=None, actions=1_000, instances=60, packages=STDLIB_PACKAGES)
SMALL = DataSize(capabilities=40, actions=60, instances=10, packages=("json",))


@dataclass
class Samples:
    """Latencies (ms, from the due time) and failures of one request kind."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, due: float, status: int | str) -> float:
        latency = (time.perf_counter() - due) * 1000
        self.latencies_ms.append(latency)
        if status != 200:
            self.errors[str(status)] = self.errors.get(str(status), 0) + 1
        return latency

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---- the service and its data ------------------------------------------------------------------


def service_env(workdir: Path, prefix: str, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the service runs with (the engine-only target opens its data with the same)."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "AGENTSEARCH_JWT_SECRET": SECRET,
        "AGENTSEARCH_QUEUE_PREFIX": prefix,
        "AGENTSEARCH_RATE_LIMITS_ENABLED": "false",
        "AGENTSEARCH_LOG_LEVEL": "WARNING",
        "AGENTSEARCH_ALLOWED_ROOTS": str(workdir / "workspaces"),
        "AGENTSEARCH_SINGLE_TENANT": "true",  # the load's user registers under the plain base
        "AGENTSEARCH_STARTER_DATA": "false",  # measured data only
        **(extra_env or {}),
    }


class Service:
    """`python -m service serve` of ``tree`` (this checkout by default) as a child process on a free loopback port."""

    def __init__(self, workdir: Path, prefix: str, extra_env: dict[str, str] | None = None, *, tree: Path = ROOT) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.tree = tree
        self.prefix = prefix
        self.log = workdir / "service.log"
        self.data_dir = workdir / "data"
        self.env = service_env(workdir, prefix, extra_env)
        env = self.env if tree == ROOT else {**self.env, "PYTHONPATH": str(tree)}  # its packages before this tree's install
        command = [sys.executable, "-m", "service", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
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


USER = headers(USER_CLAIMS["sub"], org=USER_CLAIMS["org"], plan=USER_CLAIMS["plan"])
ADMIN = headers("ops", admin=True)


async def put(http: aiohttp.ClientSession, url: str, body: dict[str, Any], auth: dict[str, str]) -> dict[str, Any]:
    async with http.put(url, json=body, headers=auth) as response:
        answer: dict[str, Any] = await response.json()
        if response.status != 200:
            raise SystemExit(f"PUT {url} answered {response.status}: {answer}")
        return answer


def capabilities(most: int | None = None) -> list[dict[str, Any]]:
    tools: dict[str, str] = orjson.loads(dataset(METATOOL_TOOLS).read_bytes())
    chosen = list(tools.items())[:most]
    return [{"type": "capability", "id": name, "domain": "metatool", "title": name, "summary": text.strip() or name} for name, text in chosen]


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


def copy_workspace(target: Path, packages: Sequence[str] = STDLIB_PACKAGES) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for package in packages:
        shutil.copytree(stdlib / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


async def load_data(http: aiohttp.ClientSession, service: Service, rng: random.Random, size: DataSize = FULL) -> dict[str, Any]:
    """Everything the searches hit; returns the action queries and the workspace id."""
    base = service.url
    await put(http, f"{base}/v1/catalog/entities", {"entities": capabilities(size.capabilities)}, ADMIN)
    templates = action_templates(size.actions)
    for start in range(0, len(templates), 100):
        await put(http, f"{base}/v1/actions/templates", {"templates": templates[start : start + 100]}, ADMIN)
    instances = [
        {"name": f"svc_{i}", "template": t["template"], "auth": {"type": "api_key", "secret_name": f"KEY_{i}"}}
        for i, t in enumerate(templates[:: max(1, len(templates) // size.instances)][: size.instances])
    ]
    await put(http, f"{base}/v1/actions/instances", {"instances": instances}, USER)
    descriptions = [a.get("description") or a["action"] for t in templates for a in t["actions"]]
    root = copy_workspace(service.workdir / "workspaces" / "stdlib", size.packages)
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


async def start_loaded(http: aiohttp.ClientSession, workdir: Path, tree: Path, rng: random.Random, size: DataSize) -> tuple[Service, dict[str, Any]]:
    """A service of ``tree`` on ``workdir``, its data loaded and embedded; the data's description."""
    (workdir / "workspaces").mkdir(parents=True)
    service = Service(workdir, f"agentsearch-loadtest-{uuid.uuid4().hex[:8]}", tree=tree)
    started = time.perf_counter()
    try:
        await service.wait_ready(http)
        print(f"_setup ({tree}): service ready in {time.perf_counter() - started:.0f} s_", file=sys.stderr, flush=True)
        started = time.perf_counter()
        data = await load_data(http, service, rng, size)
        embedded = await wait_embedded(http, service.url, data["workspace"])
    except BaseException:
        service.stop()
        await forget_keys(service.prefix)
        raise
    print(f"_setup ({tree}): data loaded and embedded in {time.perf_counter() - started:.0f} s_", file=sys.stderr, flush=True)
    data["setup"] = {
        "capabilities": embedded["surfaces"]["catalog"]["records"],
        "templates": data["templates"],
        "actions": embedded["surfaces"]["actions"]["records"],
        "chunks": embedded["chunks"],
        "packages": list(size.packages),
    }
    return service, data


# ---- texts and targets -------------------------------------------------------------------------


class TextSource(Protocol):
    def next(self, kind: str) -> str: ...


@dataclass
class PooledTexts:
    """Texts drawn with repeats from a small pool per kind (the query-embedding cache answers many)."""

    pools: dict[str, list[str]]
    rng: random.Random

    def next(self, kind: str) -> str:
        return self.rng.choice(self.pools[kind])


Send = Callable[[str, str], Awaitable[int | str]]
"""``(kind, text)`` -> the search's status: 200, another HTTP status, or the failure's name."""


@dataclass
class HttpTarget:
    """Searches sent to a running service over loopback."""

    http: aiohttp.ClientSession
    base: str
    workspace: str

    async def send(self, kind: str, text: str) -> int | str:
        urls = {"catalog": f"{self.base}/v1/catalog/search", "actions": f"{self.base}/v1/actions/search", "code": f"{self.base}/v1/workspaces/{self.workspace}/search"}
        body: dict[str, Any] = {"query": text}
        if kind == "code":
            body["limit"] = 10
        try:
            async with self.http.post(urls[kind], json=body, headers=USER) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return type(exc).__name__


def pick_kind(rng: random.Random, surface: str) -> str:
    """``surface`` itself, or for the mix a kind drawn by its share."""
    if surface != "mix":
        return surface
    pick = rng.random()
    for name, share in MIX:
        if pick < share:
            return name
        pick -= share
    return "code"


# ---- the fixed-rate load -----------------------------------------------------------------------


async def one_search(send: Send, kind: str, text: str, due: float, samples: Samples) -> None:
    samples.add(due, await send(kind, text))


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


async def drive(http: aiohttp.ClientSession, base: str, data: dict[str, Any], texts: TextSource, sent: SentTexts, rng: random.Random, args: argparse.Namespace) -> dict[str, Samples]:
    samples = {kind: Samples() for kind, _ in MIX} | {"ingest": Samples()}
    target = HttpTarget(http, base, data["workspace"])
    stop = asyncio.Event()
    ingest = asyncio.create_task(background_ingest(http, base, stop, args.ingest_every, samples["ingest"])) if args.ingest_every > 0 else None
    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    for n in range(int(args.rate * args.duration)):
        due = started + n / args.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        kind = pick_kind(rng, "mix")
        text = texts.next(kind)
        sent.add(text)
        tasks.append(asyncio.create_task(one_search(target.send, kind, text, due, samples[kind])))
    await asyncio.gather(*tasks)
    stop.set()
    if ingest is not None:
        await ingest
    return samples


def report(samples: dict[str, Samples], elapsed_s: float, args: argparse.Namespace, setup: dict[str, Any]) -> str:
    ingest = f"{5 / args.ingest_every:g} packages/s ingested in the background" if args.ingest_every > 0 else "no ingest"
    lines = [
        f"### Load: {args.rate:g} searches/s offered for {elapsed_s:.0f} s, mixed {', '.join(f'{k} {s:.0%}' for k, s in MIX)}, {ingest}",
        "",
        f"_machine: {machine()}; {versions()}_  ",
        data_line(setup) + "  ",
        f"_texts: {'uncached (every text new in the run)' if args.uncached else '300-query pools per kind (the query-embedding cache answers repeats)'}_",
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


def data_line(setup: dict[str, Any]) -> str:
    return (
        f"_data: {setup['capabilities']} catalog records (the MetaTool tools), {setup['templates']} action templates ({setup['actions']} actions), "
        f"a workspace of {setup['chunks']} chunks (stdlib {', '.join(setup['packages'])}), all embedded before the load; rate limits off_"
    )


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


def text_source(args: argparse.Namespace, rng: random.Random, data: dict[str, Any]) -> TextSource:
    if args.uncached:
        return UniqueTexts(real_pools(), rng)
    return PooledTexts({"catalog": catalog_queries(rng, 300), "actions": data["action_queries"], "code": code_queries(rng, 300)}, rng)


async def run_fixed(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    sent = SentTexts()
    with tempfile.TemporaryDirectory(prefix="agentsearch-load-") as tmp:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=args.connections)) as http:
            service, data = await start_loaded(http, Path(tmp), args.service_tree[0], rng, args.size)
            try:
                texts = text_source(args, rng, data)
                started = time.perf_counter()
                samples = await drive(http, service.url, data, texts, sent, rng, args)
                elapsed = time.perf_counter() - started
                print(report(samples, elapsed, args, data["setup"]), flush=True)
                alive = service.process.poll() is None
            finally:
                service.stop()
                await forget_keys(service.prefix)
    errors = sum(s.error_count for s in samples.values())
    if args.uncached:
        print(texts_line(sent), flush=True)
    return 0 if alive and errors == 0 and not (args.uncached and sent.repeated()) else 1


def texts_line(sent: SentTexts) -> str:
    repeated = sent.repeated()
    return f"_texts: {sent.total} sent, {len(sent.counts)} distinct, {len(repeated)} sent more than once{' (' + ', '.join(list(repeated)[:3]) + ')' if repeated else ''}_"


# ---- the capacity search -----------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    """What a rate must do to hold: every search answered 200 and p99 within ``p99_ms`` over ``hold_s``."""

    p99_ms: float
    hold_s: float
    settle_s: float


@dataclass
class Step:
    """One offered rate held (or not) for the hold."""

    target: str
    surface: str
    rate: float
    planned: int
    samples: Samples
    held: bool
    stopped_early: bool

    def as_dict(self) -> dict[str, Any]:
        s = self.samples
        return {
            "rate": self.rate,
            "planned": self.planned,
            "sent": len(s.latencies_ms),
            "p50_ms": round(percentile(s.latencies_ms, 50), 1),
            "p99_ms": round(percentile(s.latencies_ms, 99), 1),
            "errors": s.errors,
            "held": self.held,
            "stopped_early": self.stopped_early,
        }


STEP_HEADER = "| target | surface | offered (req/s) | sent | p50 ms | p99 ms | errors | held |\n|---|---|---|---|---|---|---|---|"


def step_row(step: Step) -> str:
    d = step.as_dict()
    held = "yes" if step.held else ("no, stopped early" if step.stopped_early else "no")
    return f"| {step.target} | {step.surface} | {step.rate:g} | {d['sent']} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} | {step.samples.error_count} | {held} |"


async def hold_rate(send: Send, target: str, surface: str, rate: float, texts: TextSource, sent: SentTexts, rng: random.Random, criterion: Criterion) -> Step:
    """Offer ``rate`` searches/s of ``surface`` for the hold, open loop. Once an error came back, or
    so many searches took over the p99 bound that the hold's p99 is over it whatever the rest take,
    the rate cannot hold: no more are sent."""
    planned = max(1, round(rate * criterion.hold_s))
    late_limit = planned - math.floor(0.99 * (planned - 1))  # this many over the bound: the p99 sample is too
    samples = Samples()
    late = 0

    async def one(kind: str, text: str, due: float) -> None:
        nonlocal late
        status = await send(kind, text)
        if samples.add(due, status) > criterion.p99_ms or status != 200:
            late += 1

    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    stopped = False
    for n in range(planned):
        if samples.error_count or late >= late_limit:
            stopped = True
            break
        due = started + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        kind = pick_kind(rng, surface)
        text = texts.next(kind)
        sent.add(text)
        tasks.append(asyncio.create_task(one(kind, text, due)))
    await asyncio.gather(*tasks)
    held = not stopped and samples.error_count == 0 and percentile(samples.latencies_ms, 99) <= criterion.p99_ms
    return Step(target, surface, rate, planned, samples, held, stopped)


@dataclass(frozen=True)
class Search:
    """How rates are probed: ``start``, doubled while they hold, then bisected until the bracket is
    at most ``resolution`` of the held rate or ``resolution_abs`` req/s wide."""

    start: float
    resolution: float
    resolution_abs: float
    max_rate: float


async def find_capacity(probe: Callable[[float], Awaitable[Step]], search: Search) -> list[Step]:
    """Every step probed; the capacity is the highest held rate among them (none: not even the lowest)."""
    steps: list[Step] = []
    held, failed, rate = 0.0, None, search.start
    while failed is None and rate <= search.max_rate:
        steps.append(await probe(rate))
        if steps[-1].held:
            held, rate = rate, rate * 2
        else:
            failed = rate
    while failed is not None and failed - held > max(held * search.resolution, search.resolution_abs):
        rate = round((held + failed) / 2, 1)
        if rate in (held, failed):
            break
        steps.append(await probe(rate))
        if steps[-1].held:
            held = rate
        else:
            failed = rate
    return steps


def best(steps: Sequence[Step]) -> Step | None:
    return max((s for s in steps if s.held), key=lambda s: s.rate, default=None)


async def search_surfaces(send: Send, target: str, args: argparse.Namespace, texts: TextSource, sent: SentTexts, rng: random.Random) -> dict[str, list[Step]]:
    """The capacity search of ``target`` for each surface in turn, every step printed as it ends."""
    criterion = Criterion(args.p99_ms, args.hold, args.settle)
    search = Search(args.start_rate, args.resolution, args.resolution_abs, args.max_rate)
    await warm_up(send, texts, sent, kinds_of(args.surfaces))
    found: dict[str, list[Step]] = {}
    for surface in args.surfaces:

        async def probe(rate: float, surface: str = surface) -> Step:
            await asyncio.sleep(criterion.settle_s)
            step = await hold_rate(send, target, surface, rate, texts, sent, rng, criterion)
            print(step_row(step), flush=True)
            return step

        found[surface] = await find_capacity(probe, search)
    return found


def kinds_of(surfaces: Sequence[str]) -> list[str]:
    return [kind for kind, _ in MIX if kind in surfaces or "mix" in surfaces]


async def warm_up(send: Send, texts: TextSource, sent: SentTexts, kinds: Sequence[str], per_kind: int = WARM_UP_SEARCHES) -> None:
    """A few searches of each kind, one at a time and not measured: a target's first searches open
    what it opens lazily. Their texts count as sent."""
    for kind in kinds:
        for _ in range(per_kind):
            text = texts.next(kind)
            sent.add(text)
            await send(kind, text)


def capacity_table(results: dict[str, dict[str, list[Step]]], surfaces: Sequence[str]) -> str:
    """Surface, target, capacity and p50/p99 at it, and each service's capacity over the engine-only one."""
    lines = ["| surface | target | capacity (req/s) | p50 ms | p99 ms | service / engine-only |", "|---|---|---|---|---|---|"]
    for surface in surfaces:
        engine = best(results.get(ENGINE_ONLY, {}).get(surface, []))
        for target, found in results.items():
            top = best(found.get(surface, []))
            if top is None:
                lowest = min((s.rate for s in found.get(surface, [])), default=float("nan"))
                lines.append(f"| {surface} | {target} | under {lowest:g} | - | - | - |")
                continue
            d = top.as_dict()
            ratio = f"{top.rate / engine.rate:.2f}" if engine is not None and target != ENGINE_ONLY else "-"
            lines.append(f"| {surface} | {target} | {top.rate:g} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} | {ratio} |")
    return "\n".join(lines)


def tree_label(tree: Path) -> str:
    if tree == ROOT:
        return "service"
    found = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return f"service@{found.stdout.strip() or tree.name}"


async def run_capacity(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    texts = UniqueTexts(real_pools(), rng) if args.uncached else None
    sent = SentTexts()
    results: dict[str, dict[str, list[Step]]] = {}
    setup: dict[str, Any] = {}
    alive = True
    print(f"_machine: {machine()}; {versions()}_  \n_criterion: p99 <= {args.p99_ms:g} ms and no error over a {args.hold:g} s hold_\n", flush=True)
    print(STEP_HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="agentsearch-capacity-") as tmp:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=args.connections)) as http:
            engine_data: tuple[Service, dict[str, Any]] | None = None
            for n, tree in enumerate(args.service_tree):
                service, data = await start_loaded(http, Path(tmp) / f"service-{n}", tree, rng, args.size)
                setup = data["setup"]
                source = texts or text_source(args, rng, data)
                stop = asyncio.Event()
                ingest = asyncio.create_task(background_ingest(http, service.url, stop, args.ingest_every, Samples())) if args.ingest_every > 0 else None
                try:
                    results[tree_label(tree)] = await search_surfaces(HttpTarget(http, service.url, data["workspace"]).send, tree_label(tree), args, source, sent, rng)
                    alive = alive and service.process.poll() is None
                finally:
                    stop.set()
                    if ingest is not None:
                        await ingest
                    service.stop()
                    await forget_keys(service.prefix)
                if tree == ROOT:
                    engine_data = (service, data)
            if args.engine and engine_data is None:
                engine_data = await start_loaded(http, Path(tmp) / "engine", ROOT, rng, args.size)
                engine_data[0].stop()
        if args.engine and engine_data is not None:
            results[ENGINE_ONLY] = await engine_only(engine_data, args, texts, sent, rng)
    print("\n" + data_line(setup) + "\n", flush=True)
    print(capacity_table(results, args.surfaces), flush=True)
    print("\n" + texts_line(sent), flush=True)
    if args.json:
        write_json(args.json, results, sent, texts, setup, args)
    return 0 if alive and not (args.uncached and sent.repeated()) else 1


async def engine_only(loaded: tuple[Service, dict[str, Any]], args: argparse.Namespace, texts: UniqueTexts | None, sent: SentTexts, rng: random.Random) -> dict[str, list[Step]]:
    """The capacity search of the engine opened in this process on the (stopped) service's data."""
    from bench.loadtest_engine import EngineTarget

    service, data = loaded
    started = time.perf_counter()
    target = await EngineTarget.open(service.env, service.data_dir, USER_CLAIMS, data["workspace"])
    print(f"_setup (engine-only): engine opened on the service's data in {time.perf_counter() - started:.0f} s_", file=sys.stderr, flush=True)
    try:
        return await search_surfaces(target.send, ENGINE_ONLY, args, texts or text_source(args, rng, data), sent, rng)
    finally:
        await target.close()
        await forget_keys(service.prefix)


def write_json(path: Path, results: dict[str, dict[str, list[Step]]], sent: SentTexts, texts: UniqueTexts | None, setup: dict[str, Any], args: argparse.Namespace) -> None:
    doc = {
        "criterion": {"p99_ms": args.p99_ms, "hold_s": args.hold, "errors": 0},
        "texts": {"uncached": args.uncached, "sent": sent.total, "distinct": len(sent.counts), "repeated": len(sent.repeated()), "joined": dict(texts.joined) if texts else {}},
        "data": setup,
        "targets": {
            target: {surface: {"capacity": top.rate if (top := best(steps)) else None, "steps": [s.as_dict() for s in steps]} for surface, steps in found.items()}
            for target, found in results.items()
        },
    }
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


# ---- the command line --------------------------------------------------------------------------


def surfaces_arg(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SURFACES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"surfaces are a comma-separated list of {', '.join(SURFACES)}; got {text!r}")
    return chosen


def tree_arg(text: str) -> Path:
    tree = Path(text).expanduser().resolve()
    if not (tree / "service" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a checkout of this service (no service/__main__.py there)")
    return tree


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="fixed rate: searches per second, all kinds together (default 20)")
    parser.add_argument("--duration", type=float, default=60.0, help="fixed rate: seconds of load (default 60)")
    parser.add_argument("--ingest-every", type=float, help="seconds between background ingest batches of 5 packages; 0: none (default 2 at a fixed rate, 0 in a capacity search)")
    parser.add_argument("--uncached", action=argparse.BooleanOptionalAction, help="every text new in the run (default: on in a capacity search, off at a fixed rate)")
    parser.add_argument("--capacity", action="store_true", help="search for the highest rate that holds, per surface, then engine-only")
    parser.add_argument("--surfaces", type=surfaces_arg, default=list(SURFACES), help="capacity: comma-separated, of mix,catalog,actions,code (default all four)")
    parser.add_argument("--hold", type=float, default=60.0, help="capacity: seconds each rate is held (default 60)")
    parser.add_argument("--p99-ms", type=float, default=150.0, help="capacity: the p99 bound a rate must hold, ms (default 150)")
    parser.add_argument("--start-rate", type=float, default=5.0, help="capacity: the first rate probed, req/s (default 5)")
    parser.add_argument("--resolution", type=float, default=0.1, help="capacity: bisect until the bracket is this share of the held rate (default 0.1) ...")
    parser.add_argument("--resolution-abs", type=float, default=2.0, help="capacity: ... or this many req/s wide (default 2)")
    parser.add_argument("--max-rate", type=float, default=2000.0, help="capacity: stop doubling past this rate (default 2000)")
    parser.add_argument("--settle", type=float, default=3.0, help="capacity: seconds of quiet before each step (default 3)")
    parser.add_argument("--engine", action=argparse.BooleanOptionalAction, default=True, help="capacity: also search the engine-only rate (default on)")
    parser.add_argument("--service-tree", type=tree_arg, action="append", help="run the service from this checkout (repeat to compare; default this one)")
    parser.add_argument("--small", action="store_true", help="load a small data set (a quick check, not a figure)")
    parser.add_argument("--json", type=Path, help="capacity: also write the report as JSON here")
    parser.add_argument("--connections", type=int, default=64, help="most open client connections (default 64)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    args.service_tree = args.service_tree or [ROOT]
    if args.uncached is None:
        args.uncached = args.capacity
    if args.ingest_every is None:
        args.ingest_every = 0.0 if args.capacity else 2.0
    args.size = SMALL if args.small else FULL
    if args.capacity and args.hold <= 0:
        parser.error("--hold must be positive")
    if not args.capacity and len(args.service_tree) > 1:
        parser.error("several --service-tree need --capacity (a fixed-rate run measures one service)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return asyncio.run(run_capacity(args) if args.capacity else run_fixed(args))


if __name__ == "__main__":
    sys.exit(main())
