"""Caller identity: HS256 JWTs signed with the service secret, the caller's tenants, and dev tokens.

Claims: ``sub`` (user id), ``org``, ``teams`` (list), ``plan`` (free | standard | pro | max), ``admin``.
A caller sees the ``global`` tenant plus what its user, org and teams own.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import jwt

from service.errors import Forbidden, Unauthorized

ALGORITHM = "HS256"
SECRET_FILE = "jwt-secret"
GLOBAL_TENANT = "global"


class Plan(StrEnum):
    FREE = "free"
    STANDARD = "standard"
    PRO = "pro"
    MAX = "max"

    @property
    def paid(self) -> bool:
        return self is not Plan.FREE


@dataclass(frozen=True)
class Caller:
    """Who is calling, from a verified token."""

    sub: str
    org: str | None = None
    teams: tuple[str, ...] = ()
    plan: Plan = Plan.FREE
    admin: bool = False

    @property
    def user_tenant(self) -> str:
        return f"user:{self.sub}"

    @property
    def tenants(self) -> tuple[str, ...]:
        """Every tenant key whose records this caller may see, ``global`` first."""
        keys = [GLOBAL_TENANT, self.user_tenant]
        if self.org:
            keys.append(f"org:{self.org}")
        keys.extend(f"team:{team}" for team in self.teams)
        return tuple(keys)

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("this operation needs an admin token (claim admin: true)")


def load_or_create_secret(data_dir: Path) -> str:
    """The dev secret of ``data_dir``: generated once (mode 0600) and reused after."""
    path = data_dir / SECRET_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(48)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(secret)
    tmp.chmod(0o600)
    try:
        # link() fails if another process created it first; then that one wins.
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def mint_token(
    secret: str,
    *,
    sub: str,
    org: str | None = None,
    teams: tuple[str, ...] = (),
    plan: str = "free",
    admin: bool = False,
    ttl_s: int = 30 * 24 * 3600,
    audience: str | None = None,
) -> str:
    """A signed token for the claims given (the ``agentsearch token`` command)."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "teams": list(teams), "plan": Plan(plan).value, "admin": admin, "iat": now}
    if org:
        claims["org"] = org
    if ttl_s > 0:
        claims["exp"] = now + ttl_s
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_token(secret: str, token: str, *, audience: str | None = None) -> Caller:
    """The caller of a valid token; ``Unauthorized`` with the reason otherwise."""
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],  # pinned: never trust the token's own alg header
            audience=audience,
            options={"require": ["sub"], "verify_aud": audience is not None},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("token expired; mint a new one") from None
    except jwt.InvalidAudienceError:
        raise Unauthorized("token audience does not match this service") from None
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"invalid token: {exc}") from None
    return caller_from_claims(claims)


def caller_from_claims(claims: dict[str, Any]) -> Caller:
    sub, org, teams, plan = claims.get("sub"), claims.get("org"), claims.get("teams", []), claims.get("plan", "free")
    if not isinstance(sub, str) or not sub:
        raise Unauthorized("invalid token: claim sub must be a non-empty string")
    if org is not None and (not isinstance(org, str) or not org):
        raise Unauthorized("invalid token: claim org must be a non-empty string")
    if not isinstance(teams, list) or not all(isinstance(t, str) and t for t in teams):
        raise Unauthorized("invalid token: claim teams must be a list of strings")
    try:
        parsed_plan = Plan(plan)
    except ValueError:
        raise Unauthorized("invalid token: claim plan must be free, standard, pro or max") from None
    admin = claims.get("admin", False)
    if not isinstance(admin, bool):
        raise Unauthorized("invalid token: claim admin must be a boolean")
    return Caller(sub=sub, org=org, teams=tuple(teams), plan=parsed_plan, admin=admin)


def bearer_token(header: str | None) -> str:
    if not header:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
    return token.strip()
