"""``agentsearch index PATH`` and ``agentsearch search PATH QUERY``: one-shot workspace commands.

They open the engine embedded on a data directory (``./data`` or ``--data-dir``), without a
server, as the local user ``local`` (the machine's owner: no allowed-base check). ``index`` shows
a progress bar on a terminal (tqdm, on stderr); ``search`` prints ``path:line:snippet`` lines,
colored on a terminal and plain when piped, or the whole answer with ``--json``. Exit status as
grep: 0 with results, 1 without, 2 on an error.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from tqdm import tqdm

    from service.code.workspace import SearchConfig, Workspace
    from service.engine.runtime import Engine
    from service.settings import Settings

CLI_TENANT = "user:local"


def add_cli(subparsers: Any) -> None:
    index = subparsers.add_parser("index", help="index a workspace directory (progress bar on a terminal)")
    index.add_argument("path", help="the workspace root")
    index.add_argument("--data-dir", help="the data directory (default ./data)")
    index.add_argument("--skip-dir", action="append", default=[], metavar="NAME", help="an extra directory name to skip (repeatable)")
    index.add_argument("--embeddings-model", metavar="PROVIDER/MODEL", help="the workspace's model (default: the service's)")
    index.add_argument("--embeddings-dimensions", type=int, metavar="N")
    index.add_argument("--index-dir", metavar="DIR", help="where the chunk cache lives (default: under the data directory)")
    index.add_argument("--embed", action="store_true", help="also embed every chunk now (prewarm), so hybrid covers any scope")
    index.add_argument("--json", action="store_true", help="print the workspace state as JSON")
    index.set_defaults(func=cmd_index)

    search = subparsers.add_parser("search", help="search a workspace directory (indexes it first when needed)")
    search.add_argument("path", help="the workspace root")
    search.add_argument("query")
    search.add_argument("--data-dir", help="the data directory (default ./data)")
    search.add_argument("--scope", metavar="SUBPATH", help="a file or directory inside the workspace ('.' for all)")
    search.add_argument("--glob", help="a basename glob (*.go) or a relative one (internal/*.go); no **")
    search.add_argument("--mode", choices=["hybrid", "lexical"], default="hybrid")
    search.add_argument("--regex", action="store_true", help="the query is a regular expression (Python re syntax)")
    search.add_argument("--ignore-case", action="store_true", help="case-insensitive regex")
    search.add_argument("--limit", type=int, default=20)
    search.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    search.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    search.set_defaults(func=cmd_search)


def cmd_index(args: argparse.Namespace) -> int:
    return _run(_index(args))


def cmd_search(args: argparse.Namespace) -> int:
    return _run(_search(args))


def _run(coroutine: Any) -> int:
    from service.errors import AgentSearchError
    from service.logs import configure_logging

    configure_logging("WARNING")
    try:
        result: int = asyncio.run(coroutine)
        return result
    except AgentSearchError as exc:
        print(f"agentsearch: {exc.message}", file=sys.stderr)
        return 2


def _settings(args: argparse.Namespace) -> Settings:
    from service.settings_loader import load_settings

    return load_settings(data_dir=Path(args.data_dir) if args.data_dir else None)


def _config(args: argparse.Namespace, settings: Settings) -> SearchConfig:
    from service.code.parsing import parse_search_config
    from service.validation import Fields

    raw: dict[str, Any] = {"skip_dirs": list(args.skip_dir)}
    if args.embeddings_model:
        raw["embeddings_model"] = args.embeddings_model
    if args.embeddings_dimensions:
        raw["embeddings_dimensions"] = args.embeddings_dimensions
    if args.index_dir:
        raw["index_dir"] = str(Path(args.index_dir).expanduser().resolve())
    return parse_search_config(Fields(raw, "options"), settings)


async def _open(args: argparse.Namespace, settings: Settings) -> Engine:
    """The engine with every surface: the command line hands their list in (``args.surfaces``)."""
    from service.engine.startup import open_engine

    return await open_engine(settings, args.surfaces())


def _bar(unit: str, desc: str) -> tqdm:
    from tqdm import tqdm

    return tqdm(total=0, unit=unit, desc=desc, file=sys.stderr, disable=not sys.stderr.isatty(), dynamic_ncols=True, leave=True)


def _progress(bar: tqdm) -> Any:
    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    return update


class _LazyBar:
    """A progress bar that appears only once there is something to do (a search of an unchanged
    workspace prints no bar)."""

    def __init__(self, unit: str, desc: str) -> None:
        self._unit, self._desc = unit, desc
        self._bar: tqdm | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if not total:
                return
            self._bar = _bar(self._unit, self._desc)
        _progress(self._bar)(done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def _registered(engine: Engine, root: Path, config: SearchConfig | None) -> Workspace:
    """The CLI user's workspace of ``root``; registered (with ``config``) when new or when given."""
    from service.code.state import workspaces_of
    from service.code.workspace import SearchConfig, workspace_id

    workspaces = workspaces_of(engine)
    existing = workspaces.registry.get(workspace_id(CLI_TENANT, root))
    if existing is not None and config is None:
        return existing
    workspace, _ = await workspaces.register(CLI_TENANT, root, config or SearchConfig())
    return workspace


