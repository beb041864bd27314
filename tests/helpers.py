"""How tests start the app, plus the polling and settings helpers every test folder uses.

The starters, one for each way a test needs the app:

- ``running_app``: in this process on a real test server (the ``client`` fixture, most tests).
- ``app_in_thread``: ``running_app`` on an event loop of its own in a thread, for synchronous
  clients (the schema fuzzer).
- ``serving``: ``python -m service serve`` as its own process, ready, stopped with SIGTERM.
- ``ServiceProcess``: that process started, SIGKILLed and started again on one port and data
  directory (the fault tests).
- ``serve_until_exit``: that process when it must refuse to start: its exit status and output.

``stand_in`` is not the app: it serves a small app of a test's own that plays a remote endpoint
the service calls (a rerank scorer, an embeddings model).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.settings import Settings
from tests.callers import TEST_SECRET

REDIS_URL = "redis://127.0.0.1:6379/0"
ROOT = Path(__file__).resolve().parents[1]
# The model-artifact directory (the local model's ONNX export) of every service the suite starts.
MODEL_ARTIFACTS = ROOT / "test-artifacts" / "models"


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


@dataclass(frozen=True)
class ThreadedApp:
    """The app served from a thread of its own: its settings and base URL."""

    settings: Settings
    url: str


@contextmanager
def app_in_thread(settings: Settings, *, start_timeout_s: float = 120.0, stop_timeout_s: float = 180.0) -> Iterator[ThreadedApp]:
    """``running_app`` of ``settings`` on an event loop of its own, run by a thread: for a synchronous
    client (schemathesis, ``requests``), which would block the test's loop and with it the server.
    Closed, engine and worker included, and the thread ended on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="app-in-thread", daemon=True)
    thread.start()
    try:
        context = running_app(settings)
        client = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result(timeout=start_timeout_s)
        try:
            yield ThreadedApp(settings, str(client.make_url("")).rstrip("/"))
        finally:
            asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result(timeout=stop_timeout_s)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


@asynccontextmanager
async def stand_in(app: web.Application) -> AsyncIterator[str]:
    """A small real HTTP server of a test's own ``app`` on a free loopback port, playing a remote
    endpoint the service calls (a rerank scorer, an embeddings model); yields its base URL. A
    handler is cancelled when its client hangs up, so a stand-in can count abandoned calls."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# The per-user state of the services the suite starts (``$XDG_CACHE_HOME/agentsearch``: the records
# of running services) in a directory of this test run rather than the real user's cache, so no
# CLI outside the suite finds them; a test that gives a child its own XDG_CACHE_HOME keeps it.
_CHILD_CACHE = Path(tempfile.mkdtemp(prefix="agentsearch-test-cache-"))
atexit.register(shutil.rmtree, _CHILD_CACHE, True)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for an ``agentsearch serve`` child: its user cache in the test run's directory unless ``env`` names one."""
    return {"XDG_CACHE_HOME": str(_CHILD_CACHE), **env}


def serve_command(port: int, *args: str) -> list[str]:
    """The command line of ``python -m service serve`` on loopback ``port``, with ``args`` after it."""
    return [sys.executable, "-m", "service", "serve", "--port", str(port), *args]


async def spawn_service(env: dict[str, str], port: int, *, stdout: IO[bytes] | int | None, stderr: IO[bytes] | int | None) -> asyncio.subprocess.Process:
    """``python -m service serve --port PORT`` with ``env``, from the repository root."""
    return await asyncio.create_subprocess_exec(*serve_command(port), env=child_env(env), cwd=ROOT, stdout=stdout, stderr=stderr)


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


async def serve_until_exit(env: dict[str, str], log_path: Path, *, timeout_s: float = 120.0) -> tuple[int, str]:
    """``python -m service serve`` that is expected to refuse to start: its exit status and its
    output (stdout and stderr, also left in ``log_path``). Killed, and the test failed by the
    timeout, if it is still running after ``timeout_s``."""
    with log_path.open("wb") as log_file:
        process = await spawn_service(env, free_port(), stdout=log_file, stderr=log_file)
        try:
            returncode = await asyncio.wait_for(process.wait(), timeout=timeout_s)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    return returncode, log_path.read_text()


class ServiceProcess:
    """One ``python -m service serve`` child on a free loopback port that a test starts, kills and
    starts again (the fault tests): the same port, data directory and log file each time.

    The child gets ``data_dir``, the tests' JWT secret, offline model loading, WARNING logs and
    ``env`` on top of this process's environment. Its log (stdout and stderr) is appended to
    ``log_path``, whose tail a failed start shows, so a failing fault test says why.
    """

    def __init__(self, data_dir: Path, log_path: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.env = child_env({
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "AGENTSEARCH_JWT_SECRET": TEST_SECRET,
            "AGENTSEARCH_LOG_LEVEL": "WARNING",
            **env,
        })
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def start(self, *, ready_timeout_s: float = 90.0) -> None:
        """Start the child and wait until /readyz says ready (Redis, store and the model)."""
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(serve_command(self.port, "--data-dir", str(self.data_dir)), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                if self._process.poll() is not None:
                    raise AssertionError(f"agentsearch serve exited with {self._process.returncode}:\n{self.log_tail()}")
                try:
                    async with session.get(f"{self.url}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"agentsearch serve not ready within {ready_timeout_s}s:\n{self.log_tail()}")
                await asyncio.sleep(0.2)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup context runs, no flush, the lock is left as the kernel leaves it."""
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(timeout=30)
        self._process = None

    def stop(self) -> None:
        """SIGTERM and wait (the normal shutdown); SIGKILL if it does not go within 60 s."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)
        self._process = None


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
    from service.reindex_command import run_reindex

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return run_reindex(settings, as_json=False, wait=True, **kwargs)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
