"""Caller identity: HS256 JWTs signed with the service secret, the caller's tenants, and dev tokens.

Claims: ``sub`` (user id), ``org``, ``teams`` (list), ``plan`` (free | standard | pro | max), ``admin``,
and ``exp`` (required: every token expires, at most ``jwt_max_ttl_s`` after it was issued).
A caller sees the ``global`` tenant plus what its user, org and teams own.

Tenant keys: ``global``, ``user:<sub>``, ``org:<org>`` and ``team:<org>/<team>``. A team belongs to
its org: two orgs' teams of the same name are two tenants, so a team key always carries the org
(``team_tenant`` is the one rule every surface, index and Redis key uses). A token with teams but
no org gets no team tenant, and writing as one of its teams is refused: the team cannot be tied to
an org. Keys of the old form ``team:<team>`` (no org) are visible to nobody until
``agentsearch reindex --team-org <team>=<org>`` re-keys them.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import jwt

from service.errors import Forbidden, Unauthorized, ValidationError
from service.fileonce import create_once

if TYPE_CHECKING:
    from service.settings import Settings

ALGORITHM = "HS256"
SECRET_FILE = "jwt-secret"
GLOBAL_TENANT = "global"
TEAM_PREFIX = "team:"
# The longest a token may live (``jwt_max_ttl_s``'s default): a leaked token dies within it.
DEFAULT_MAX_TTL_S = 30 * 24 * 3600


class Plan(StrEnum):
    FREE = "free"
    STANDARD = "standard"
    PRO = "pro"
    MAX = "max"

    @property
    def paid(self) -> bool:
        return self is not Plan.FREE


# ---- tenant keys ------------------------------------------------------------------------------------


def _quote(part: str, *, slash: bool) -> str:
    """``part`` with ``%`` and ``|`` (the record keys' separator) escaped, and ``/`` too for an org,
    so the first ``/`` of a team key always ends the org and no team key can pose as another's."""
    quoted = part.replace("%", "%25").replace("|", "%7C")
    return quoted.replace("/", "%2F") if slash else quoted


def _unquote(text: str) -> str:
    return re.sub(r"%(25|7C|7c|2F|2f)", lambda m: {"25": "%", "7c": "|", "2f": "/"}[m.group(1).lower()], text)


def team_tenant(org: str, team: str) -> str:
    """The tenant key of team ``team`` of org ``org``: ``team:<org>/<team>``."""
    return f"{TEAM_PREFIX}{_quote(org, slash=True)}/{_quote(team, slash=False)}"


def split_team_tenant(tenant: str) -> tuple[str, str] | None:
    """(org, team) of a team tenant key; None for any other key, the old form ``team:<team>`` included."""
    if not tenant.startswith(TEAM_PREFIX):
        return None
    org, slash, team = tenant[len(TEAM_PREFIX) :].partition("/")
    if not slash or not org or not team:
        return None
    return _unquote(org), _unquote(team)


def is_legacy_team_tenant(tenant: str) -> bool:
    """A team key of the old form ``team:<team>``, which names no org (stored before teams were per org)."""
    return tenant.startswith(TEAM_PREFIX) and split_team_tenant(tenant) is None


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
    def org_tenant(self) -> str | None:
        return f"org:{self.org}" if self.org else None

    @property
    def team_tenants(self) -> tuple[str, ...]:
        """The tenant keys of the caller's teams, each within its org; none without an org claim."""
        if not self.org:
            return ()
        return tuple(team_tenant(self.org, team) for team in self.teams)

    @property
    def tenants(self) -> tuple[str, ...]:
        """Every tenant key whose records this caller may see, ``global`` first."""
        keys = [GLOBAL_TENANT, self.user_tenant]
        if self.org:
            keys.append(f"org:{self.org}")
        keys.extend(self.team_tenants)
        return tuple(keys)

    def team_owner_tenant(self, name: str) -> str | None:
        """The tenant a caller-facing team name stands for; None when it is not the caller's to name.

        ``name`` is one of the caller's teams (meaning that team of the caller's org) or, for an
        admin, ``<org>/<team>`` (any org's team) or a bare team of the admin's own org.
        ``ValidationError`` when the caller's team cannot be tied to an org.
        """
        if name in self.teams:
            if not self.org:
                raise ValidationError(f"team {name!r} needs a token with an org claim: a team belongs to its org")
            return team_tenant(self.org, name)
        if not self.admin:
            return None
        org, slash, team = name.partition("/")
        if slash and org and team:
            return team_tenant(_unquote(org), team)
        if self.org:
            return team_tenant(self.org, name)
        raise ValidationError(f"team {name!r}: name it with its org, as <org>/<team> (a team belongs to its org)")

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("this operation needs an admin token (claim admin: true)")


# ---- the dev secret --------------------------------------------------------------------------------


def load_or_create_secret(data_dir: Path) -> str:
    """The dev secret of ``data_dir``: generated once (mode 0600) and reused after."""
    path = data_dir / SECRET_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    create_once(path, secrets.token_urlsafe(48), mode=0o600)
    return path.read_text().strip()


# ---- minting -----------------------------------------------------------------------------------------


def mint_token(
    secret: str,
    *,
    sub: str,
    org: str | None = None,
    teams: tuple[str, ...] = (),
    plan: str = "free",
    admin: bool = False,
    ttl_s: int = DEFAULT_MAX_TTL_S,
    audience: str | None = None,
    issuer: str | None = None,
    max_ttl_s: int = DEFAULT_MAX_TTL_S,
) -> str:
    """A signed token for the claims given (the ``agentsearch token`` command).

    ``ValueError`` with the reason for a token the service would refuse or misread: no expiry, a
    lifetime over ``max_ttl_s``, or teams without an org.
    """
    if ttl_s <= 0:
        raise ValueError(f"every token expires: give a lifetime in seconds between 1 and {max_ttl_s} (jwt_max_ttl_s)")
    if ttl_s > max_ttl_s:
        raise ValueError(f"a lifetime of {ttl_s}s is over the maximum of {max_ttl_s}s (jwt_max_ttl_s); tokens this long are refused")
    if teams and not org:
        raise ValueError("teams need an org: a team belongs to its org, so give the org too")
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "teams": list(teams), "plan": Plan(plan).value, "admin": admin, "iat": now, "exp": now + ttl_s}
    if org:
        claims["org"] = org
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


