"""Code search at monorepo scale: a real ``agentsearch serve`` over a large Python tree, measured against ripgrep on the same tree.

``python -m bench.bench_code --scale [--tree DIR] [--limit-mb N] [--small] [--ten]``

The tree: every ``.py`` file under 1 MB of this interpreter's ``site-packages`` copied into a
temporary directory (or ``--tree DIR`` as it is), skipping what the service's walker skips
(directories named ``.git``, ``node_modules``, ``vendor``) and hidden paths (which ripgrep skips),
so both search the same files. ``--limit-mb`` stops the copy at that many MB; ``--small`` is a
5 MB tree (a test runs it end to end).

The service runs as its own process (embedded store, in-process workers, embeddings off:
``AGENTSEARCH_EMBEDDINGS_MODEL=none``, its own data directory, a free port, the tree's parent as
its allowed root). One workspace is registered over HTTP and the bench waits for ``ready``, timing
the build. Then, in markdown tables:

1. index build seconds and chunks/s; the data directory's blocks in use (``du``) against the
   tree's; the service's private memory (``RssAnon``) and ``VmRSS`` from ``/proc/<pid>/status``
   after indexing, after a restart (before any search) and after one search;
2. 12 queries, the first latency after indexing, then each the median of 3 through the HTTP API
   (default limit 20: the first 20 matching lines in path order for a regex, the 20 best chunks
   for a literal) and the median of 3 of ``rg -l`` on the same tree (``-F`` for a literal): every
   file holding a match, rg's fastest complete answer (it stops reading a file at its first
   match; ``-c`` or ``-n`` would only cost it more). The ratio is service / rg per query (below 1:
   the service is faster), with the median and the worst; then, measured alike and reported
   apart, 7 regexes no trigram narrows (every file in scope is a candidate: Python's ``re``
   alone against ripgrep's engine);
3. a one-line edit (a fresh name appended to a file): the time until a literal search finds it;
4. ``--ten``: ten workspaces of about ``--limit-mb / 10`` MB each (25 MB at full size) registered,
   indexed, the service restarted and one of them searched: memory at each step.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
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

from bench.common import machine, table, versions
from bench.loadtest import USER, Service, forget_keys

MAX_FILE_BYTES = 1_000_000
FULL_MB = 0  # 0: the whole site-packages
SMALL_MB = 5
REPEATS = 3
INDEX_TIMEOUT_S = 1_800.0
EDIT_TIMEOUT_S = 60.0
STALL_S = 20.0
SKIPPED_DIRS = frozenset({".git", "node_modules", "vendor", "__pycache__"})

# (query, regex): literals go through lexical search and ``rg -F``, regexes through regex search and ``rg``.
QUERIES: tuple[tuple[str, bool], ...] = (
    ("import os", False),
    ("def __init__", False),
    (r"\bTODO\b", True),
    (r"raise \w+Error", True),
    (r"class \w+Exception", True),
    ("async def", False),
    ("@property", False),
    ("lambda", False),
    ("yield from", False),
    (r"self\.\w+ = None", True),
    ("except Exception", False),
    (r"[0-9]{4}-[0-9]{2}", True),
)
# Regexes no trigram narrows (no literal of 3 characters is required), so every file in scope is
# a candidate: Python's ``re`` alone against ripgrep's engine, reported apart from the set above.
UNGUIDED_QUERIES: tuple[tuple[str, bool], ...] = (
    (r"[ \t]+$", True),
    (r"[a-z]+[0-9]{3,}[a-z]+", True),
    (r"\d+\.\d+\.\d+\.\d+", True),
    (r"^\s*#\s*\w+:\s*\d+$", True),
    (r"\w+_\w+_\w+_\w+_\w+_\w+", True),
    (r"[A-Z_]{12,}", True),
    (r"0x[0-9a-f]{8}", True),
)


# ---- the tree --------------------------------------------------------------------------------------


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def build_tree(target: Path, limit_mb: int, source: Path | None = None) -> tuple[int, int]:
    """Copy every ``.py`` under 1 MB of ``source`` (site-packages) into ``target``, in path order,
    until ``limit_mb`` MB (0: all of them); returns (files, bytes)."""
    source = source or site_packages()
    budget = limit_mb * 1_000_000 if limit_mb else None
    files = size = 0
    for path in sorted(_python_files(source)):
        length = path.stat().st_size
        if budget is not None and size + length > budget:
            break
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
        files += 1
        size += length
    return files, size


def _python_files(source: Path) -> list[Path]:
    found = []
    for directory, subdirs, names in os.walk(source):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in names:
            if name.endswith(".py") and not name.startswith("."):
                path = Path(directory, name)
                if path.is_file() and not path.is_symlink() and path.stat().st_size < MAX_FILE_BYTES:
                    found.append(path)
    return found


def split_tree(source: Path, targets: Sequence[Path], each_mb: float) -> None:
    """Fill each of ``targets`` with the next ``each_mb`` MB of ``source``'s files (path order)."""
    files = sorted(p for p in source.rglob("*.py") if p.is_file())
    position = 0
    for target in targets:
        size = 0
        while position < len(files) and size < each_mb * 1_000_000:
            path = files[position]
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
            size += path.stat().st_size
            position += 1


