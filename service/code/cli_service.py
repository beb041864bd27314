"""``agentsearch search`` through a running service: probe it, find a token, find or register the workspace, search.

The service is asked first because it holds the model loaded and the index open: a hybrid query
then costs a request, not a model load. ``find`` probes ``GET /readyz`` with a short timeout; no
answer means no service (the caller searches in its own process). The token is ``--token``, else
``AGENTSEARCH_TOKEN``, else one minted here with the service's own secret when this user runs it
(``service.userstate``: the service's record names its data directory, whose ``jwt-secret`` this
user can read, or says it signs with ``AGENTSEARCH_JWT_SECRET``, used when this environment has it):
user ``local`` (the workspace owner the in-process commands use too), plan ``max`` (no rate-limit
waits), admin (a plain allowed base is open to it), living ``MINTED_TTL_S``, never printed.

Anything that keeps the service from taking the search (no token, the root refused) is a
``NotServed`` with the reason; an error the search itself answers (a bad regex) is the service's
4xx message, raised as ``ServiceRefused``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import aiohttp

from service.errors import BadRequest

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "AGENTSEARCH_URL"
TOKEN_ENV = "AGENTSEARCH_TOKEN"
PROBE_TIMEOUT_S = 1.0  # refused at once when nothing listens; a busy service gets a second
MINTED_TTL_S = 600
MINTED_SUB = "local"


class NotServed(Exception):
    """The service cannot take this search (the message says why); the caller searches in-process or stops."""


class ServiceRefused(BadRequest):
    """The service answered the search with an error (its message is the one to show)."""


def service_url(flag: str | None) -> tuple[str, bool]:
    """The service URL and whether the user named it on the command line (``--url``)."""
    if flag:
        return flag.rstrip("/"), True
    return (os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/"), False


async def search_through(url: str, root: Path, body: dict[str, Any], *, token: str | None) -> dict[str, Any] | None:
    """The service's answer to ``body`` over the workspace of ``root``; None when no service answers at ``url``."""
    async with aiohttp.ClientSession() as session:
        if not await _answers(session, url):
            return None
        token = token or os.environ.get(TOKEN_ENV) or _minted(url)
        headers = {"Authorization": f"Bearer {token}"}
        workspace = await _workspace(session, url, root, headers)
        status, answer = await _call(session, "POST", f"{url}/v1/workspaces/{workspace}/search", headers, body)
        if status >= 400:
            raise ServiceRefused(_message(answer, status))
        return answer


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as response:
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return False
    return isinstance(body, dict) and body.get("status") in {"ready", "not-ready"}


def _minted(url: str) -> str:
    """A short-lived token signed with the secret of the service at ``url``, when this user runs it."""
    from service.auth import SECRET_FILE, mint_token
    from service.settings_loader import load_settings
    from service.userstate import SECRET_FROM_FILE, service_at

    record = service_at(url)
    if record is None:
        raise NotServed(f"no token for the service at {url}: pass --token or set {TOKEN_ENV}")
    settings = load_settings()
    if record.secret == SECRET_FROM_FILE:
        try:
            secret = (record.data_dir / SECRET_FILE).read_text().strip()
        except OSError as exc:
            raise NotServed(f"cannot read the secret of {record.describe()} ({exc.strerror}): pass --token or set {TOKEN_ENV}") from None
    elif settings.jwt_secret:
        secret = settings.jwt_secret
    else:
        raise NotServed(f"{record.describe()} signs with its configured jwt_secret: set AGENTSEARCH_JWT_SECRET, or pass --token")
    return mint_token(
        secret,
        sub=MINTED_SUB,
        plan="max",
        admin=True,
        ttl_s=min(MINTED_TTL_S, settings.jwt_max_ttl_s),
        audience=settings.jwt_audience,
        issuer=settings.jwt_issuer,
        max_ttl_s=settings.jwt_max_ttl_s,
    )


async def _workspace(session: aiohttp.ClientSession, url: str, root: Path, headers: dict[str, str]) -> str:
    """The id of the caller's workspace of ``root``: the one registered (settings untouched), else a new one."""
    status, listed = await _call(session, "GET", f"{url}/v1/workspaces", headers, None)
    if status >= 400:
        raise NotServed(f"the service at {url} refused: {_message(listed, status)}")
    for workspace in listed.get("workspaces", []):
        if workspace.get("root") == str(root):
            return str(workspace["id"])
    status, registered = await _call(session, "POST", f"{url}/v1/workspaces", headers, {"root": str(root)})
    if status >= 400:
        raise NotServed(f"the service at {url} does not search {root}: {_message(registered, status)}")
    return str(registered["id"])


async def _call(session: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    try:
        async with session.request(method, url, headers=headers, json=body) as response:
            return response.status, await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise NotServed(f"the service stopped answering ({type(exc).__name__})") from None


def _message(answer: Any, status: int) -> str:
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("message") or status)
    return f"HTTP {status}"


__all__ = ["DEFAULT_URL", "NotServed", "ServiceRefused", "search_through", "service_url"]
