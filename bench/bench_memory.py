"""Memory benchmark: the service's resident memory and on-disk index as data arrives, as markdown tables.

A real ``agentsearch serve`` runs as a child process on a temporary data directory; after each
stage its resident memory (``VmRSS``) and peak (``VmHWM``) are read from ``/proc/<pid>/status``
and the data directory is measured on disk. The stages load the public data sets over HTTP:

1. started and ready, nothing loaded (the baseline every later row is compared with);
2. catalog entities (MetaTool tools plus synthetic capabilities, MCP servers and packages; 10,000,
   or 100,000 with ``--full``);
3. action templates from the APIs.guru catalog (10,000 actions, or all 124,730 with ``--full``);
4. the Python standard library registered as a workspace and indexed (walk, chunks, BM25 terms,
   trigram index, chunk cache).

This service runs with embeddings off so the rows show the indexes themselves, not minutes of
embedding; a second service with the default model measures what the model adds when it is idle.
Vectors live in the store's memory-mapped files: 1,536 bytes per record and model (384 float32),
paged in as searches touch them. Each row gives the input's JSON size beside it, so the memory
and disk per input byte read off.

Run: ``python -m bench.bench_memory [--full]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.bench_catalog import build_catalog
from bench.common import machine, versions
from bench.datasets import ACTIONS_CATALOG, dataset
from bench.loadtest import ADMIN, USER, Service, forget_keys, put
from service.actions.loader import read_catalog_file

STDLIB = Path(sysconfig.get_paths()["stdlib"])
QUICK: dict[str, int | None] = {"entities": 10_000, "actions": 10_000}
FULL: dict[str, int | None] = {"entities": 100_000, "actions": None}
BATCH_ENTITIES = 1_000
BATCH_TEMPLATES = 100
MIB = 1024 * 1024


@dataclass(frozen=True)
class Stage:
    name: str
    items: str
    input_bytes: int
    memory: dict[str, int]
    disk: int
    seconds: float


def process_memory(pid: int) -> dict[str, int]:
    """``VmRSS`` (resident), ``RssAnon`` (private: heaps, in-memory indexes), ``RssFile``
    (file pages mapped in: libraries, memory-mapped store files; the kernel can drop them) and
    ``VmHWM`` (peak resident) of ``pid``, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (allocated blocks: sparse files count what they use)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue  # a temporary file the store just replaced
    return total


def json_size(items: Sequence[Any]) -> int:
    return sum(len(orjson.dumps(item)) for item in items)


def action_templates(limit: int | None) -> list[dict[str, Any]]:
    chosen, total = [], 0
    for raw in read_catalog_file(dataset(ACTIONS_CATALOG)):
        chosen.append(raw)
        total += len(raw["actions"])
        if limit is not None and total >= limit:
            break
    return chosen


class Measured:
    """The service under measurement and the stages measured so far."""

    def __init__(self, service: Service | None) -> None:
        self._service = service
        self.stages: list[Stage] = []

    @property
    def service(self) -> Service:
        assert self._service is not None, "no service is running"
        return self._service

    @service.setter
    def service(self, service: Service) -> None:
        self._service = service

    async def settle(self) -> None:
        """Let the allocator and the store's background flush calm down before reading."""
        await asyncio.sleep(2.0)

    async def record(self, name: str, items: str, input_bytes: int, started: float) -> None:
        seconds = time.perf_counter() - started
        await self.settle()
        memory = process_memory(self.service.process.pid)
        self.stages.append(Stage(name, items, input_bytes, memory, disk_usage(self.service.workdir / "data"), seconds))
        print(f"memory: {name}: {memory['VmRSS'] / MIB:.0f} MiB", file=sys.stderr, flush=True)


