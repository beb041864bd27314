"""The test callers: one secret, one function for a caller's headers, and the callers most tests use.

A caller is the ``Authorization`` header of a token minted with the tests' secret. ``ALICE`` and
``BOB`` are users of two orgs, ``ADMIN`` the operator; a test that needs another claim set (a plan,
a team, no org) builds it with ``auth(sub, **claims)``.
"""

from __future__ import annotations

from typing import Any

from service.auth import Caller, mint_token, verify_token

TEST_SECRET = "test-secret-for-agentsearch-tests-0123456789"


def token_for(sub: str = "alice", **claims: Any) -> str:
    """A bearer token of the tests' secret for a caller with these claims (org, teams, plan, admin)."""
    return mint_token(TEST_SECRET, sub=sub, **claims)


def auth(sub: str = "alice", **claims: Any) -> dict[str, str]:
    """Authorization header for a caller with these claims (org, teams, plan, admin)."""
    return {"Authorization": f"Bearer {token_for(sub, **claims)}"}


def token_of(caller: dict[str, str]) -> str:
    """The bearer token of a caller's headers (for the MCP clients and ``--token``)."""
    return caller["Authorization"].removeprefix("Bearer ")


def caller_of(caller: dict[str, str]) -> Caller:
    """The service's ``Caller`` for these headers, as a request carrying them is served."""
    return verify_token(TEST_SECRET, token_of(caller))


ALICE = auth("alice", org="acme", teams=("eng",))
BOB = auth("bob", org="bobco")
ADMIN = auth("root", admin=True)
# The same two users on the pro plan: for tests whose calls outrun the free plan's rate limits, or
# that want a paid plan's answers.
ALICE_PRO = auth("alice", org="acme", teams=("eng",), plan="pro")
BOB_PRO = auth("bob", org="bobco", plan="pro")
