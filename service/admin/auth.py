"""Who may use the dashboard: an admin token from the login form (in a cookie) or a bearer header, and CSRF.

The auth middleware lets every ``/admin`` path through, so every dashboard handler calls
``require_admin`` itself. The cookie holds the admin's JWT (the same token the API takes), is
``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (no cross-site request carries it),
scoped to ``/admin`` and ``Secure`` over HTTPS. Every state-changing request authenticated by the
cookie must also carry the CSRF token: an HMAC of the cookie's token under the service secret,
rendered into each form (``csrf`` field) and the page (``X-CSRF-Token`` header for fetch). A
bearer-authenticated request needs none: a browser never attaches that header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

import jwt
from aiohttp import web

from service.auth import Caller, bearer_token, verify_token_for
from service.errors import Forbidden, Unauthorized
from service.state import ENGINE

COOKIE = "agentsearch_admin"
COOKIE_PATH = "/admin"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
# Where ``require_admin`` leaves the admin's name on the request, for the access log.
ADMIN_SUB = web.RequestKey("admin_sub", str)
# A login lasts at most this long (less when the token expires sooner).
SESSION_MAX_S = 12 * 3600


@dataclass(frozen=True)
class AdminSession:
    """An authenticated admin and how it came: ``cookie`` sessions need the CSRF token to act."""

    caller: Caller
    token: str
    via_cookie: bool

    def csrf_token(self, secret: str) -> str:
        return csrf_for(secret, self.token)


def csrf_for(secret: str, token: str) -> str:
    return hmac.new(secret.encode(), b"agentsearch-admin-csrf\x00" + token.encode(), hashlib.sha256).hexdigest()[:40]


def verify_admin_token(request: web.Request, token: str) -> Caller:
    """The admin of ``token``; 401 for a bad token, 403 for a valid non-admin one."""
    engine = request.app[ENGINE]
    caller = verify_token_for(engine.settings, engine.jwt_secret, token)  # the API's verification, exactly
    if not caller.admin:
        raise Forbidden("the admin dashboard and API need an admin token (claim admin: true)")
    return caller


def require_admin(request: web.Request) -> AdminSession:
    """The request's admin, from ``Authorization: Bearer`` or else the login cookie."""
    header = request.headers.get("Authorization")
    if header:
        token = bearer_token(header)
        session = AdminSession(verify_admin_token(request, token), token, via_cookie=False)
    else:
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            raise Unauthorized("log in at /admin/login, or send 'Authorization: Bearer <admin token>'", headers={"WWW-Authenticate": "Bearer"})
        session = AdminSession(verify_admin_token(request, cookie), cookie, via_cookie=True)
    request[ADMIN_SUB] = session.caller.sub
    return session


async def require_admin_action(request: web.Request) -> AdminSession:
    """``require_admin`` plus, for a cookie session, a valid CSRF token and a same-origin request."""
    session = require_admin(request)
    if session.via_cookie:
        check_same_origin(request)
        sent = request.headers.get(CSRF_HEADER)
        if sent is None and request.content_type in {"application/x-www-form-urlencoded", "multipart/form-data"}:
            sent = str((await request.post()).get(CSRF_FIELD) or "")
        expected = session.csrf_token(request.app[ENGINE].jwt_secret)
        if not sent or not hmac.compare_digest(sent, expected):
            raise Forbidden("missing or wrong CSRF token: send the page's token in the csrf field or the X-CSRF-Token header")
    return session


def check_same_origin(request: web.Request) -> None:
    """Refuse a request whose ``Origin`` names another site (browsers send it on every POST)."""
    origin = request.headers.get("Origin")
    if origin and origin != "null" and origin.split("://", 1)[-1] != request.host:
        raise Forbidden(f"cross-site request refused (Origin {origin} is not this dashboard's)")


def set_login_cookie(request: web.Request, response: web.StreamResponse, token: str) -> None:
    max_age = SESSION_MAX_S
    exp = jwt.decode(token, options={"verify_signature": False}).get("exp")  # verified already; only read
    if isinstance(exp, (int, float)):
        max_age = max(1, min(max_age, int(exp - time.time())))
    response.set_cookie(
        COOKIE,
        token,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )


def clear_login_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path=COOKIE_PATH)