def blocks_kib(path: Path) -> int:
    """Blocks in use under ``path`` (``du -sk``)."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


# ---- the service -------------------------------------------------------------------------------------


@dataclass
class Memory:
    rss_anon_mb: float
    rss_mb: float

    def cells(self) -> list[str]:
        return [f"{self.rss_anon_mb:,.0f}", f"{self.rss_mb:,.0f}"]


def memory_of(pid: int) -> Memory:
    """The process's private memory (``RssAnon``) and resident set (``VmRSS``), in MB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("RssAnon", "VmRSS"):
            values[key] = int(rest.split()[0]) / 1024
    return Memory(values.get("RssAnon", float("nan")), values.get("VmRSS", float("nan")))


def start_service(workdir: Path, prefix: str, allowed: Path) -> Service:
    env = {
        "AGENTSEARCH_EMBEDDINGS_MODEL": "none",
        "AGENTSEARCH_ALLOWED_ROOTS": str(allowed),
        "AGENTSEARCH_MAX_WORKSPACES_PER_USER": "100",
        "AGENTSEARCH_WORKSPACE_REGISTRATIONS_PER_MINUTE": "100",
    }
    return Service(workdir, prefix, env)


async def register(http: aiohttp.ClientSession, base: str, root: Path) -> str:
    async with http.post(f"{base}/v1/workspaces", json={"root": str(root)}, headers=USER) as response:
        body = await response.json()
        if response.status not in (200, 201):
            raise SystemExit(f"workspace registration answered {response.status}: {body}")
        return str(body["id"])


async def workspace_state(http: aiohttp.ClientSession, base: str, workspace: str) -> dict[str, Any]:
    async with http.get(f"{base}/v1/workspaces/{workspace}", headers=USER) as response:
        body: dict[str, Any] = await response.json()
        return body


async def wait_indexed(http: aiohttp.ClientSession, service: Service, workspace: str, result: ScaleResult, timeout_s: float = INDEX_TIMEOUT_S) -> dict[str, Any]:
    """The workspace's status once ``ready``. An index that makes no progress for ``STALL_S``
    (its job ended without finishing) is resumed the way a user's search resumes it, by a
    search; each such search is counted in ``result.resumed``."""
    deadline = time.monotonic() + timeout_s
    seen: tuple[Any, ...] = ()
    since = time.monotonic()
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise SystemExit(f"agentsearch serve exited ({service.process.returncode}); see {service.log}")
        state = await workspace_state(http, service.url, workspace)
        if state.get("state") == "ready" and state.get("chunks") and state.get("last_sync"):
            return state
        progress = (state.get("files"), state.get("chunks"), str(state.get("progress")))
        if progress != seen:
            seen, since = progress, time.monotonic()
        elif time.monotonic() - since > STALL_S:
            result.resumed += 1
            with contextlib.suppress(SearchFailed):
                await search(http, service.url, workspace, "import", False)
            since = time.monotonic()
        await asyncio.sleep(0.25)
    raise SystemExit(f"workspace {workspace} not indexed within {timeout_s:.0f}s; see {service.log}")