# ---- verifying -------------------------------------------------------------------------------------


# Tokens verified lately, so that a caller's every request does not check its signature again.
VERIFIED_TOKENS_MAX = 4096


class VerifiedTokens:
    """A bounded LRU of verified tokens and their callers. The key is the token with everything its
    verification depended on (the secret, audience, issuer and maximum lifetime), so a rotated
    secret or changed rules verify afresh; an entry ends at the token's ``exp`` (a token past it is
    verified again, and refused)."""

    def __init__(self, maxsize: int = VERIFIED_TOKENS_MAX) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str | None, str | None, int, str], tuple[float, Caller]] = OrderedDict()

    def get(self, key: tuple[str, str | None, str | None, int, str]) -> Caller | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, caller = entry
        if time.time() >= expires_at:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return caller

    def put(self, key: tuple[str, str | None, str | None, int, str], expires_at: float, caller: Caller) -> None:
        self._entries[key] = (expires_at, caller)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


VERIFIED = VerifiedTokens()


def verify_token(
    secret: str,
    token: str,
    *,
    audience: str | None = None,
    issuer: str | None = None,
    max_ttl_s: int = DEFAULT_MAX_TTL_S,
    dev_data_dir: Path | None = None,
) -> Caller:
    """The caller of a valid token; ``Unauthorized`` saying what is wrong otherwise.

    ``dev_data_dir``: the data directory whose generated secret ``secret`` is (unset when the
    operator configured the secret); a signature mismatch then names it, as the likely cause is a
    token minted with another data directory's secret. A token verified before under the same
    secret and rules answers from ``VERIFIED`` until its ``exp``.
    """
    key = (secret, audience, issuer, max_ttl_s, token)
    cached = VERIFIED.get(key)
    if cached is not None:
        return cached
    caller, exp = _verify(secret, token, audience=audience, issuer=issuer, max_ttl_s=max_ttl_s, dev_data_dir=dev_data_dir)
    # exp is at most max_ttl_s from now (checked): the entry never outlives the lifetime rules.
    VERIFIED.put(key, min(exp, time.time() + max_ttl_s), caller)
    return caller


