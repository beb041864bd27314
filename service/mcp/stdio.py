"""``agentsearch mcp``: the MCP server over stdio, for a host that starts it as a local process.

Messages are JSON-RPC, one per line, on stdin and stdout; logs go to stderr, and so does
anything else that would print to stdout (the process moves its stdout there at start, so a
library's print cannot corrupt the protocol stream). Requests run concurrently and answer as
they finish; ``notifications/cancelled`` cancels one.

Two backends:
- embedded (default): the service's own app started without a listener on ``--data-dir``
  (engine, in-process workers, model preload, exactly as ``agentsearch serve`` starts them),
  searched as the machine's owner (user ``local``, plan max) or as ``--token``'s caller. A
  workspace root path given to ``code_search`` is registered for that user on first use. The
  data directory has one owner process: while ``agentsearch serve`` runs on it, use ``--url``.
- remote (``--url``): every tool call is the matching ``/v1`` request with ``--token`` (or
  ``AGENTSEARCH_TOKEN``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from service.auth import Caller, Plan, verify_token_for
from service.errors import AgentSearchError
from service.mcp.backends import EngineBackend, SearchBackend
from service.mcp.jsonrpc import (
    INTERNAL_ERROR,
    PARSE_ERROR,
    Message,
    RequestId,
    RpcError,
    error_message,
    parse_message,
    request_id_of,
)
from service.mcp.remote import RemoteBackend
from service.mcp.server import LATEST_VERSION, answer
from service.settings import Settings
from service.settings_loader import load_settings

if TYPE_CHECKING:
    from aiohttp import web

AppFactory = Callable[[Settings], "web.Application"]

log = logging.getLogger(__name__)

TOKEN_ENV = "AGENTSEARCH_TOKEN"
LOCAL_CALLER = Caller(sub="local", plan=Plan.MAX)
MAX_LINE_BYTES = 16 * 1024 * 1024


def add_cli(subparsers: Any, create_app: AppFactory) -> None:
    """The ``mcp`` command; ``create_app`` builds the service app whose resources the embedded engine runs on."""
    mcp = subparsers.add_parser("mcp", help="serve the searches as MCP tools over stdio (for a local MCP host)")
    mcp.add_argument("--data-dir", help="the embedded engine's data directory (default ./data)")
    mcp.add_argument("--url", help="call a running agentsearch service (its base URL) instead of the embedded engine")
    mcp.add_argument("--token", help=f"bearer token (default: ${TOKEN_ENV}); required with --url, picks the caller otherwise")
    mcp.set_defaults(func=cmd_mcp, create_app=create_app)


def cmd_mcp(args: argparse.Namespace) -> int:
    from service.logs import configure_logging

    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.url and not token:
        print(f"agentsearch: --url needs a token: pass --token or set {TOKEN_ENV} (mint one with `agentsearch token`)", file=sys.stderr)
        return 2
    settings = load_settings(data_dir=Path(args.data_dir) if args.data_dir else None)
    configure_logging(settings.log_level)
    protocol_out = _claim_stdout()
    try:
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            return asyncio.run(_serve(args.url, token, settings, protocol_out, args.create_app))
    except AgentSearchError as exc:  # a token the data directory's secret refuses
        print(f"agentsearch: {exc.message}", file=sys.stderr)
        return 2
    return 0


def _claim_stdout() -> BinaryIO:
    """The protocol's own handle on stdout; fd 1 then points at stderr for everything else."""
    sys.stdout.flush()
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return protocol_out


async def _serve(url: str | None, token: str | None, settings: Settings, out: BinaryIO, create_app: AppFactory) -> int:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    reader = await _stdin_reader()
    if url:
        async with RemoteBackend.connect(url, str(token)) as remote:
            await StdioServer(remote, out).run(reader)
        return 0
    async with _embedded(settings, token, create_app) as local:
        await StdioServer(local, out).run(reader)
    return 0


@contextlib.asynccontextmanager
async def _embedded(settings: Settings, token: str | None, create_app: AppFactory) -> AsyncIterator[EngineBackend]:
    """The service app's resources started without a listener: the same engine, workers and preload."""
    from aiohttp import web

    from service.state import ENGINE

    app = create_app(settings)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        engine = app[ENGINE]
        caller = verify_token_for(engine.settings, engine.jwt_secret, token) if token else LOCAL_CALLER
        yield EngineBackend(engine, caller, registers_roots=True)
    finally:
        await runner.cleanup()


async def _stdin_reader() -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


class StdioServer:
    """Reads messages until stdin closes; answers each request on stdout."""

    def __init__(self, backend: SearchBackend, out: BinaryIO) -> None:
        self._backend = backend
        self._out = out
        self._version = LATEST_VERSION
        self._running: dict[RequestId, asyncio.Task[None]] = {}
        self._batches: set[asyncio.Task[None]] = set()

    async def run(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    self._write(error_message(None, RpcError(PARSE_ERROR, f"message longer than {MAX_LINE_BYTES} bytes")))
                    continue
                if not line:
                    break  # the host closed stdin: shut down
                if line.strip():
                    await self._receive(line)
        finally:
            pending = [*self._running.values(), *self._batches]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _receive(self, line: bytes) -> None:
        try:
            payload = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._write(error_message(None, RpcError(PARSE_ERROR, f"not valid JSON: {exc}")))
            return
        if isinstance(payload, list):
            batch = asyncio.create_task(self._batch(payload))
            self._batches.add(batch)
            batch.add_done_callback(self._batches.discard)
            return
        try:
            message = parse_message(payload)
        except RpcError as exc:
            self._write(error_message(request_id_of(payload), exc))
            return
        if message.method == "notifications/cancelled":
            self._cancel(message.params.get("requestId"))
        elif message.method == "initialize":
            await self._initialize(message)  # inline: what follows speaks the negotiated version
        elif message.is_request:
            assert message.id is not None
            self._start(message.id, self._request(message))

    async def _initialize(self, message: Message) -> None:
        reply = await answer(message, self._backend, self._version)
        if reply is not None:
            if "result" in reply:
                self._version = reply["result"]["protocolVersion"]
            self._write(reply)

    def _start(self, request_id: RequestId, work: Any) -> None:
        task = asyncio.create_task(work)
        self._running[request_id] = task
        task.add_done_callback(lambda _: self._running.pop(request_id, None))

    def _cancel(self, request_id: Any) -> None:
        task = self._running.get(request_id) if isinstance(request_id, str | int) else None
        if task is not None:
            task.cancel()  # a cancelled request gets no answer

    async def _request(self, message: Message) -> None:
        reply = await self._answer_safely(message)
        if reply is not None:
            self._write(reply)

    async def _batch(self, payload: list[Any]) -> None:
        replies = []
        for raw in payload:
            try:
                message = parse_message(raw)
            except RpcError as exc:
                replies.append(error_message(request_id_of(raw), exc))
                continue
            reply = await self._answer_safely(message)
            if reply is not None:
                replies.append(reply)
        if replies:
            self._write(replies)

    async def _answer_safely(self, message: Message) -> dict[str, Any] | None:
        try:
            return await answer(message, self._backend, self._version)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("MCP request failed", extra={"method": message.method})
            return error_message(message.id, RpcError(INTERNAL_ERROR, "internal error; the server's log (stderr) has the details"))

    def _write(self, message: Any) -> None:
        self._out.write(orjson.dumps(message) + b"\n")
        self._out.flush()
