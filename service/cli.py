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

from service.errors import SettingsError
from service.logs import configure_logging
from service.settings import Settings
from service.settings_loader import load_settings

if TYPE_CHECKING:
    from aiohttp import web


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

    settings = _settings(args)
    configure_logging(settings.log_level)
    logging.getLogger(__name__).info(
        "starting agentsearch", extra={"store": settings.store_kind, "data_dir": str(settings.data_dir)}
    )
    from service.code.roots import describe_bases

    logging.getLogger(__name__).info("%s", describe_bases(settings), extra={"single_tenant": settings.is_single_tenant})
    web.run_app(create_app(settings), host=settings.host, port=settings.port, print=None, access_log=None)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
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
    from service.auth import load_or_create_secret, mint_token

    settings = _settings(args)
    secret = settings.jwt_secret or load_or_create_secret(settings.data_dir)
    teams = tuple(t.strip() for t in (args.teams or "").split(",") if t.strip())
    try:
        token = mint_token(
            secret,
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
    except ValueError as exc:
        print(f"agentsearch token: {exc}", file=sys.stderr)
        return 2
    if args.json:
        import jwt

        claims = jwt.decode(token, options={"verify_signature": False})
        print(json.dumps({"token": token, "claims": claims}, indent=2, sort_keys=True))
    else:
        print(token)
    return 0


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


def build_parser() -> argparse.ArgumentParser:
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

    token = sub.add_parser("token", help="print a dev token signed with the data directory's secret")
    token.add_argument("--data-dir")
    token.add_argument("--sub", required=True)
    token.add_argument("--org")
    token.add_argument("--teams", help="comma-separated team ids")
    token.add_argument("--plan", default="free", choices=["free", "standard", "pro", "max"])
    token.add_argument("--admin", action="store_true")
    token.add_argument("--ttl", type=int, help="seconds until expiry (default and most: jwt_max_ttl_s, 30 days); every token expires")
    token.add_argument("--json", action="store_true", help="print the token and its claims as JSON")
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
            "the default data directory when neither is given). Exit 2 on a bad qrels line, a refused "
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

    from service.surfaces import add_cli_commands, surfaces

    parser.set_defaults(surfaces=surfaces)  # commands a surface adds open the engine with every surface
    add_cli_commands(sub)
    from service.mcp.stdio import add_cli as add_mcp_cli

    add_mcp_cli(sub, _create_app)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
