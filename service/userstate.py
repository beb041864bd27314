"""Per-user state of agentsearch on this machine: the cache directory and the records of running services.

The one-shot commands (``index``, ``search``, ``eval`` without ``--data-dir``) keep their data in
the user's cache directory, ``$XDG_CACHE_HOME/agentsearch`` or ``~/.cache/agentsearch``, never in
the tree they index. Each ``agentsearch serve`` records itself under ``services/`` there while it
runs (``<host>-<port>.json``, mode 0600: its pid, URL, data directory and where its JWT secret comes
from), so the command line can find it: ``search`` mints a token with its secret, ``token`` names
its data directory. A record whose process is gone is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from service.settings import Settings

SERVICES_DIR = "services"
SECRET_FROM_ENVIRONMENT = "environment"
SECRET_FROM_SETTINGS = "settings"
SECRET_FROM_FILE = "file"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""})


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/agentsearch``, else ``~/.cache/agentsearch`` (absolute)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or ""
    root = Path(base).expanduser() if base and Path(base).expanduser().is_absolute() else Path.home() / ".cache"
    return (root / "agentsearch").absolute()


@dataclass(frozen=True)
class ServiceRecord:
    """A running ``agentsearch serve`` as it recorded itself."""

    pid: int
    url: str
    host: str
    port: int
    data_dir: Path
    secret: str
    """Where its JWT secret comes from: ``file`` (``data_dir/jwt-secret``), ``environment`` or ``settings`` (a config file)."""

    @property
    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process holds that pid now
            return False
        return True

    def serves(self, url: str) -> bool:
        """Whether ``url`` names this service (same port; the same host, or both on this machine)."""
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        host = parts.hostname or ""
        return port == self.port and (host == self.host or (host in _LOOPBACK and self.host in _LOOPBACK))

    def describe(self) -> str:
        return f"the service at {self.url} (pid {self.pid})"


def _record_path(host: str, port: int, environ: dict[str, str] | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", host) or "any"
    return cache_dir(environ) / SERVICES_DIR / f"{slug}-{port}.json"


def secret_source(settings: Settings, environ: dict[str, str] | None = None) -> str:
    """Where ``settings.jwt_secret`` comes from: the environment, the settings file, or the data directory's file."""
    env = os.environ if environ is None else environ
    if not settings.jwt_secret:
        return SECRET_FROM_FILE
    return SECRET_FROM_ENVIRONMENT if env.get("AGENTSEARCH_JWT_SECRET") == settings.jwt_secret else SECRET_FROM_SETTINGS


def running_services(environ: dict[str, str] | None = None) -> list[ServiceRecord]:
    """The services this user runs now (records whose process lives), newest record first."""
    folder = cache_dir(environ) / SERVICES_DIR
    try:
        paths = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    found = []
    for path in paths:
        record = _read(path)
        if record is not None and record.alive:
            found.append(record)
    return found


def service_at(url: str, environ: dict[str, str] | None = None) -> ServiceRecord | None:
    """The running service that ``url`` names, if this user runs it."""
    return next((record for record in running_services(environ) if record.serves(url)), None)


def _read(path: Path) -> ServiceRecord | None:
    try:
        raw: Any = json.loads(path.read_text())
        return ServiceRecord(
            pid=int(raw["pid"]),
            url=str(raw["url"]),
            host=str(raw["host"]),
            port=int(raw["port"]),
            data_dir=Path(raw["data_dir"]),
            secret=str(raw["secret"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(settings: Settings, path: Path) -> None:
    host = settings.host
    shown = "127.0.0.1" if host in {"0.0.0.0", "", "::"} else host
    body = {
        "pid": os.getpid(),
        "url": f"http://{f'[{shown}]' if ':' in shown else shown}:{settings.port}",
        "host": host,
        "port": settings.port,
        "data_dir": str(settings.data_dir.expanduser().resolve()),
        "secret": secret_source(settings),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(body, out)
    os.replace(tmp, path)


def service_record_context(settings: Settings) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """An aiohttp ``cleanup_ctx`` entry: record this service while it runs, remove the record at exit.

    A record of another live process on the same host and port is left alone (this one will not bind)."""

    @contextlib.asynccontextmanager
    async def record(_app: Any) -> AsyncIterator[None]:
        path = _record_path(settings.host, settings.port)
        current = _read(path)
        ours = current is None or current.pid == os.getpid() or not current.alive
        if ours:
            with contextlib.suppress(OSError):  # a read-only home only costs the command line its shortcut
                _write(settings, path)
        try:
            yield
        finally:
            if ours:
                now = _read(path)
                if now is not None and now.pid == os.getpid():
                    with contextlib.suppress(OSError):
                        path.unlink()

    return record


__all__ = [
    "SECRET_FROM_ENVIRONMENT",
    "SECRET_FROM_FILE",
    "SECRET_FROM_SETTINGS",
    "ServiceRecord",
    "cache_dir",
    "running_services",
    "secret_source",
    "service_at",
    "service_record_context",
]
