"""The ``agentsearch`` command line: serve, worker, token, eval, and one-shot workspace index/search."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.allocator import limit_arenas
from service.errors import SettingsError
from service.heap import keep_full_passes_short, settle
from service.logs import configure_logging
from service.settings import Settings
from service.settings_loader import load_settings

if TYPE_CHECKING:
    from aiohttp import web

    from service.engine.surface import SurfaceDef


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "host", None):
        overrides["host"] = args.host
    if getattr(args, "port", None):
        overrides["port"] = args.port
    settings = load_settings(None, **overrides)
    extra_roots = tuple(Path(p).resolve() for p in getattr(args, "allow_root", None) or ())
    if extra_roots:
        settings = settings.with_overrides(allowed_roots=settings.allowed_roots + extra_roots)
        if settings.single_tenant is None and settings.store_kind != "qdrant":
            # `serve --allow-root DIR` on the embedded default is one developer's machine: every caller
            # may register under DIR. AGENTSEARCH_SINGLE_TENANT=false says otherwise; the start log says which.
            settings = settings.with_overrides(single_tenant=True)
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from service.app import create_app
    from service.starter.banner import log_serving
    from service.starter.loader import starter_context, starter_due, starter_in_place, with_starter_base
    from service.userstate import service_record_context

    keep_full_passes_short()  # no full collection walks the imported modules twice (see service.heap)
    settings = with_starter_base(_settings(args))
    configure_logging(settings.log_level)
    logging.getLogger(__name__).info(
        "starting agentsearch", extra={"store": settings.store_kind, "data_dir": str(settings.data_dir)}
    )
    from service.code.roots import describe_bases

    logging.getLogger(__name__).info("%s", describe_bases(settings), extra={"single_tenant": settings.is_single_tenant})
    app = create_app(settings)
    app.cleanup_ctx.append(service_record_context(settings))  # `search` and `token` find it by this record
    if starter_due(settings):  # a new data directory: the starter set loads beside serving
        app.cleanup_ctx.append(starter_context())
    starter = starter_in_place(settings)

    async def settle_heap(_app: web.Application) -> None:
        settle()  # started: what is alive now lives as long as the process (see service.heap)

    app.on_startup.append(settle_heap)
    # run_app calls `print` once its sites listen: the lines then say where, and what to try.
    web.run_app(app, host=settings.host, port=settings.port, print=lambda _: log_serving(settings, starter=starter), access_log=None)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    keep_full_passes_short()  # see service.heap
    settings = _settings(args)
    configure_logging(settings.log_level)

    async def run() -> None:
        from service.engine.deployment import claim_for_workers
        from service.engine.startup import open_engine
        from service.surfaces import surfaces
        from workers.settings import build_workers, run_workers

        engine = await open_engine(settings, surfaces())
        claim = None
        try:
            claim = await claim_for_workers(engine)
            settle()
            await run_workers(build_workers(engine, burst=args.burst, handle_signals=False, node_only=args.node_only))
        finally:
            if claim is not None:
                await claim.release()
            await engine.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from service.reindex_command import run_reindex

    return run_reindex(_settings(args), as_json=args.json, wait=not args.no_wait, team_orgs=args.team_org or ())


def cmd_token(args: argparse.Namespace) -> int:
    """Mint a token with the secret the service verifies with; say on stderr which secret that is.

    Without a secret (none configured, no ``jwt-secret`` in the data directory) it refuses, naming the
    data directory of a service this user runs, unless ``--new-secret`` asks for a new one."""
    import secrets as secrets_module

    from service.auth import SECRET_FILE, mint_token
    from service.fileonce import create_once

    settings = _settings(args)
    secret_path = (settings.data_dir / SECRET_FILE).expanduser().absolute()
    candidate: str | None = None
    if settings.jwt_secret:
        secret = settings.jwt_secret
    else:
        existing = _read_secret(secret_path)
        secret = existing or (candidate := secrets_module.token_urlsafe(48))
    teams = tuple(t.strip() for t in (args.teams or "").split(",") if t.strip())

    def mint(key: str) -> str:
        return mint_token(
            key,
            sub=args.sub,
            org=args.org,
            teams=teams,
            plan=args.plan,
            admin=args.admin,
            ttl_s=settings.jwt_max_ttl_s if args.ttl is None else args.ttl,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            max_ttl_s=settings.jwt_max_ttl_s,
        )

    try:
        token = mint(secret)  # the claims are checked before any secret is written
    except ValueError as exc:
        print(f"agentsearch token: {exc}", file=sys.stderr)
        return 2
    if candidate is not None:
        if not args.new_secret:
            print(_no_secret_message(secret_path, given=bool(args.data_dir)), file=sys.stderr)
            return 2
        create_once(secret_path, candidate, mode=0o600)
        winner = secret_path.read_text().strip()
        if winner != candidate:  # another process created it first: its secret is the one
            token = mint(winner)
        _never_indexed(settings.data_dir)
    print(f"agentsearch token: signed with {_secret_origin(settings, secret_path, created=candidate is not None)}", file=sys.stderr)
    if not settings.jwt_secret:
        _note_other_services(secret_path.parent)
    if args.json:
        import jwt

        claims = jwt.decode(token, options={"verify_signature": False})
        print(json.dumps({"token": token, "claims": claims}, indent=2, sort_keys=True))
    else:
        print(token)
    return 0


def _read_secret(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def _secret_origin(settings: Settings, secret_path: Path, *, created: bool) -> str:
    from service.userstate import SECRET_FROM_ENVIRONMENT, secret_source

    if settings.jwt_secret:
        if secret_source(settings) == SECRET_FROM_ENVIRONMENT:
            return "AGENTSEARCH_JWT_SECRET from the environment"
        return f"jwt_secret from the settings file {os.environ.get('AGENTSEARCH_CONFIG', '')}".rstrip()
    return f"a new secret, written to {secret_path}" if created else f"the secret in {secret_path}"


def _no_secret_message(secret_path: Path, *, given: bool) -> str:
    """Why ``token`` will not invent a secret, and what to do instead."""
    from service.userstate import SECRET_FROM_FILE, running_services

    lines = [
        f"agentsearch token: no secret at {secret_path}; a token signed with a new one would be refused by every "
        "service that already runs (\"bad signature\")."
    ]
    services = running_services()
    for record in services:
        if record.secret == SECRET_FROM_FILE:
            lines.append(f"  {_sentence(record.describe())} uses the data directory {record.data_dir}: pass --data-dir {record.data_dir}")
        else:
            lines.append(f"  {_sentence(record.describe())} signs with its configured jwt_secret: set AGENTSEARCH_JWT_SECRET to the same value")
    if not services:
        where = "" if given else " (`agentsearch serve` uses ./data of the directory it starts in)"
        lines.append(f"  Pass --data-dir with the data directory of the service that should accept the token{where}.")
    lines.append(f"  Or pass --new-secret to create a secret at {secret_path} (a service started later on that data directory uses it).")
    return "\n".join(lines)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _note_other_services(data_dir: Path) -> None:
    """Point at a running service that will refuse the token: it signs with another data directory's secret."""
    from service.userstate import SECRET_FROM_FILE, running_services

    here = data_dir.resolve()
    for record in running_services():
        if record.secret == SECRET_FROM_FILE and record.data_dir.resolve() != here:
            print(
                f"agentsearch token: note: {record.describe()} uses another data directory, {record.data_dir}; "
                f"it accepts tokens of `agentsearch token --data-dir {record.data_dir}`",
                file=sys.stderr,
            )


