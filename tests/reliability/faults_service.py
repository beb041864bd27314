"""``agentsearch serve`` as a real child process for the fault tests: started, killed and started again.

The child gets its own data directory, port and queue prefix; its log goes to a file whose tail is
shown when a start fails, so a failing fault test says why.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.callers import TEST_SECRET, auth
from tests.helpers import ROOT, free_port


class ServiceProcess:
    """One ``python -m service serve`` child on a free loopback port."""

    def __init__(self, data_dir: Path, log_path: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "AGENTSEARCH_JWT_SECRET": TEST_SECRET,
            "AGENTSEARCH_LOG_LEVEL": "WARNING",
            **env,
        }
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
        command = [sys.executable, "-m", "service", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
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


async def call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None, caller: dict[str, str] | None = None) -> tuple[int, Any]:
    """One JSON call as ``caller`` (a plain ``alice`` by default); (status, decoded body)."""
    async with session.request(method, url, json=body, headers=caller or auth("alice")) as response:
        return response.status, await response.json()


def packages(prefix: str, count: int, topic: str) -> list[dict[str, Any]]:
    """``count`` small packages whose summaries share ``topic`` (so one query finds them all)."""
    return [
        {"type": "package", "id": f"{prefix}-{i}", "name": f"@alice/{prefix}-{i}", "summary": f"{topic} helper number {i} ({prefix})."}
        for i in range(count)
    ]