async def _index(args: argparse.Namespace) -> int:
    from service.code.parsing import resolve_root
    from service.code.state import workspaces_of
    from service.code.status import index_status

    settings = _settings(args)
    root = resolve_root(str(Path(args.path).expanduser().absolute()), settings, trusted=True)
    config = _config(args, settings)
    engine = await _open(args, settings)
    try:
        workspace = await _registered(engine, root, config)
        workspaces = workspaces_of(engine)
        started = time.monotonic()
        with _bar("file", "indexing") as bar:
            fresh = await workspaces.revalidate(workspace, force=True, progress=_progress(bar))
        if args.embed:
            await _embed_all(engine, workspace)
        status = await index_status(workspaces, workspace)
        if args.json:
            sys.stdout.write(orjson.dumps(status, option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            print(_summary(status, fresh.report.as_dict() if fresh.report else {}, time.monotonic() - started))
    finally:
        await engine.close()
    return 0


async def _embed_all(engine: Engine, workspace: Workspace) -> None:
    from service.code.model import workspace_filter
    from service.code.semantic import embed_scope, embedder_for
    from service.code.state import workspaces_of

    embedder = embedder_for(engine, workspace)
    if embedder is None:
        print("agentsearch: no embeddings model is configured; the index stays lexical", file=sys.stderr)
        return
    workspace = await workspaces_of(engine).mark_warm(workspace)
    counts = await workspaces_of(engine).counts(workspace)
    with _bar("chunk", "embedding") as bar:
        bar.total = counts["chunks"] - counts["embedded"]
        bar.refresh()
        while await embed_scope(engine, embedder, workspace_filter(workspace), 1_024, progress=bar.update):
            pass


def _summary(status: dict[str, Any], report: dict[str, Any], seconds: float) -> str:
    skipped = ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in (status.get("skipped") or {}).items() if count)
    return (
        f"indexed {status['root']}: {status['files']} files, {status['chunks']} chunks "
        f"({report.get('chunks_added', 0)} new, {report.get('chunks_removed', 0)} removed), "
        f"{status['embedded']} embedded, in {seconds:.1f}s"
        + (f"; skipped: {skipped}" if skipped else "")
        + f"\nworkspace {status['id']}"
    )


async def _search(args: argparse.Namespace) -> int:
    from service.code.parsing import parse_search_body, resolve_root
    from service.code.search import search_workspace

    settings = _settings(args)
    root = resolve_root(str(Path(args.path).expanduser().absolute()), settings, trusted=True)
    body: dict[str, Any] = {"query": args.query, "mode": args.mode, "regex": args.regex, "ignore_case": args.ignore_case, "limit": args.limit}
    if args.scope:
        body["path"] = args.scope
    if args.glob:
        body["glob"] = args.glob
    request = parse_search_body(body)
    engine = await _open(args, settings)
    try:
        workspace = await _registered(engine, root, None)
        bar = _LazyBar("file", "indexing")
        try:
            result = await search_workspace(engine, workspace, request, background=False, sync_budget_s=None, progress=bar)
        finally:
            bar.close()
    finally:
        await engine.close()
    if args.json:
        sys.stdout.write(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.color == "always" or (args.color == "auto" and sys.stdout.isatty()):
        from service.code.render import colored_output

        tagged = result.meta.get("mode") != "lexical"
        print(colored_output(result.results, result.notices, tagged=tagged, highlight=_highlight(args)))
    else:
        print(result.output)
    return 0 if result.results else 1


def _highlight(args: argparse.Namespace) -> re.Pattern[str] | None:
    try:
        if args.regex:
            return re.compile(args.query, re.IGNORECASE if args.ignore_case else 0)
        return re.compile(re.escape(args.query.strip()), re.IGNORECASE)
    except re.error:
        return None