class SearchFailed(Exception):
    """A search answered something other than 200."""

    def __init__(self, query: str, status: int, answer: dict[str, Any], ms: float) -> None:
        super().__init__(f"search {query!r} answered {status} after {ms:.0f} ms: {answer}")
        self.status = status
        self.ms = ms


async def search(http: aiohttp.ClientSession, base: str, workspace: str, query: str, regex: bool) -> tuple[float, dict[str, Any]]:
    """One search through the HTTP API: (ms, answer); :class:`SearchFailed` unless it answers 200."""
    body = {"query": query, "regex": regex, "mode": "lexical"}
    started = time.perf_counter()
    async with http.post(f"{base}/v1/workspaces/{workspace}/search", json=body, headers=USER) as response:
        answer: dict[str, Any] = await response.json()
        elapsed = (time.perf_counter() - started) * 1e3
        if response.status != 200:
            raise SearchFailed(query, response.status, answer, elapsed)
    return elapsed, answer


async def first_answer(http: aiohttp.ClientSession, base: str, workspace: str, query: str, regex: bool, result: ScaleResult, when: str) -> float:
    """ms until a search first answers 200 (asked again after a failure, each failure noted)."""
    started = time.perf_counter()
    for _ in range(5):
        try:
            await search(http, base, workspace, query, regex)
            break
        except SearchFailed as exc:
            result.notes.append(f"{when}: `{query}` answered {exc.status} after {exc.ms / 1e3:.1f} s, asked again")
    return (time.perf_counter() - started) * 1e3


# ---- ripgrep -----------------------------------------------------------------------------------------


def rg_ms(tree: Path, query: str, regex: bool) -> float | None:
    """One ``rg -l`` over ``tree`` (ms), or None when rg is not installed."""
    rg = shutil.which("rg")
    if rg is None:
        return None
    command = [rg, "-l", "--no-messages", *([] if regex else ["-F"]), "-e", query, str(tree)]
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - started) * 1e3


# ---- the run -------------------------------------------------------------------------------------------


@dataclass
class ScaleResult:
    """What one run measured (the test reads it)."""

    files: int = 0
    tree_kib: int = 0
    chunks: int = 0
    build_s: float = 0.0
    data_kib: int = 0
    memory: dict[str, Memory] = field(default_factory=dict)
    first_query_ms: float = 0.0
    first_query_after_restart_ms: float = 0.0
    queries: list[dict[str, Any]] = field(default_factory=list)
    unguided: list[dict[str, Any]] = field(default_factory=list)  # UNGUIDED_QUERIES, measured alike
    rg_available: bool = False
    edit_found_ms: float | None = None
    ten: dict[str, Memory] = field(default_factory=dict)
    resumed: int = 0  # searches sent to resume an index whose job ended unfinished
    notes: list[str] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [q["ratio"] for q in self.queries if q["ratio"] is not None]


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


async def measure_queries(http: aiohttp.ClientSession, base: str, workspace: str, tree: Path, result: ScaleResult) -> None:
    """``QUERIES`` into ``result.queries``, then ``UNGUIDED_QUERIES`` into ``result.unguided``."""
    await _measure(http, base, workspace, tree, result, QUERIES, result.queries)
    await _measure(http, base, workspace, tree, result, UNGUIDED_QUERIES, result.unguided)


