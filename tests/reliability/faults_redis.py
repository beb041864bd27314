"""A private redis-server process for the fault tests, which they stop and start again at will.

The shared Redis on 127.0.0.1:6379 serves every other test: an outage is caused on this one only.
It keeps nothing on disk (``--save ""``, no AOF), so a restart comes back empty, as a Redis that
lost its memory would: every queued job is gone, which is the case the sweeper must repair.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.helpers import free_port


def redis_answers(port: int) -> bool:
    """Whether a Redis on ``port`` answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisProcess:
    """One redis-server on a free loopback port, in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not redis_answers(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM, as an operator would); its data is gone with it."""
        if self._process is None:
            return
        self._process.terminate()
        self._process.wait(timeout=10)
        self._process = None
        assert not redis_answers(self.port)
