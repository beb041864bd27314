"""Pure parts of catalog search: fusion, broad-query detection, package identity, call shapes."""

from __future__ import annotations

import pytest

from service.catalog.callshapes import accessor, call_shape, schema_to_ts
from service.catalog.domains import BuiltinDomains, DomainRow, is_broad
from service.catalog.identity import parse_identity, username_matches
from service.catalog.ranking import (
    LEXICAL_WEIGHT_MAX,
    LEXICAL_WEIGHT_MIN,
    Scored,
    apply_identity_bonus,
    combine_intents,
    export_strength,
    fuse,
    lexical_weight,
)
from service.engine.store import Hit

BUILTINS = BuiltinDomains.of([DomainRow(d, "", 1, (), "builtin") for d in ("email", "jobs", "packages")])


def _hit(key: str, score: float) -> Hit:
    return Hit(id=key, score=score, payload={"key": key, "kind": "capability", "entity_id": key, "terms": key})


def test_fusion_keeps_the_model_order_and_lets_lexical_break_near_ties() -> None:
    dense = [_hit("a", 0.62), _hit("b", 0.60), _hit("c", 0.30)]
    lexical = [_hit("b", 8.0), _hit("d", 4.0)]
    weight = lexical_weight(dense, lexical, ["b"])
    assert weight == pytest.approx(LEXICAL_WEIGHT_MAX)  # the best lexical hit holds every query term
    fused = {s.payload["key"]: s.score for s in fuse(dense, lexical, ["b"])}
    assert fused["b"] == pytest.approx(0.60 + weight) and fused["a"] == pytest.approx(0.62)
    assert fused["d"] == pytest.approx(0.30 + weight * 0.5)  # not in the dense top-K: its floor
    assert [s.payload["key"] for s in fuse([], lexical)] == ["b", "d"]  # lexical only: BM25 alone


def test_the_lexical_weight_follows_how_much_of_the_query_the_best_lexical_hits_hold() -> None:
    dense = [_hit("a", 0.6)]
    lexical = [Hit(id="x", score=5.0, payload={"key": "x", "terms": "weather forecast city"})]
    assert lexical_weight(dense, lexical, ["weather", "forecast"]) == pytest.approx(LEXICAL_WEIGHT_MAX)
    assert lexical_weight(dense, lexical, ["weather", "stock", "price", "news"]) == pytest.approx(
        LEXICAL_WEIGHT_MIN + (LEXICAL_WEIGHT_MAX - LEXICAL_WEIGHT_MIN) * 0.25
    )
    assert lexical_weight(dense, [], ["weather"]) == pytest.approx(LEXICAL_WEIGHT_MIN)


def test_each_intents_best_hit_reaches_the_top_of_the_combined_list() -> None:
    """The whole request leans to news; the stock intent's best hit still ranks in the first two."""
    whole = [Scored({"key": k}, s, 0.0, s) for k, s in (("news", 0.7), ("blog", 0.6), ("weather", 0.5), ("stock", 0.4))]
    news = [Scored({"key": k}, s, 0.0, s) for k, s in (("news", 0.8), ("blog", 0.6))]
    stock = [Scored({"key": k}, s, 0.0, s) for k, s in (("stock", 0.5), ("bank", 0.45))]
    combined = combine_intents(whole, [("latest news", news), ("stock price", stock)])
    assert [h.payload["key"] for h in combined[:2]] == ["news", "stock"]
    assert combined[1].extras["intents"] == ["stock price"]
    assert [h.payload["key"] for h in combined].index("bank") < [h.payload["key"] for h in combined].index("weather")


def test_identity_bonus_lifts_the_entity_the_query_names() -> None:
    named = Scored({"entity_id": "dropbox", "name_leaf": "dropbox"}, 0.3, 0.0, 0.3)
    other = Scored({"entity_id": "fileSync"}, 0.6, 0.0, 0.6)
    ranked = [other, named]
    apply_identity_bonus(ranked, "Dropbox")
    assert ranked[0] is named and named.extras["identity"] is True


def test_export_strength_by_query_coverage() -> None:
    export = Scored({"identity_terms": "bondareashade bond area shade open close"}, None, 0.5, 0.5)
    assert export_strength(export, ["bond", "area", "shade"]) == "strong"
    assert export_strength(export, ["shade", "house", "light"]) == "medium"
    assert export_strength(export, ["weather"]) == "weak"


@pytest.mark.parametrize(
    ("query", "broad"),
    [
        ("", True),
        ("email", True),
        ("Jobs", True),
        ("what can you do with email", True),
        ("what can kody do", True),
        ("list all capabilities", True),
        ("show me my packages", True),
        ("send an email to Kent", False),
        ("schedule a job every night", False),
        ("weather", False),
    ],
)
def test_broad_queries_are_discovery_words_and_domain_ids_only(query: str, broad: bool) -> None:
    assert is_broad(query, BUILTINS) is broad


def test_a_bare_mcp_domain_id_is_broad_only_when_the_caller_has_it() -> None:
    assert is_broad("mcp:home", BUILTINS, "mcp:home") is True
    assert is_broad("mcp:home", BUILTINS, None) is False


@pytest.mark.parametrize(
    ("query", "ident", "form", "username"),
    [
        ("550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000", "uuid", None),
        ("home-controls", "home-controls", "name", None),
        ("@alice/home-controls", "@alice/home-controls", "name", None),
        ("https://kody.dev/account/packages/abc-123", "abc-123", "account-url", None),
        ("/account/packages/abc-123", "abc-123", "account-url", None),
        ("https://kody.dev/@alice/home-controls", "home-controls", "profile-url", "alice"),
        ("https://alice.kody.app/home-controls", "home-controls", "app-url", "alice"),
        ("https://alice.kody.app/packages/home-controls", "home-controls", "app-url", "alice"),
    ],
)
def test_package_identity_forms(query: str, ident: str, form: str, username: str | None) -> None:
    parsed = parse_identity(query)
    assert parsed is not None and (parsed.ident, parsed.form, parsed.username) == (ident, form, username)


def test_ordinary_queries_are_not_identities_and_urls_need_the_owner() -> None:
    assert parse_identity("send an email") is None and parse_identity("https://example.com/") is None
    parsed = parse_identity("/@bob/home-controls")
    assert parsed is not None and not username_matches(parsed, "alice", "alice") and username_matches(parsed, "bob", None)


def test_call_shapes_and_types_from_json_schema() -> None:
    tool = {"server": "home", "tool": "set-pin", "input_schema": {"type": "object", "properties": {"pin": {"type": "string"}, "tries": {"type": "integer"}}, "required": ["pin"]}}
    assert accessor(tool, runtime="kody") == 'kody.mcp["home"]["set-pin"]'
    assert call_shape(tool, runtime="kody") == 'kody.mcp["home"]["set-pin"](params: { pin: string; tries?: number })'
    assert accessor({"entity_id": "emailSend"}, runtime="kody") == "kody.emailSend"
    assert accessor({"entity_id": "emailSend"}, runtime="acme") == "acme.emailSend"
    assert schema_to_ts({"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}}) == "Array<string | null>"
    long_shape = call_shape({"entity_id": "x", "input_type": "{ " + "a: string; " * 100 + "}"}, runtime="kody", limit=60)
    assert len(long_shape) <= 60 and long_shape.endswith("…)")