async def wait_indexed(http: aiohttp.ClientSession, base: str, workspace: str, timeout_s: float = 900) -> dict[str, Any]:
    """Poll the workspace until its chunk count holds still over two reads with files seen."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        async with http.get(f"{base}/v1/workspaces/{workspace}", headers=USER) as response:
            state: dict[str, Any] = await response.json()
        if state.get("files") and state.get("chunks") and state.get("chunks") == last.get("chunks"):
            return state
        last = state
        await asyncio.sleep(2.0)
    raise SystemExit(f"workspace {workspace} was not indexed within {timeout_s:.0f}s: {last}")


async def load_stages(http: aiohttp.ClientSession, measured: Measured, sizes: dict[str, int | None]) -> str:
    """Load the stages; returns the workspace id."""
    base = measured.service.url
    await measured.record("started, nothing loaded", "", 0, time.perf_counter())

    started = time.perf_counter()
    builtins, user = build_catalog(int(sizes["entities"] or 0), random.Random(7))
    for entities, auth in ((builtins, ADMIN), (user, USER)):
        for start in range(0, len(entities), BATCH_ENTITIES):
            await put(http, f"{base}/v1/catalog/entities", {"entities": entities[start : start + BATCH_ENTITIES]}, auth)
    records = len(builtins) + sum(1 + len(e.get("tools", [])) + len(e.get("exports", [])) for e in user)
    await measured.record("+ catalog entities", f"{records:,} records", json_size(builtins) + json_size(user), started)

    started = time.perf_counter()
    templates = action_templates(sizes["actions"])
    for start in range(0, len(templates), BATCH_TEMPLATES):
        await put(http, f"{base}/v1/actions/templates", {"templates": templates[start : start + BATCH_TEMPLATES]}, ADMIN)
    actions = sum(len(t["actions"]) for t in templates)
    await measured.record("+ action templates", f"{len(templates):,} templates, {actions:,} actions", json_size(templates), started)

    started = time.perf_counter()
    # The standard library workspace: the Python standard library without its site-packages.
    body = {"root": str(STDLIB), "search": {"skip_dirs": ["site-packages"]}}
    async with http.post(f"{base}/v1/workspaces", json=body, headers=USER) as response:
        workspace = await response.json()
        if response.status not in (200, 201):
            raise SystemExit(f"workspace registration answered {response.status}: {workspace}")
    state = await wait_indexed(http, base, workspace["id"])
    source = sum(p.stat().st_size for p in STDLIB.rglob("*") if "site-packages" not in p.parts and p.is_file())
    await measured.record("+ stdlib workspace", f"{state['files']:,} files, {state['chunks']:,} chunks", source, started)
    return str(workspace["id"])


async def search_each(http: aiohttp.ClientSession, measured: Measured, workspace: str) -> None:
    """After a restart on the same data: one search of each surface, so each opens its index."""
    base = measured.service.url
    started = time.perf_counter()
    for path, body in (
        ("/v1/catalog/search", {"query": "send an email to a colleague"}),
        ("/v1/actions/search", {"query": "list repositories", "include_catalog": True}),
        (f"/v1/workspaces/{workspace}/search", {"query": "parse a json document", "mode": "lexical"}),
    ):
        async with http.post(f"{base}{path}", json=body, headers=USER) as response:
            if response.status != 200:
                raise SystemExit(f"POST {path} answered {response.status}: {await response.text()}")
    await measured.record("restarted on the same data, one search of each surface", "", 0, started)


async def run_service(workdir: Path, env: dict[str, str], stage: Any, measured: Measured | None = None, prefix: str | None = None) -> Any:
    """Start a service on ``workdir`` (a restart when its data is there), run ``stage``, stop it."""
    prefix = prefix or f"agentsearch-bench-memory-{uuid.uuid4().hex[:8]}"
    (workdir / "workspaces").mkdir(parents=True, exist_ok=True)
    service = Service(workdir, prefix, extra_env={"AGENTSEARCH_ALLOWED_ROOTS": str(STDLIB.parent), **env})
    if measured is None:
        measured = Measured(service)
    measured.service = service
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            await service.wait_ready(http)
            return await stage(http, measured)
    finally:
        service.stop()


def report(indexes: Measured, model: Measured, full: bool) -> str:
    base = indexes.stages[0].memory
    lines = [
        f"## Memory ({'full' if full else 'quick'} mode)",
        "",
        f"_{machine()}; {versions()}_",
        "",
        "Settings: `agentsearch serve` on the embedded default (qdrant-edge), embeddings off, rate limits off; "
        "each stage loads over HTTP, then 2 s settle before reading /proc/<pid>/status and the data directory. "
        "RSS = private (heaps, in-memory indexes: RssAnon) + file pages mapped in (libraries, memory-mapped store "
        "files: RssFile, which the kernel can drop under pressure); the baseline is the first row.",
        "",
        "| stage | what | input MiB | load s | RSS MiB | private MiB | private over the baseline MiB | file-backed MiB | peak RSS MiB | data dir MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stage in indexes.stages:
        m = stage.memory
        lines.append(
            f"| {stage.name} | {stage.items} | {stage.input_bytes / MIB:.1f} | {stage.seconds:.1f} | {m['VmRSS'] / MIB:.0f} | "
            f"{m['RssAnon'] / MIB:.0f} | {(m['RssAnon'] - base['RssAnon']) / MIB:+.0f} | {m['RssFile'] / MIB:.0f} | "
            f"{m['VmHWM'] / MIB:.0f} | {stage.disk / MIB:.1f} |"
        )
    idle = model.stages[0].memory
    lines += [
        "",
        "Input MiB: the JSON sent for catalog entities and action templates; for the workspace, every file of the tree "
        "(binaries and `__pycache__` included, which the walk skips).",
        "",
        "| service, nothing loaded | RSS MiB | private MiB | file-backed MiB |",
        "|---|---:|---:|---:|",
        f"| embeddings off | {base['VmRSS'] / MIB:.0f} | {base['RssAnon'] / MIB:.0f} | {base['RssFile'] / MIB:.0f} |",
        f"| default model (local/all-MiniLM-L6-v2) loaded | {idle['VmRSS'] / MIB:.0f} | {idle['RssAnon'] / MIB:.0f} | {idle['RssFile'] / MIB:.0f} |",
        f"| what the idle model adds | {(idle['VmRSS'] - base['VmRSS']) / MIB:+.0f} | {(idle['RssAnon'] - base['RssAnon']) / MIB:+.0f} | "
        f"{(idle['RssFile'] - base['RssFile']) / MIB:+.0f} |",
    ]
    return "\n".join(lines)


async def run(full: bool) -> int:
    sizes = FULL if full else QUICK
    off = {"AGENTSEARCH_EMBEDDINGS_MODEL": "none"}
    prefix = f"agentsearch-bench-memory-{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory(prefix="agentsearch-memory-") as tmp:
            workdir = Path(tmp) / "indexes"
            indexes = Measured(None)
            workspace = await run_service(workdir, off, lambda http, m: load_stages(http, m, sizes), indexes, prefix)
            await run_service(workdir, off, lambda http, m: search_each(http, m, workspace), indexes, prefix)
        with tempfile.TemporaryDirectory(prefix="agentsearch-memory-") as tmp:
            model = Measured(None)
            await run_service(Path(tmp) / "model", {}, lambda http, m: m.record("started, model loaded", "", 0, time.perf_counter()), model, prefix)
    finally:
        await forget_keys(prefix)
    print(report(indexes, model, full), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_memory", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="100,000 catalog entities and the whole action catalog (124,730 actions)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return asyncio.run(run(args.full))


if __name__ == "__main__":
    raise SystemExit(main())
