"""Entity refs: every documented example ref parses to its type, id and fragment; malformed refs fail clearly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.catalog.refs import (
    ENTITY_TYPES,
    MAX_REF_LENGTH,
    EntityRef,
    parse_entity_param,
    parse_ref,
)
from service.errors import InvalidEntityRef

# (ref, type, id, fragment): the documented example refs, one row per ref.
EXAMPLE_REFS = [
    ("guide:package_authoring", "guide", "package_authoring", None),
    ("guide:package_apps#asset-urls", "guide", "package_apps", "asset-urls"),
    ("guide:package_subscriptions#repo.pushed", "guide", "package_subscriptions", "repo.pushed"),
    ("guide:package_authoring#L165", "guide", "package_authoring", "L165"),
    ("guide:package_authoring#L165-L180", "guide", "package_authoring", "L165-L180"),
    ("guide:package_lifecycle", "guide", "package_lifecycle", None),
    ("capability:codingGuideGet", "capability", "codingGuideGet", None),
    ("capability:mcp:linear:create_issue", "capability", "mcp:linear:create_issue", None),
    ("capability:mcp:linear:get_issue", "capability", "mcp:linear:get_issue", None),
    ("capability:mcp:home:set_pin", "capability", "mcp:home:set_pin", None),
    ("integration:github", "integration", "github", None),
    ("mcp-server:home", "mcp-server", "home", None),
    ("mcp-server:mcp:home", "mcp-server", "mcp:home", None),
    ("package:my-package", "package", "my-package", None),
    ("package:home-controls#bond-area-shades", "package", "home-controls", "bond-area-shades"),
    ("package:home-controls#./bond-area-shades", "package", "home-controls", "./bond-area-shades"),
    ("package:home-controls#README.md#export-jsdoc", "package", "home-controls", "README.md#export-jsdoc"),
    ("package:home-controls#src/index.ts#L165", "package", "home-controls", "src/index.ts#L165"),
    ("package:home-controls#src/index.ts#L165-L180", "package", "home-controls", "src/index.ts#L165-L180"),
    ("package:550e8400-e29b-41d4-a716-446655440000", "package", "550e8400-e29b-41d4-a716-446655440000", None),
    ("integration:spotify", "integration", "spotify", None),
    ("secret:githubPat", "secret", "githubPat", None),
    ("guide:oauth", "guide", "oauth", None),
]


@pytest.mark.parametrize(("text", "type_", "id_", "fragment"), EXAMPLE_REFS)
def test_example_refs_parse(text: str, type_: str, id_: str, fragment: str | None) -> None:
    ref = parse_ref(text)
    assert (ref.type, ref.id, ref.fragment) == (type_, id_, fragment)
    assert ref.ref == f"{type_}:{id_}"
    assert ref.full == text
    assert str(ref) == text


def test_fragment_parts_and_line_span() -> None:
    assert parse_ref("package:home-controls#src/index.ts#L165").fragment_parts == ("src/index.ts", "L165")
    assert parse_ref("package:home-controls#src/index.ts#L165").line_span == (165, 165)
    assert parse_ref("guide:package_authoring#L165-L180").line_span == (165, 180)
    assert parse_ref("package:home-controls#README.md#export-jsdoc").line_span is None
    assert parse_ref("guide:package_authoring").fragment_parts == ()
    assert parse_ref("guide:package_authoring").line_span is None


def test_lowercase_l_is_a_heading_slug_not_a_line() -> None:
    ref = parse_ref("guide:package_authoring#l10")
    assert ref.fragment == "l10"
    assert ref.line_span is None


def test_uppercase_l_word_is_not_a_line_anchor() -> None:
    # An export subpath like "L2Cache" starts with L and a digit but is no line anchor.
    assert parse_ref("package:caches#L2Cache").line_span is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "widget:foo",
            "unknown entity type 'widget'; valid types: capability, guide, integration, mcp-server, package, secret",
        ),
        ("Guide:foo", "unknown entity type 'Guide'"),
        ("package_authoring", "expected type:id"),
        ("guide:", "empty id after 'guide:'"),
        ("guide:#intro", "empty id"),
        (":foo", "unknown entity type ''"),
        ("guide:package_authoring#", "empty fragment after '#'"),
        ("package:home-controls#README.md#", "empty fragment after '#'"),
        ("package:home-controls##x", "empty fragment after '#'"),
        ("guide:package authoring", "whitespace or a control character (SPACE)"),
        (" guide:package_authoring", "whitespace"),
        ("guide:package_authoring\n", "whitespace"),
        ("guide:pack\x00age", "control character"),
        ("guide:pack\u200bage", "control character"),
        ("guide:package_authoring#L0", "lines are numbered from 1"),
        ("guide:package_authoring#L10-L5", "the range ends before it starts (use #L5-L10)"),
        ("guide:package_authoring#L10-5", "use #L165 for one line or #L165-L180"),
        ("guide:package_authoring#L10-", "malformed line anchor"),
        ("package:home-controls#src/index.ts#L0", "lines are numbered from 1"),
        ("", "empty entity ref"),
    ],
)
def test_malformed_refs_fail_with_a_clear_message(text: str, needle: str) -> None:
    with pytest.raises(InvalidEntityRef) as caught:
        parse_ref(text)
    assert needle in caught.value.message
    assert caught.value.status == 400
    assert caught.value.code == "invalid_entity"


def test_over_long_ref_fails_and_the_limit_itself_passes() -> None:
    at_limit = "guide:" + "a" * (MAX_REF_LENGTH - len("guide:"))
    assert parse_ref(at_limit).id == "a" * (MAX_REF_LENGTH - 6)
    with pytest.raises(InvalidEntityRef) as caught:
        parse_ref(at_limit + "a")
    assert f"the limit is {MAX_REF_LENGTH}" in caught.value.message
    assert len(caught.value.message) < 200  # the echo of the ref is shortened


def test_non_string_ref_fails() -> None:
    with pytest.raises(InvalidEntityRef, match="must be a string"):
        parse_ref(42)  # type: ignore[arg-type]


# ---- the entity parameter ---------------------------------------------------------------------


def test_entity_param_string() -> None:
    [(text, ref)] = parse_entity_param("mcp-server:mcp:home")
    assert text == "mcp-server:mcp:home"
    assert ref == EntityRef("mcp-server", "mcp:home", None)


def test_entity_param_arrays() -> None:
    parsed = parse_entity_param(["guide:package_authoring", "guide:package_lifecycle"])
    assert [ref for _, ref in parsed] == [
        EntityRef("guide", "package_authoring", None),
        EntityRef("guide", "package_lifecycle", None),
    ]
    pair = parse_entity_param(["capability:mcp:linear:create_issue", "capability:mcp:linear:get_issue"])
    assert [ref.id for _, ref in pair if isinstance(ref, EntityRef)] == [
        "mcp:linear:create_issue",
        "mcp:linear:get_issue",
    ]


def test_entity_param_each_ref_fails_alone() -> None:
    parsed = parse_entity_param(["guide:package_authoring", "widget:x", "guide:a#L0"])
    assert parsed[0] == ("guide:package_authoring", EntityRef("guide", "package_authoring", None))
    assert parsed[1][0] == "widget:x"
    assert isinstance(parsed[1][1], str) and "unknown entity type 'widget'" in parsed[1][1]
    assert isinstance(parsed[2][1], str) and "numbered from 1" in parsed[2][1]


def test_entity_param_single_bad_string_is_an_error_entry_not_a_raise() -> None:
    [(text, error)] = parse_entity_param("nope")
    assert text == "nope" and isinstance(error, str) and "expected type:id" in error


def test_entity_param_stringified_json_array() -> None:
    parsed = parse_entity_param('["guide:package_authoring", "secret:githubPat"]')
    assert [ref for _, ref in parsed] == [EntityRef("guide", "package_authoring"), EntityRef("secret", "githubPat")]


def test_entity_param_ten_refs_pass() -> None:
    refs = [f"integration:provider{i}" for i in range(10)]
    assert len(parse_entity_param(refs)) == 10


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (None, "got NoneType"),
        (7, "got int"),
        ({"ref": "guide:x"}, "got dict"),
        ([], "empty list"),
        ([f"integration:p{i}" for i in range(11)], "lists 11 refs; pass at most 10"),
        (["guide:a", 3], "entity[1] must be a ref string"),
        (["guide:a", None], "got NoneType"),
    ],
)
def test_entity_param_shape_errors_raise(value: object, needle: str) -> None:
    with pytest.raises(InvalidEntityRef) as caught:
        parse_entity_param(value)
    assert needle in caught.value.message


# ---- properties --------------------------------------------------------------------------------

_ID_CHARS = st.characters(
    blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"),
    blacklist_characters="#\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85",
)
_ids = st.text(_ID_CHARS, min_size=1, max_size=40).filter(lambda s: not any(c.isspace() for c in s))
_segment = st.text(_ID_CHARS, min_size=1, max_size=20).filter(
    lambda s: not any(c.isspace() for c in s) and not (s.startswith("L") and s[1:2].isdigit())
)
_line_anchor = st.integers(1, 10_000).flatmap(
    lambda a: st.one_of(st.just(f"L{a}"), st.integers(a, a + 500).map(lambda b: f"L{a}-L{b}"))
)
_fragments = st.one_of(
    st.none(),
    st.lists(_segment, min_size=1, max_size=3).map("#".join),
    st.tuples(st.lists(_segment, max_size=2), _line_anchor).map(lambda t: "#".join([*t[0], t[1]])),
)


@given(type_=st.sampled_from(ENTITY_TYPES), id_=_ids, fragment=_fragments)
def test_parse_ref_round_trips(type_: str, id_: str, fragment: str | None) -> None:
    ref = EntityRef(type_, id_, fragment)
    assert parse_ref(ref.full) == ref
    assert parse_ref(ref.ref) == EntityRef(type_, id_, None)


@given(st.text(max_size=60))
def test_parse_ref_never_raises_anything_but_invalid_entity(text: str) -> None:
    try:
        ref = parse_ref(text)
    except InvalidEntityRef as exc:
        assert exc.message
    else:
        assert ref.full == text
