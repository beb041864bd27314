"""Exact package identity in a query: a UUID, a name leaf, or a URL copied from an open package page or app.

Recognized forms:

    550e8400-e29b-41d4-a716-446655440000          package UUID
    home-controls | @alice/home-controls          name leaf / scoped name
    /account/packages/:packageId                  current-origin account page (any origin)
    /@username/:name                              owner-matching profile page
    https://{username}.<app host>/{package-name}  per-user package-app subdomain
    https://{username}.<app host>/packages/{name} legacy path on the same host

The username of a URL must be the caller's (its ``sub``) or the package's name scope, so a URL of
someone else's page never resolves to the caller's package of the same name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from service.catalog.lookup import looks_like_uuid

_LEAF = re.compile(r"^(?:@[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")


@dataclass(frozen=True)
class IdentityQuery:
    """What a query names: a package ``ident`` (id or name), and the URL's username when it must match."""

    ident: str
    form: str  # uuid | name | account-url | profile-url | app-url
    username: str | None = None


def parse_identity(query: str) -> IdentityQuery | None:
    """The package identity a one-token query names, or None for an ordinary query."""
    text = query.strip()
    if not text or any(c.isspace() for c in text):
        return None
    if looks_like_uuid(text):
        return IdentityQuery(text, "uuid")
    if "/" in text and (text.startswith(("http://", "https://", "/"))):
        return _from_url(text)
    if _LEAF.match(text):
        return IdentityQuery(text, "name")
    return None


def _from_url(text: str) -> IdentityQuery | None:
    parts = urlsplit(text)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) == 3 and segments[:2] == ["account", "packages"]:
        return IdentityQuery(segments[2], "account-url")
    if len(segments) >= 2 and segments[0].startswith("@") and len(segments[0]) > 1:
        return IdentityQuery(segments[1], "profile-url", segments[0][1:])
    host = parts.hostname or ""
    labels = host.split(".")
    if parts.scheme in ("http", "https") and len(labels) >= 3:
        username = labels[0]
        if len(segments) == 1:
            return IdentityQuery(segments[0], "app-url", username)
        if len(segments) == 2 and segments[0] == "packages":
            return IdentityQuery(segments[1], "app-url", username)
    return None


def username_matches(identity: IdentityQuery, caller_sub: str, name_scope: str | None) -> bool:
    if identity.username is None:
        return True
    wanted = identity.username.lower()
    return wanted == caller_sub.lower() or (name_scope is not None and wanted == name_scope.lower())
