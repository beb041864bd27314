"""The lines `agentsearch serve` logs once it listens: its URL, the dashboard's, and a first search to paste."""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from service.starter.loader import DEMO_ORG, DEMO_SUB

if TYPE_CHECKING:
    from service.settings import Settings

log = logging.getLogger(__name__)

# The catalog search the first-search line sends: the starter set's WeatherTool and MapTool answer it.
FIRST_QUERY = "what is the weather in Lisbon"


def base_url(settings: Settings) -> str:
    """``http://host:port`` to reach the service from this machine (a wildcard bind is reached on loopback)."""
    host = settings.host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def agentsearch_command() -> str:
    """How to run this ``agentsearch`` from the current directory: the venv's script when there is
    one beside this interpreter (relative when it lies below the current directory)."""
    script = Path(sys.executable).with_name("agentsearch")
    if not script.exists():
        return "agentsearch"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def serving_lines(settings: Settings, *, starter: bool) -> list[str]:
    """Where the service listens, where the dashboard is, and a ``curl`` line that answers: a catalog
    search as the starter set's demo user (``starter``), else the caller's index status."""
    url = base_url(settings)
    token = f"{shlex.quote(agentsearch_command())} token --data-dir {shlex.quote(str(settings.data_dir))}"
    lines = [
        f"agentsearch listening on {url}",
        f"admin dashboard: {url}/admin (log in with the token of: {token} --sub ops --admin)",
    ]
    if starter:
        body = shlex.quote(f'{{"query": "{FIRST_QUERY}"}}')
        lines.append(
            f"try a search of the starter data: TOKEN=$({token} --sub {DEMO_SUB} --org {DEMO_ORG}) && "
            f"curl -s {url}/v1/catalog/search -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d {body}"
        )
    else:
        lines.append(f"try: TOKEN=$({token} --sub you) && curl -s {url}/v1/index/status -H \"Authorization: Bearer $TOKEN\"")
    return lines


def log_serving(settings: Settings, *, starter: bool) -> None:
    """Log ``serving_lines`` at INFO, one record each."""
    for line in serving_lines(settings, starter=starter):
        log.info("%s", line)
