"""``Mcp-Session-Id``: session ids signed with the service secret, and their termination in Redis.

A session id is issued at ``initialize``. It names the negotiated protocol version and is bound
to the token's user by an HMAC over both, so any front end sharing the secret accepts it without
shared state, and nobody can use another user's session. ``DELETE /mcp`` ends a session: a
marker in Redis (kept as long as an id lives) makes every front end answer 404 for it after.
Sessions are optional: a request without the header is answered on its own (each request
carries its token), so stateless callers need not initialize.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from service.auth import Caller
from service.engine.runtime import Engine

log = logging.getLogger(__name__)

SESSION_TTL_S = 24 * 3600
_SIGNATURE_CHARS = 32


@dataclass(frozen=True)
class Session:
    id: str
    protocol_version: str
    issued_at: int


def issue(secret: str, caller: Caller, protocol_version: str, *, now: float | None = None) -> Session:
    issued_at = int(time.time() if now is None else now)
    payload = f"{issued_at:x}.{secrets.token_hex(8)}.{protocol_version}"
    return Session(f"{payload}.{_sign(secret, caller, payload)}", protocol_version, issued_at)


def verify(secret: str, caller: Caller, session_id: str, *, now: float | None = None) -> Session | None:
    """The session, if ``session_id`` was issued to this caller's user and has not expired."""
    payload, _, signature = session_id.rpartition(".")
    parts = payload.split(".")
    if len(parts) != 3 or not hmac.compare_digest(signature, _sign(secret, caller, payload)):
        return None
    try:
        issued_at = int(parts[0], 16)
    except ValueError:
        return None
    if (time.time() if now is None else now) - issued_at > SESSION_TTL_S:
        return None
    return Session(session_id, parts[2], issued_at)


def _sign(secret: str, caller: Caller, payload: str) -> str:
    digest = hmac.new(secret.encode(), f"mcp-session\0{caller.sub}\0{payload}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")[:_SIGNATURE_CHARS]


def _ended_key(engine: Engine, session_id: str) -> str:
    return f"{engine.settings.queue_prefix}:mcp:ended:{hashlib.sha256(session_id.encode()).hexdigest()[:32]}"


async def has_ended(engine: Engine, session: Session) -> bool:
    """Whether the session was terminated. With Redis unreachable a signed session stays usable."""
    try:
        return bool(await engine.redis.exists(_ended_key(engine, session.id)))
    except (RedisError, OSError) as exc:
        log.warning("MCP session termination not checked: Redis unreachable", extra={"error": str(exc)})
        return False


async def end(engine: Engine, session: Session) -> None:
    """Mark the session ended on every front end (``RedisError`` when Redis is unreachable)."""
    remaining_s = max(1, SESSION_TTL_S - int(time.time() - session.issued_at))
    await engine.redis.set(_ended_key(engine, session.id), b"1", ex=remaining_s)