async def _measure(
    http: aiohttp.ClientSession, base: str, workspace: str, tree: Path, result: ScaleResult, queries: Sequence[tuple[str, bool]], into: list[dict[str, Any]]
) -> None:
    for query, regex in queries:
        ours = []
        hits = 0
        failed = 0
        for _ in range(REPEATS):
            try:
                elapsed, answer = await search(http, base, workspace, query, regex)
            except SearchFailed as exc:
                failed += 1
                result.notes.append(f"query `{query}` answered {exc.status} after {exc.ms:.0f} ms (counted at that time)")
                ours.append(exc.ms)
                continue
            ours.append(elapsed)
            hits = len(answer.get("results", []))
        theirs = [t for t in (rg_ms(tree, query, regex) for _ in range(REPEATS)) if t is not None]
        ours_ms = _median(ours)
        rg_median = _median(theirs) if theirs else None
        into.append(
            {
                "query": query,
                "regex": regex,
                "results": hits,
                "ms": ours_ms,
                "rg_ms": rg_median,
                "ratio": ours_ms / rg_median if rg_median else None,
            }
        )


async def edit_found(http: aiohttp.ClientSession, base: str, workspace: str, tree: Path) -> float:
    """Append a line with a fresh name to one file; ms until a literal search finds it."""
    target = sorted(tree.rglob("*.py"))[0]
    original = target.read_bytes()
    name = f"scale_bench_edit_{uuid.uuid4().hex[:12]}"
    target.write_bytes(original + f"\n{name} = 1\n".encode())
    started = time.perf_counter()
    try:
        while (time.perf_counter() - started) < EDIT_TIMEOUT_S:
            try:
                _elapsed, answer = await search(http, base, workspace, name, False)
            except SearchFailed:
                continue
            if any(name in str(line) for line in answer.get("results", [])):
                return (time.perf_counter() - started) * 1e3
            await asyncio.sleep(0.05)
    finally:
        target.write_bytes(original)  # a tree given with --tree is left as it was
    raise SystemExit(f"the edit of {target} was not found within {EDIT_TIMEOUT_S:.0f}s")


async def one_workspace(http: aiohttp.ClientSession, workdir: Path, tree: Path, result: ScaleResult) -> None:
    prefix = f"agentsearch-bench-scale-{uuid.uuid4().hex[:8]}"
    service = start_service(workdir, prefix, tree.parent)
    try:
        await service.wait_ready(http)
        started = time.perf_counter()
        workspace = await register(http, service.url, tree)
        state = await wait_indexed(http, service, workspace, result)
        result.build_s = time.perf_counter() - started
        result.chunks = int(state["chunks"])
        result.files = int(state["files"])
        result.memory["after indexing"] = memory_of(service.process.pid)
        result.first_query_ms = await first_answer(http, service.url, workspace, QUERIES[0][0], QUERIES[0][1], result, "first query after indexing")
        await measure_queries(http, service.url, workspace, tree, result)
        result.memory["after the queries"] = memory_of(service.process.pid)
        result.edit_found_ms = await edit_found(http, service.url, workspace, tree)
        service.stop()
        result.data_kib = blocks_kib(service.data_dir)
        service = start_service(workdir, prefix, tree.parent)
        await service.wait_ready(http)
        await asyncio.sleep(1.0)  # whatever the start schedules settles
        result.memory["after a restart, before any search"] = memory_of(service.process.pid)
        result.first_query_after_restart_ms = await first_answer(http, service.url, workspace, QUERIES[2][0], QUERIES[2][1], result, "first query after a restart")
        result.memory["after a restart and one search"] = memory_of(service.process.pid)
    finally:
        service.stop()
        await forget_keys(prefix)


