"""Verified tokens are remembered until their exp, under the secret and rules they were verified with."""

from __future__ import annotations

import time

import pytest

from service.auth import VERIFIED, Caller, Plan, VerifiedTokens, mint_token, verify_token
from service.errors import Unauthorized

SECRET = "token-cache-secret-" + "a" * 32
ROTATED = "token-cache-secret-" + "b" * 32


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    VERIFIED.clear()


def test_a_token_verified_once_answers_from_the_cache_with_the_same_caller() -> None:
    token = mint_token(SECRET, sub="ana", org="acme", teams=("ops",), plan="pro", ttl_s=600)
    first = verify_token(SECRET, token)
    assert len(VERIFIED) == 1
    again = verify_token(SECRET, token)
    assert again is first  # the remembered caller, not a second verification
    assert again == Caller(sub="ana", org="acme", teams=("ops",), plan=Plan.PRO)


def test_a_remembered_token_is_refused_once_its_exp_has_passed() -> None:
    token = mint_token(SECRET, sub="ana", ttl_s=1)
    assert verify_token(SECRET, token).sub == "ana"
    assert len(VERIFIED) == 1
    time.sleep(max(0.0, int(time.time()) + 2 - time.time()))  # past exp (whole seconds)
    with pytest.raises(Unauthorized, match="token expired"):
        verify_token(SECRET, token)
    assert len(VERIFIED) == 0  # the expired entry went


def test_a_rotated_secret_does_not_keep_a_remembered_token_valid() -> None:
    token = mint_token(SECRET, sub="ana", ttl_s=600)
    assert verify_token(SECRET, token).sub == "ana"
    with pytest.raises(Unauthorized, match="bad signature"):
        verify_token(ROTATED, token)
    fresh = mint_token(ROTATED, sub="ana", ttl_s=600)
    assert verify_token(ROTATED, fresh).sub == "ana"
    with pytest.raises(Unauthorized, match="bad signature"):
        verify_token(ROTATED, token)


def test_stricter_rules_verify_a_remembered_token_afresh() -> None:
    token = mint_token(SECRET, sub="ana", ttl_s=3_600)
    assert verify_token(SECRET, token).sub == "ana"
    with pytest.raises(Unauthorized, match="jwt_max_ttl_s"):
        verify_token(SECRET, token, max_ttl_s=60)
    with pytest.raises(Unauthorized, match="aud"):
        verify_token(SECRET, token, audience="agentsearch")


def test_the_cache_is_bounded_and_drops_the_least_recently_used_token() -> None:
    cache = VerifiedTokens(maxsize=2)
    callers = [Caller(sub=name) for name in ("a", "b", "c")]
    keys = [(SECRET, None, None, 60, f"token-{c.sub}") for c in callers]
    far = time.time() + 60
    cache.put(keys[0], far, callers[0])
    cache.put(keys[1], far, callers[1])
    assert cache.get(keys[0]) is callers[0]  # a is now the most recently used
    cache.put(keys[2], far, callers[2])
    assert len(cache) == 2
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is callers[0] and cache.get(keys[2]) is callers[2]
