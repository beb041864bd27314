"""The test callers: one secret, one function for a caller's headers, and the callers most tests use.

A caller is the ``Authorization`` header of a token minted with the tests' secret. ``ALICE`` and
``BOB`` are users of two orgs, ``ADMIN`` the operator; the named variants below give the same people
(or a fuzzer, a fault test's searcher) other claims, each defined once here. A test that needs a
claim set of its own (a plan, a team, no org) builds it with ``auth(sub, **claims)``; ``forged``
signs with a secret the service does not hold.
"""

from __future__ import annotations

from typing import Any

from service.auth import Caller, mint_token, verify_token

TEST_SECRET = "test-secret-for-agentsearch-tests-0123456789"
# A secret no test service holds: a token signed with it is forged.
OTHER_SECRET = "another-secret-that-is-long-enough-0123456789"


def token_for(sub: str = "alice", *, secret: str = TEST_SECRET, **claims: Any) -> str:
    """A bearer token for a caller with these claims (org, teams, plan, admin), signed with the
    tests' secret unless ``secret`` names another (a data directory's generated one)."""
    return mint_token(secret, sub=sub, **claims)


def auth(sub: str = "alice", *, secret: str = TEST_SECRET, **claims: Any) -> dict[str, str]:
    """Authorization header for a caller with these claims (org, teams, plan, admin)."""
    return {"Authorization": f"Bearer {token_for(sub, secret=secret, **claims)}"}


def forged(sub: str = "alice", **claims: Any) -> dict[str, str]:
    """Authorization header of a well-formed, live token signed with a secret the service does not hold."""
    return auth(sub, secret=OTHER_SECRET, **claims)


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
# Alice in acme's team "sales" (the team instances the action tests write are "sales"'s).
SALES_ALICE = auth("alice", org="acme", teams=("sales",))
# Carol of acme, in no team.
CAROL = auth("carol", org="acme")
# Bob in a team "eng" of his own org: the name of Alice's team, another tenant.
BOB_ENG = auth("bob", org="bobco", teams=("eng",))
# A max-plan user of no org, whose searches no rate limit cuts short in the fault tests.
SEARCHER = auth("searcher", plan="max")
# The schema fuzzer's user (an org and a team, so every owner kind is reachable) and admin, on the
# max plan.
FUZZER = auth("fuzzer", org="fuzzorg", teams=("fuzzteam",), plan="max")
FUZZ_ADMIN = auth("fuzzroot", admin=True, plan="max")
