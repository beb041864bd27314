"""``agentsearch index PATH`` and ``agentsearch search PATH QUERY``: one-shot workspace commands.

``search`` asks a running service first (``--url``, else ``AGENTSEARCH_URL``, else
``http://127.0.0.1:8080``; ``cli_service``), which holds the model loaded. Without one (or with
``--local`` or ``--data-dir``) both commands open the engine embedded on a data directory
(``--data-dir``, else the per-user cache ``service.userstate.cache_dir``; never inside the tree),
with the code surface alone, as the local user ``local`` (the machine's owner: no allowed-base
check). In-process, ``search`` never loads torch: semantic ranking comes from the model's ONNX
export when one is on disk (``service.engine.export_embedder``, loading while the engine opens),
else the answer is lexical with a notice. ``index`` shows a progress bar on a terminal (tqdm, on
stderr); ``search`` prints ``path:line:snippet`` lines, colored on a terminal and plain when piped,
or the whole answer with ``--json``. Exit status as grep: 0 with results, 1 without, 2 on an error.
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

    from service.code.parsing import SearchRequest
    from service.code.workspace import SearchConfig, Workspace
    from service.engine.export_embedder import ExportEmbedder
    from service.engine.runtime import Engine
    from service.settings import Settings

CLI_TENANT = "user:local"


def add_cli(subparsers: Any) -> None:
    index = subparsers.add_parser("index", help="index a workspace directory (progress bar on a terminal)")
    index.add_argument("path", help="the workspace root")
    index.add_argument("--data-dir", help="the data directory (default: $XDG_CACHE_HOME/agentsearch or ~/.cache/agentsearch); never inside PATH")
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
    search.add_argument(
        "--data-dir", help="search in this process on this data directory (default: a running service, else $XDG_CACHE_HOME/agentsearch)"
    )
    search.add_argument("--url", help="the service to ask first (default: AGENTSEARCH_URL, else http://127.0.0.1:8080)")
    search.add_argument("--token", help="bearer token for the service (default: AGENTSEARCH_TOKEN, else minted with the secret of a service you run)")
    search.add_argument("--local", action="store_true", help="search in this process, never through a service")
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
    """The settings with the one-shot data directory: ``--data-dir``, else the per-user cache."""
    from service.settings_loader import load_settings
    from service.userstate import cache_dir

    return load_settings(data_dir=Path(args.data_dir).expanduser() if args.data_dir else cache_dir())


def _check_data_dir(args: argparse.Namespace, settings: Settings, root: Path) -> None:
    """Refuse a ``--data-dir`` inside the tree it would index: the index would live in the tree."""
    from service.errors import ValidationError

    if not args.data_dir:
        return  # the cache may lie inside a tree as large as $HOME: the walk prunes it by its marker
    data = settings.data_dir.resolve()
    if data == root or root in data.parents:
        raise ValidationError(
            f"the data directory {data} lies inside the tree {root}: pass a --data-dir outside it, or none "
            "to use the per-user cache ($XDG_CACHE_HOME/agentsearch or ~/.cache/agentsearch)"
        )


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
    """The engine with the code surface alone (of those the command line hands in, ``args.surfaces``):
    the other surfaces' collections are neither loaded nor flushed."""
    from service.code.model import SURFACE_NAME
    from service.engine.startup import open_engine

    return await open_engine(settings, [surface for surface in args.surfaces() if surface.name == SURFACE_NAME])