async def ten_workspaces(http: aiohttp.ClientSession, workdir: Path, source: Path, each_mb: float, result: ScaleResult) -> None:
    roots = [workdir / "ten" / f"ws{i}" for i in range(10)]
    split_tree(source, roots, each_mb)
    prefix = f"agentsearch-bench-scale-{uuid.uuid4().hex[:8]}"
    home = workdir / "ten-service"
    home.mkdir()
    service = start_service(home, prefix, workdir / "ten")
    try:
        await service.wait_ready(http)
        ids = [await register(http, service.url, root) for root in roots]
        for workspace in ids:
            await wait_indexed(http, service, workspace, result)
        result.ten["10 indexed"] = memory_of(service.process.pid)
        service.stop()
        service = start_service(home, prefix, workdir / "ten")
        await service.wait_ready(http)
        await asyncio.sleep(1.0)
        result.ten["after a restart, before any search"] = memory_of(service.process.pid)
        await first_answer(http, service.url, ids[0], QUERIES[2][0], QUERIES[2][1], result, "ten workspaces, first query after a restart")
        result.ten["after a restart, one workspace searched"] = memory_of(service.process.pid)
    finally:
        service.stop()
        await forget_keys(prefix)


def report(result: ScaleResult, tree_mb: float) -> None:
    table(
        f"Lexical index build ({result.files:,} files, {tree_mb:,.0f} MB, embeddings off)",
        ["chunks", "seconds", "chunks/s", "first query after indexing ms", "first query after a restart ms", "one-line edit found ms"],
        [[f"{result.chunks:,}" + (f" (resumed by {result.resumed} searches)" if result.resumed else ""), f"{result.build_s:.1f}", f"{result.chunks / max(result.build_s, 1e-9):,.0f}", f"{result.first_query_ms:.0f}", f"{result.first_query_after_restart_ms:.0f}", f"{result.edit_found_ms:.0f}" if result.edit_found_ms is not None else "-"]],
    )
    table(
        "Disk: blocks in use (du)",
        ["tree MB", "data directory MB", "data / tree"],
        [[f"{result.tree_kib / 1024:,.0f}", f"{result.data_kib / 1024:,.0f}", f"{result.data_kib / max(result.tree_kib, 1):.1f}x"]],
    )
    table("Service memory (/proc/<pid>/status, the service process)", ["when", "RssAnon MB", "VmRSS MB"], [[when, *m.cells()] for when, m in result.memory.items()])
    report_queries(result)
    if result.ten:
        table("Ten workspaces registered, one searched (the service process)", ["when", "RssAnon MB", "VmRSS MB"], [[when, *m.cells()] for when, m in result.ten.items()])