def _verify(
    secret: str, token: str, *, audience: str | None, issuer: str | None, max_ttl_s: int, dev_data_dir: Path | None
) -> tuple[Caller, float]:
    """``verify_token`` without the cache: the caller and the token's ``exp``."""
    try:
        jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        _refuse("malformed token: expected a JWT (three base64url parts, header.payload.signature)")
    required = ["sub", "exp"] + (["aud"] if audience is not None else []) + (["iss"] if issuer is not None else [])
    try:
        # Signature first (PyJWT checks it before any claim), so an unsigned token learns nothing
        # about what the claims should be.
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],  # pinned: never trust the token's own alg header
            audience=audience,
            issuer=issuer,
            options={"require": required, "verify_aud": audience is not None, "verify_iss": issuer is not None},
        )
    except jwt.InvalidTokenError as exc:
        _refuse(_reason(exc, token, dev_data_dir))
    _check_lifetime(claims, max_ttl_s)
    return caller_from_claims(claims), float(claims["exp"])


def verify_token_for(settings: Settings, secret: str, token: str) -> Caller:
    """``verify_token`` under the settings' audience, issuer and maximum lifetime (every entry point uses this)."""
    return verify_token(
        secret,
        token,
        audience=settings.jwt_audience,
        issuer=settings.jwt_issuer,
        max_ttl_s=settings.jwt_max_ttl_s,
        dev_data_dir=None if settings.jwt_secret else settings.data_dir,
    )


def _refuse(message: str) -> NoReturn:
    raise Unauthorized(message, headers={"WWW-Authenticate": "Bearer"}) from None


def _reason(exc: jwt.InvalidTokenError, token: str, dev_data_dir: Path | None) -> str:
    """A short message for PyJWT's exception: what is wrong, never the library's own wording."""
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return f"token not signed with {ALGORITHM}, the only algorithm this service accepts"
    if isinstance(exc, jwt.InvalidSignatureError):
        hint = ""
        if dev_data_dir is not None:
            where = dev_data_dir.resolve()
            hint = (
                f"; this service uses the dev secret of the data directory {where}, so the token was probably "
                f"signed with another data directory's secret: mint one with `agentsearch token --data-dir {where} --sub ...`"
            )
        return "bad signature: the token was not signed with this service's secret" + hint
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "token expired; mint a new one"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        if exc.claim == "exp":
            return "token has no exp claim: every token must expire; mint one with `agentsearch token` (which sets exp)"
        return f"token has no {exc.claim} claim, which this service requires"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "token audience (aud) does not match this service"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "token issuer (iss) does not match this service's"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "token not valid yet: its nbf or iat lies in the future"
    if isinstance(exc, jwt.exceptions.InvalidSubjectError):
        return "invalid token: claim sub must be a non-empty string"
    if isinstance(exc, jwt.InvalidIssuedAtError):
        return "invalid token: claim iat must be a number (seconds since the epoch)"
    if isinstance(exc, jwt.DecodeError):
        return _decode_reason(token)
    return "invalid token: its header or claims are not acceptable"


def _decode_reason(token: str) -> str:
    """A signed token whose payload PyJWT refused: not a JSON object, or a time claim not a number."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return "malformed token: its payload is not a JSON object"
    for claim in ("exp", "nbf", "iat"):
        if claim in claims and (isinstance(claims[claim], bool) or not isinstance(claims[claim], int | float)):
            return f"invalid token: claim {claim} must be a number (seconds since the epoch)"
    return "malformed token: its payload could not be read"


def _check_lifetime(claims: dict[str, Any], max_ttl_s: int) -> None:
    """Refuse a token that lives longer than ``max_ttl_s``: from its ``iat`` when it has one, and from now."""
    exp = float(claims["exp"])
    iat = claims.get("iat")
    if isinstance(iat, int | float) and not isinstance(iat, bool) and exp - float(iat) > max_ttl_s:
        _refuse(f"token lifetime (exp - iat = {int(exp - float(iat))}s) is over this service's maximum of {max_ttl_s}s (jwt_max_ttl_s); mint a shorter-lived one")
    if exp - time.time() > max_ttl_s:
        _refuse(f"token expires more than {max_ttl_s}s from now, over this service's maximum lifetime (jwt_max_ttl_s); mint a shorter-lived one")


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
