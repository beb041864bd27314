"""How tests start the app: in process on a real test server (``running_app``) or as its own
``python -m service serve`` process (``serving``), plus the polling and settings helpers every test
folder uses."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.settings import Settings

REDIS_URL = "redis://127.0.0.1:6379/0"
ROOT = Path(__file__).resolve().parents[1]


@asynccontextmanager
async def running_app(
    settings: Settings, *, setup: Callable[[web.Application], object] | None = None, **changes: Any
) -> AsyncIterator[TestClient[Any, Any]]:
    """The app of ``settings`` (with ``changes``) on a real test server, as `make run` starts it: its
    own engine and, unless the settings say otherwise, its in-process worker. ``setup`` sees the app
    before it starts (extra routes, app keys). Closed, engine and worker included, on exit."""
    app = create_app(replace(settings, **changes) if changes else settings)
    if setup is not None:
        setup(app)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def spawn_service(env: dict[str, str], port: int, *, stdout: IO[bytes] | int | None, stderr: IO[bytes] | int | None) -> asyncio.subprocess.Process:
    """``python -m service serve --port PORT`` with ``env``, from the repository root."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "serve", "--port", str(port),
        env=env, cwd=ROOT, stdout=stdout, stderr=stderr,
    )  # fmt: skip


@dataclass
class ServedProcess:
    """A running ``python -m service serve``: its process, base URL and an HTTP session to it."""

    process: asyncio.subprocess.Process
    base: str
    session: aiohttp.ClientSession


@asynccontextmanager
async def serving(
    env: dict[str, str], *, log_path: Path | None = None, ready_timeout_s: float = 120.0, stop_timeout_s: float = 60.0, clean_exit: bool = False
) -> AsyncIterator[ServedProcess]:
    """``python -m service serve`` as its own process on a free loopback port, ready (``/readyz``:
    Redis, store and model); stopped with SIGTERM on exit and waited for. Its output goes to
    ``log_path`` (stdout and stderr), or else its stderr is kept for the messages; ``clean_exit``
    asserts it stopped with status 0 or by the SIGTERM."""
    port = free_port()
    with ExitStack() as files:
        if log_path is not None:
            log_file = files.enter_context(log_path.open("wb"))
            process = await spawn_service(env, port, stdout=log_file, stderr=log_file)
        else:
            process = await spawn_service(env, port, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        served = ServedProcess(process, f"http://127.0.0.1:{port}", aiohttp.ClientSession())
        try:

            async def ready() -> bool:
                if process.returncode is not None:
                    output = log_path.read_text()[-3000:] if log_path is not None else (await process.stderr.read()).decode()  # type: ignore[union-attr]
                    raise AssertionError(f"serve exited {process.returncode}: {output}")
                try:
                    async with served.session.get(f"{served.base}/readyz") as response:
                        return response.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await wait_until(ready, timeout_s=ready_timeout_s, interval_s=0.5)
            yield served
        finally:
            await served.session.close()
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(process.communicate(), timeout=stop_timeout_s)
            if clean_exit:
                assert process.returncode in (0, -signal.SIGTERM), err.decode() if err is not None else log_path and log_path.read_text()[-3000:]


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.2) -> None:
    """Poll an (async) predicate until true; fail the test with a timeout otherwise."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)


def with_settings(settings: Settings, **changes: Any) -> Settings:
    return replace(settings, **changes)


def reindex_in_process(settings: Settings, **kwargs: Any) -> int:
    """``agentsearch reindex`` in this process; the logging it configures for its own run is undone after."""
    from service.migrate import run_reindex

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return run_reindex(settings, as_json=False, wait=True, **kwargs)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