def _never_indexed(data_dir: Path) -> None:
    """Mark a data directory made here (it holds a secret now) so no workspace walk indexes it."""
    from service.code.roots import mark_no_index

    mark_no_index(data_dir)


def cmd_eval(args: argparse.Namespace) -> int:
    """Score a surface's rankings against a qrels file, per mode; exit 2 on a bad file, a refused or
    unreachable target, or when no search was answered."""
    from service.evaluation import MODES, DataDirTarget, EvaluationError, HttpTarget, Target, evaluate, read_qrels

    configure_logging("WARNING")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())

    async def run() -> int:
        if not modes or not set(modes) <= set(MODES):
            raise EvaluationError(f"--modes takes a comma-separated list of {', '.join(MODES)}; got {args.modes!r}")
        if args.limit < 1 or args.worst < 0 or args.concurrency < 1:
            raise EvaluationError("--limit and --concurrency must be at least 1, --worst at least 0")
        judged = read_qrels(Path(args.qrels))
        target: HttpTarget | DataDirTarget
        if args.url:
            if args.sub or args.org:
                raise EvaluationError("--sub and --org apply to --data-dir; over --url the token says who searches")
            token = args.token or os.environ.get("AGENTSEARCH_TOKEN")
            if not token:
                raise EvaluationError("--url needs a token: pass --token or set AGENTSEARCH_TOKEN (mint one with `agentsearch token --plan max`)")
            target = HttpTarget(args.url, token, workspace=args.workspace)
        else:
            if args.token:
                raise EvaluationError("--token applies to --url; with a data directory the search runs in this process as --sub")
            settings = _settings(args)
            if not args.data_dir:  # the one-shot commands' own data directory (`agentsearch index` fills it)
                from service.userstate import cache_dir

                settings = settings.with_overrides(data_dir=cache_dir())
            if not settings.data_dir.is_dir():
                raise EvaluationError(f"no data directory at {settings.data_dir}: pass --data-dir, or --url for a running service")
            target = DataDirTarget(settings, sub=args.sub or "eval", org=args.org, workspace=args.workspace)
        async with target:
            searched: Target = target
            report = await evaluate(searched, args.surface, judged, modes=modes, limit=args.limit, worst=args.worst, concurrency=args.concurrency)
        print(json.dumps(report.as_json(), indent=2) if args.json else report.table())
        if not report.answered_any:
            first = next(iter(report.failures.values()), None)
            print(f"agentsearch eval: no search was answered{f'; the first error: {first.first_error}' if first else ''}", file=sys.stderr)
            return 2
        return 0

    if args.surface == "code" and not args.workspace:
        print("agentsearch eval: --surface code needs --workspace (the workspace id; agentsearch index prints it)", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run())
    except EvaluationError as exc:
        print(f"agentsearch eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _create_app(settings: Settings) -> web.Application:
    from service.app import create_app

    return create_app(settings)


# The code surface's one-shot commands: their parser imports that surface alone (they run often, like grep).


def _code_surface_alone() -> list[SurfaceDef]:
    """The surfaces a code one-shot command opens the engine with: the code surface alone, imported
    only when the command opens an engine (a search a running service answers never does)."""
    from service.code.surface import SURFACE

    return [SURFACE]

_CODE_COMMANDS = frozenset({"index", "search"})


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``command`` (the first argument) being ``index`` or ``search`` builds only those."""
    parser = argparse.ArgumentParser(prog="agentsearch", description="Search service for AI-agent platforms.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service (embedded default unless QDRANT_URL is set)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir")
    serve.add_argument("--allow-root", action="append", metavar="DIR", help="add an allowed workspace base directory")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run the arq workers as their own process (production)")
    worker.add_argument("--data-dir")
    worker.add_argument("--burst", action="store_true", help="exit when the queues are empty")
    worker.add_argument("--node-only", action="store_true", help="run only this node's workspace queue (workspace_nodes)")
    worker.set_defaults(func=cmd_worker)

    reindex = sub.add_parser(
        "reindex", help="rebuild every index from its records; fill and switch to a new default embeddings model"
    )
    reindex.add_argument("--data-dir")
    reindex.add_argument("--json", action="store_true", help="print the report as JSON")
    reindex.add_argument("--no-wait", action="store_true", help="with a running service: queue the job and return")
    reindex.add_argument(
        "--team-org",
        action="append",
        metavar="TEAM=ORG",
        help="re-key records stored under the old team key team:TEAM to team:ORG/TEAM (repeat per team)",
    )
    reindex.set_defaults(func=cmd_reindex)

    token = sub.add_parser(
        "token", help="print a dev token signed with the service's secret (the data directory's, or AGENTSEARCH_JWT_SECRET); stderr says which"
    )
    token.add_argument("--data-dir")
    token.add_argument("--sub", required=True)
    token.add_argument("--org")
    token.add_argument("--teams", help="comma-separated team ids")
    token.add_argument("--plan", default="free", choices=["free", "standard", "pro", "max"])
    token.add_argument("--admin", action="store_true")
    token.add_argument("--ttl", type=int, help="seconds until expiry (default and most: jwt_max_ttl_s, 30 days); every token expires")
    token.add_argument("--json", action="store_true", help="print the token and its claims as JSON")
    token.add_argument(
        "--new-secret",
        action="store_true",
        help="create the data directory's secret when it has none (else the command refuses: a new secret's tokens fail on a running service)",
    )
    token.set_defaults(func=cmd_token)

    evaluation = sub.add_parser(
        "eval",
        help="score a surface's rankings (lexical, dense, served) against a qrels file: nDCG@10, Recall@5, MRR@10, all@5",
        description=(
            "Search every judged query of --qrels (JSONL: {\"query\": str, \"relevant\": [id, ...]}) in each mode and "
            "print nDCG@10, Recall@5, MRR@10 and all@5 (every relevant id in the top 5) per mode, and the worst "
            "queries of the served ranking with what ranked above their first relevant id. Ids: catalog "
            "'type:id' entities, actions 'template/action', code file paths. Against a running service "
            "(--url, --token or AGENTSEARCH_TOKEN) or a data directory opened in this process (--data-dir; "
            "when neither is given, the one-shot commands' per-user cache, $XDG_CACHE_HOME/agentsearch or ~/.cache/agentsearch). Exit 2 on a bad qrels line, a refused "
            "token, an unreachable service, or when no search was answered."
        ),
    )
    evaluation.add_argument("--surface", required=True, choices=["catalog", "code", "actions"])
    evaluation.add_argument("--qrels", required=True, metavar="FILE", help="JSONL, one {\"query\", \"relevant\"} object a line")
    where = evaluation.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running service's base URL (http://host:port)")
    where.add_argument("--data-dir", help="a data directory no service holds, searched in this process")
    evaluation.add_argument("--token", help="bearer token for --url (default: AGENTSEARCH_TOKEN); a max-plan token waits least on rate limits")
    evaluation.add_argument("--workspace", metavar="ID", help="the workspace id (required for --surface code)")
    evaluation.add_argument("--sub", help="with a data directory: the user searching (default eval; a workspace is its owner's)")
    evaluation.add_argument("--org", help="with a data directory: the searching user's org")
    evaluation.add_argument("--modes", default="lexical,dense,served", help="comma-separated modes to judge (default lexical,dense,served)")
    evaluation.add_argument("--limit", type=int, default=10, help="ids asked for per search (default 10)")
    evaluation.add_argument("--worst", type=int, default=10, help="worst queries to show (default 10)")
    evaluation.add_argument("--concurrency", type=int, default=4, help="searches in flight at once (default 4)")
    evaluation.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluation.set_defaults(func=cmd_eval)

    if command in _CODE_COMMANDS:  # a grep-like call: the code surface's commands alone, nothing else imported
        from service.code.cli import add_cli as add_code_cli

        parser.set_defaults(surfaces=_code_surface_alone)
        add_code_cli(sub)
        return parser
    from service.surfaces import add_cli_commands, surfaces

    parser.set_defaults(surfaces=surfaces)  # commands a surface adds open the engine with every surface
    add_cli_commands(sub)
    from service.mcp.stdio import add_cli as add_mcp_cli

    add_mcp_cli(sub, _create_app)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    limit_arenas()  # before any thread starts (see service.allocator)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
        return result
    except SettingsError as exc:
        print(f"agentsearch: invalid settings: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the store lock and similar start-up refusals print one clear line
        from service.engine.store import StoreError

        if isinstance(exc, StoreError):
            print(f"agentsearch: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