def _query_rows(queries: Sequence[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for q in queries:
        rg_cell = f"{q['rg_ms']:.0f}" if q["rg_ms"] is not None else "rg not installed"
        ratio = f"{q['ratio']:.2f}" if q["ratio"] is not None else "-"
        rows.append([f"`{q['query']}`", "regex" if q["regex"] else "literal", q["results"], f"{q['ms']:.0f}", rg_cell, ratio])
    return rows


def report_queries(result: ScaleResult) -> None:
    ratios = result.ratios()
    against = f"rg -l over the same tree{'' if result.rg_available else ', rg not installed'}"
    columns = ["query", "kind", "results", "service ms", "rg -l ms", "service / rg"]
    table(f"Queries, median of {REPEATS} (service: HTTP, limit 20; {against})", columns, _query_rows(result.queries))
    if result.unguided:
        table(f"Regexes no trigram narrows, median of {REPEATS} (every file in scope a candidate; {against})", columns, _query_rows(result.unguided))
    for note in result.notes:
        print(f"- {note}")
    if result.notes:
        print()
    if ratios:
        worst = max(result.queries, key=lambda q: q["ratio"] or 0.0)
        print(f"_service / rg: median {_median(ratios):.2f}, worst {worst['ratio']:.2f} (`{worst['query']}`); first query {result.first_query_ms:.0f} ms_\n")
    unguided = [q for q in result.unguided if q["ratio"] is not None]
    if unguided:
        slowest = max(unguided, key=lambda q: q["ratio"])
        print(f"_regexes no trigram narrows, service / rg: median {_median([q['ratio'] for q in unguided]):.2f}, worst {slowest['ratio']:.2f} (`{slowest['query']}`)_\n")


async def queries_again(http: aiohttp.ClientSession, workdir: Path, tree: Path, result: ScaleResult) -> None:
    """The queries alone, on the data a kept run (``--keep``) left: the service started on it anew."""
    prefix = f"agentsearch-bench-scale-{uuid.uuid4().hex[:8]}"
    service = start_service(workdir, prefix, tree.parent)
    try:
        await service.wait_ready(http)
        async with http.get(f"{service.url}/v1/workspaces", headers=USER) as response:
            listed = (await response.json())["workspaces"]
        workspace = next((str(w["id"]) for w in listed if w["root"] == str(tree)), None)
        if workspace is None:
            raise SystemExit(f"no workspace of {tree} in {workdir}: run once with --keep {workdir} first")
        result.first_query_after_restart_ms = await first_answer(http, service.url, workspace, QUERIES[2][0], QUERIES[2][1], result, "first query after a restart")
        state = await wait_indexed(http, service, workspace, result)
        result.chunks, result.files = int(state["chunks"]), int(state["files"])
        result.first_query_ms = await first_answer(http, service.url, workspace, QUERIES[0][0], QUERIES[0][1], result, "second query after a restart")
        await measure_queries(http, service.url, workspace, tree, result)
    finally:
        service.stop()
        await forget_keys(prefix)


async def run(tree_arg: Path | None, limit_mb: int, ten: bool, keep: Path | None = None, queries_only: bool = False) -> ScaleResult:
    print(f"## Code search at scale\n\n_{machine()}; {versions()}_\n", flush=True)
    result = ScaleResult(rg_available=shutil.which("rg") is not None)
    home: contextlib.AbstractContextManager[str] = contextlib.nullcontext(str(keep)) if keep else tempfile.TemporaryDirectory(prefix="bench-code-scale-")
    with home as tmp:
        workdir = Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        tree = tree_arg.resolve() if tree_arg is not None else workdir / "trees" / "site-packages"
        if queries_only:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
                await queries_again(http, workdir, tree, result)
            report_queries(result)
            return result
        if keep is not None and (workdir / "data").exists():
            raise SystemExit(f"{workdir} holds a kept run: --queries-only measures it again, or keep another directory")
        if tree_arg is None:
            started = time.perf_counter()
            files, size = build_tree(tree, limit_mb)
            print(f"_tree: {files:,} files, {size / 1e6:,.0f} MB copied in {time.perf_counter() - started:.0f} s_\n", flush=True)
        result.tree_kib = blocks_kib(tree)
        tree_mb = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file()) / 1e6
        timeout = aiohttp.ClientTimeout(total=600)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http:
                await one_workspace(http, workdir, tree, result)
                if ten:
                    await ten_workspaces(http, workdir, tree, tree_mb / 10, result)
        finally:
            report(result, tree_mb)  # what was measured, also when a step failed
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", action="store_true", help="(accepted: this is the scale bench)")
    parser.add_argument("--tree", metavar="DIR", help="search this tree instead of a copy of site-packages")
    parser.add_argument("--limit-mb", type=int, default=FULL_MB, help="copy at most this many MB of site-packages (0: all)")
    parser.add_argument("--small", action="store_true", help=f"a {SMALL_MB} MB tree")
    parser.add_argument("--ten", action="store_true", help="also ten workspaces of a tenth of the tree each, one searched: memory")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (the tree, the data) for --queries-only")
    parser.add_argument("--queries-only", action="store_true", help="with --keep DIR of an earlier run: start the service on its data and measure the queries again")
    args = parser.parse_args(argv)
    if args.queries_only and not args.keep:
        parser.error("--queries-only needs --keep DIR (the directory of an earlier --keep run)")
    limit_mb = SMALL_MB if args.small and not args.limit_mb else args.limit_mb
    asyncio.run(run(Path(args.tree) if args.tree else None, limit_mb, args.ten, Path(args.keep).resolve() if args.keep else None, args.queries_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