def _export_embedder(settings: Settings) -> ExportEmbedder | None:
    """The configured local model served from its ONNX export, loading from now on; None for another model."""
    from service.engine.export_embedder import ExportEmbedder, export_path

    model = settings.embeddings_model
    export = export_path(model, settings.models_dir) if model else None
    if model is None or export is None:
        return None
    hint = (
        f": its ONNX export is made once in {settings.models_dir} by `agentsearch index PATH --embed`"
        + ("" if settings.embeddings_onnx else " (with embeddings_onnx on)")
        + ", or search through a running service (`agentsearch serve`)"
    )
    embedder = ExportEmbedder(model.partition("/")[2], export, cache_size=settings.query_cache_size, hint=hint)
    embedder.preload()
    return embedder


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
    _check_data_dir(args, settings, root)
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
    from service.code.ingest import write_points
    from service.code.model import workspace_filter
    from service.code.semantic import embed_scope, embedder_for
    from service.code.state import workspaces_of

    embedder = embedder_for(engine, workspace)
    if embedder is None:
        print("agentsearch: no embeddings model is configured; the index stays lexical", file=sys.stderr)
        return
    workspaces = workspaces_of(engine)
    workspace = await workspaces.mark_warm(workspace)
    with workspaces.cache_view(workspace) as cache:
        await write_points(engine, workspace, cache, queue=False)
    counts = await workspaces.counts(workspace)
    with _bar("chunk", "embedding") as bar:
        bar.total = counts["chunks"] - counts["embedded"]
        bar.refresh()
        while await embed_scope(engine, embedder, workspace_filter(workspace), 1_024, progress=bar.update):
            pass
    await _keep_export(embedder)


async def _keep_export(embedder: object) -> None:
    """Let the local model's ONNX export finish, so one-shot searches can serve semantic ranking from it."""
    from service.engine.embeddings import LocalEmbedder

    if isinstance(embedder, LocalEmbedder) and embedder.onnx_state == "preparing":
        print("agentsearch: preparing the model's ONNX export for one-shot searches", file=sys.stderr)
        await asyncio.to_thread(embedder.wait_for_runtime, 900.0)


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

    settings = _settings(args)
    root = resolve_root(str(Path(args.path).expanduser().absolute()), settings, trusted=True)
    _check_data_dir(args, settings, root)
    body: dict[str, Any] = {"query": args.query, "mode": args.mode, "regex": args.regex, "ignore_case": args.ignore_case, "limit": args.limit}
    if args.scope:
        body["path"] = args.scope
    if args.glob:
        body["glob"] = args.glob
    request = parse_search_body(body)  # a bad query is refused here, before any service or engine
    answer = None if args.local or args.data_dir else await _through_service(args, root, body)
    if answer is None:
        answer = await _in_process(args, settings, root, request)
    _print(args, answer)
    return 0 if answer["results"] else 1


async def _through_service(args: argparse.Namespace, root: Path, body: dict[str, Any]) -> dict[str, Any] | None:
    """The running service's answer; None (search in this process) when none answers or it cannot
    take the search, said on stderr when ``--url`` named it (then a refusal is an error)."""
    from service.code.cli_service import NotServed, search_through, service_url
    from service.errors import Unavailable

    url, named = service_url(args.url)
    try:
        answer = await search_through(url, root, body, token=args.token)
    except NotServed as exc:
        if named:
            raise Unavailable(str(exc)) from None
        print(f"agentsearch: {exc}; searching in this process", file=sys.stderr)
        return None
    if answer is None and named:
        print(f"agentsearch: no service answers at {url}; searching in this process", file=sys.stderr)
    return answer


async def _in_process(args: argparse.Namespace, settings: Settings, root: Path, request: SearchRequest) -> dict[str, Any]:
    """The answer of an engine opened here: lexical at once, semantic from the model's export when it has one."""
    from service.code.search import search_workspace

    embedder = _export_embedder(settings)
    engine = None
    try:
        engine = await _open(args, settings)
        if embedder is not None:
            engine.embedders.provide(embedder)
        workspace = await _registered(engine, root, None)
        bar = _LazyBar("file", "indexing")
        try:
            result = await search_workspace(engine, workspace, request, background=False, sync_budget_s=None, progress=bar)
        finally:
            bar.close()
    finally:
        if engine is not None:
            await engine.close()
        elif embedder is not None:
            await embedder.close()
    return result.as_dict()


def _print(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    if args.json:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.color == "always" or (args.color == "auto" and sys.stdout.isatty()):
        from service.code.render import colored_output

        tagged = answer.get("meta", {}).get("mode") != "lexical"
        print(colored_output(answer["results"], answer["notices"], tagged=tagged, highlight=_highlight(args)))
    else:
        print(answer["output"])


def _highlight(args: argparse.Namespace) -> re.Pattern[str] | None:
    try:
        if args.regex:
            return re.compile(args.query, re.IGNORECASE if args.ignore_case else 0)
        return re.compile(re.escape(args.query.strip()), re.IGNORECASE)
    except re.error:
        return None
