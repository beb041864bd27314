"""Markdown for entity detail: slugs, headings (nested, fenced, duplicate), sections, lines, budgets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.catalog.markdown import (
    FragmentNotFound,
    Heading,
    collapse_whitespace,
    fit_or_toc,
    headings,
    line_range,
    parse_line_fragment,
    section,
    slugify,
    split_lines,
    table_of_contents,
)
from service.errors import NotFound

GUIDE = """\
# Package subscriptions

Packages can subscribe to repository events.

## Events

Each event has a name.

### repo.pushed

Fires after a push.

```bash
# not a heading: a shell comment inside a fence
git push
```

### repo.tagged

Fires after a tag.

~~~
## also not a heading
~~~

## Events

A second Events section (duplicate heading).

## Asset URLs & **bold** `code` [link](https://example.com)

Text.

# Appendix

The end.
"""


def test_headings_nested_fenced_and_duplicate() -> None:
    assert headings(GUIDE) == [
        Heading(1, "Package subscriptions", "package-subscriptions", 1),
        Heading(2, "Events", "events", 5),
        Heading(3, "repo.pushed", "repo.pushed", 9),
        Heading(3, "repo.tagged", "repo.tagged", 18),
        Heading(2, "Events", "events-1", 26),
        Heading(2, "Asset URLs & bold code link", "asset-urls--bold-code-link", 30),
        Heading(1, "Appendix", "appendix", 34),
    ]
    for heading in headings(GUIDE):
        assert split_lines(GUIDE)[heading.line - 1].lstrip("#").strip().startswith(heading.text.split()[0][:3])


def test_duplicate_slugs_follow_github() -> None:
    md = "# Foo\n# Foo\n# Foo-1\n# Foo\n"
    # The third heading is literally "Foo-1", already taken, so it becomes foo-1-1; the fourth skips to foo-2.
    assert [h.slug for h in headings(md)] == ["foo", "foo-1", "foo-1-1", "foo-2"]


def test_setext_headings_front_matter_and_non_headings() -> None:
    md = (
        "---\ntitle: Demo\n---\n"  # front matter: its closing --- is no setext underline
        "Intro\n=====\n\n"
        "Usage\n-----\n\n"
        "text\n\n---\n\n"  # a thematic break after a blank line
        "#hashtag is not a heading\n"
        "    # indented code is not a heading\n"
        "####### seven hashes is not a heading\n"
        "## Closing hashes ##\n"
        "- list item\n---\n"
    )
    found = headings(md)
    assert [(h.level, h.text, h.slug, h.line) for h in found] == [
        (1, "Intro", "intro", 4),
        (2, "Usage", "usage", 7),
        (2, "Closing hashes", "closing-hashes", 17),
    ]


def test_unclosed_fence_hides_the_rest() -> None:
    assert [h.slug for h in headings("# A\n```\n# B\n")] == ["a"]
    # A longer closing fence closes; a shorter one does not.
    assert [h.slug for h in headings("````\n```\n# B\n````\n# C\n")] == ["c"]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Asset URLs", "asset-urls"),
        ("repo.pushed", "repo.pushed"),
        ("package_subscriptions", "package_subscriptions"),
        ("Export JSDoc", "export-jsdoc"),
        ("What's new?", "whats-new"),
        ("  Trim me  ", "trim-me"),
        ("C++ & C#", "c--c"),
        ("Ünïcode Straße", "ünïcode-straße"),
        ("日本語 見出し", "日本語-見出し"),
        ("a  b", "a--b"),
        ("!!!", ""),
    ],
)
def test_slugify(heading: str, slug: str) -> None:
    assert slugify(heading) == slug


@given(st.text(max_size=80))
def test_slugify_is_idempotent(text: str) -> None:
    once = slugify(text)
    assert slugify(once) == once
    assert " " not in once


def test_section_stops_at_same_or_higher_level() -> None:
    events = section(GUIDE, "events")
    assert events.startswith("## Events\n\nEach event has a name.")
    assert "### repo.pushed" in events and "### repo.tagged" in events
    assert "## also not a heading" in events  # fenced lines belong to the body
    assert "A second Events section" not in events
    assert section(GUIDE, "repo.pushed").splitlines() == [
        "### repo.pushed",
        "",
        "Fires after a push.",
        "",
        "```bash",
        "# not a heading: a shell comment inside a fence",
        "git push",
        "```",
    ]
    assert section(GUIDE, "events-1").startswith("## Events\n\nA second Events section")
    assert section(GUIDE, "appendix") == "# Appendix\n\nThe end."
    top = section(GUIDE, "package-subscriptions")
    assert "Appendix" not in top and "## Asset URLs" in top


def test_missing_section_names_the_slug_and_neighbours() -> None:
    with pytest.raises(FragmentNotFound) as caught:
        section(GUIDE, "repo.pulled")
    message = caught.value.message
    assert "heading #repo.pulled not found" in message
    assert "#repo.pushed" in message  # the closest slug is offered first
    assert isinstance(caught.value, NotFound) and caught.value.status == 404
    with pytest.raises(FragmentNotFound, match="no headings"):
        section("just text\n", "intro")


def test_parse_line_fragment() -> None:
    assert parse_line_fragment("L165") == (165, 165)
    assert parse_line_fragment("L165-L180") == (165, 180)
    assert parse_line_fragment("L7-L7") == (7, 7)
    assert parse_line_fragment("l165") is None
    assert parse_line_fragment("repo.pushed") is None
    assert parse_line_fragment("L2Cache") is None
    for bad in ("L0", "L10-L5", "L10-5", "L10-", "L0-L3"):
        with pytest.raises(ValueError):
            parse_line_fragment(bad)


NUMBERED = "".join(f"line {n}\n" for n in range(1, 31))


def test_line_range_single_line_has_context() -> None:
    assert line_range(NUMBERED, "L10", context=2).splitlines() == [
        "L8: line 8",
        "L9: line 9",
        "L10: line 10",
        "L11: line 11",
        "L12: line 12",
    ]
    assert line_range(NUMBERED, "L1", context=2).splitlines()[0] == "L1: line 1"
    assert line_range(NUMBERED, "L30", context=5).splitlines()[-1] == "L30: line 30"


def test_line_range_range_is_exact_and_clamped() -> None:
    assert line_range(NUMBERED, "L3-L5").splitlines() == ["L3: line 3", "L4: line 4", "L5: line 5"]
    assert line_range(NUMBERED, "L29-L40").splitlines() == ["L29: line 29", "L30: line 30"]


def test_line_past_the_end_fails() -> None:
    with pytest.raises(FragmentNotFound, match="line 31 is past the end: the file has 30 lines"):
        line_range(NUMBERED, "L31")
    with pytest.raises(FragmentNotFound):
        line_range("", "L1")


def test_line_range_max_chars_cuts_at_whole_lines() -> None:
    out = line_range(NUMBERED, "L1-L30", max_chars=60)
    lines = out.splitlines()
    assert lines[0] == "L1: line 1"
    assert lines[-1].startswith("… lines ") and "open #L" in lines[-1]
    assert all(line.startswith(("L", "…")) for line in lines)


def test_line_range_crlf_and_no_final_newline() -> None:
    assert line_range("a\r\nb\r\nc", "L2-L3") == "L2: b\nL3: c"


def test_table_of_contents_lists_ready_refs() -> None:
    toc = table_of_contents(GUIDE, "guide:package_subscriptions")
    lines = toc.splitlines()
    assert lines[0].startswith("Contents of `guide:package_subscriptions` (36 lines)")
    assert lines[1] == "- Package subscriptions `guide:package_subscriptions#package-subscriptions` L1"
    assert "    - repo.pushed `guide:package_subscriptions#repo.pushed` L9" in lines
    assert "  - Events `guide:package_subscriptions#events-1` L26" in lines


def test_fit_or_toc_whole_when_it_fits() -> None:
    assert fit_or_toc(GUIDE, len(GUIDE), "guide:g") == (GUIDE, False)


def test_fit_or_toc_never_cuts_the_document() -> None:
    big = GUIDE + "\n".join(f"filler line {n} " * 5 for n in range(200))
    text, is_toc = fit_or_toc(big, 2000, "guide:g")
    assert is_toc
    assert "filler" not in text
    assert "`guide:g#repo.pushed`" in text
    assert len(text) <= 2000


def test_fit_or_toc_drops_deep_levels_then_counts_the_rest() -> None:
    md = "\n".join(f"# Chapter {c}\n" + "\n".join(f"## Part {c}.{p}\n\ntext" for p in range(20)) for c in range(20))
    text, is_toc = fit_or_toc(md, 1500, "guide:big")
    assert is_toc and len(text) <= 1500
    assert "`guide:big#chapter-0`" in text and "#part-" not in text  # level 2 dropped, chapters kept
    tiny, _ = fit_or_toc(md, 300, "guide:big")
    assert len(tiny) <= 300 + 80  # the header line is always kept
    assert tiny.splitlines()[-1].endswith("more headings")


def test_fit_or_toc_without_headings_offers_lines() -> None:
    text, is_toc = fit_or_toc("word " * 1000, 100, "package:p#notes.txt")
    assert is_toc
    assert "no headings" in text and "`package:p#notes.txt#L1-L40`" in text


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("{\n  to: string;\n  subject: string\n}", 100, "{ to: string; subject: string }"),
        ("a    b\tc\n\nd", 100, "a b c d"),
        ("abcdefghij", 10, "abcdefghij"),
        ("abcdefghijk", 10, "abcdefghi…"),
        ("abcd efghijk", 6, "abcd…"),
        ("", 5, ""),
    ],
)
def test_collapse_whitespace(text: str, limit: int, expected: str) -> None:
    out = collapse_whitespace(text, limit)
    assert out == expected
    assert len(out) <= limit


def test_collapse_whitespace_rejects_a_zero_limit() -> None:
    with pytest.raises(ValueError):
        collapse_whitespace("abc", 0)
