"""Regex matching without a bad case: a pattern's scan plan (the literals every match holds, and
whether a match can hold a newline) and the leading-repeat rewrite change how much text ``re``
reads, never which lines match."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.code.matchers import MatcherPool
from service.code.pattern import regex_compile
from service.code.prefilter import ScanPlan, scan_plan
from service.code.rematch import Guide, guided_line_matches, line_matches, scan_compile

PIECES = st.sampled_from(
    [
        "TODO", "todo", "Error", "raise ", "self", r"\.", "=", " ", "None", r"\b", r"\B", "^", "$", r"\w+", r"\w*", r"\s", r"\s*",
        r"\d{2}", "[0-9]{4}", "-", ".", ".*", "(?s:.)", r"[^x]", "[^\\n]", r"\n", r"\W", r"\D", r"(?=No)", r"(?!ne)", r"(?<=\.)",
        r"(?<!s)", "(?:TODO|FIXME)", "(a|bc)", "(?i:err)", r"\Z", r"\A", "[A-Z]", "x?", "(?>ab|a)", "e{2,3}", "e{1,}?", "e{2}+",
    ]
)  # fmt: skip
ALPHABET = "abex TODOtodoErrorraise self.=None-0123456789\n\tFIXME_"


def plain(pattern: re.Pattern[str], text: str, limit: int) -> list[tuple[int, str]]:
    return line_matches(pattern, text, limit)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(PIECES, min_size=1, max_size=5), texts=st.lists(st.text(alphabet=ALPHABET, max_size=80), min_size=1, max_size=3), ignore_case=st.booleans(), limit=st.sampled_from([1, 2, 50]))
def test_a_planned_scan_answers_the_same_lines_as_a_plain_one(pieces: list[str], texts: list[str], ignore_case: bool, limit: int) -> None:
    compiled = regex_compile("".join(pieces), ignore_case)
    plan = scan_plan(compiled.pattern, compiled.flags)
    guide = Guide.of(plan.as_dict()) if plan is not None else None
    faster = scan_compile(compiled.pattern, compiled.flags)
    for text in [*texts, "\n".join(texts), "TODO raise self.x = None\nError-2024-01 FIXME\n"]:
        assert line_matches(faster, text, limit, guide) == plain(compiled, text, limit), (compiled.pattern, text, plan)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"None\Z", "a = None\nb = None"),  # the end of the text, not of each line
        (r"None\Z", "a = None\nb = None\n"),
        (r"None$", "a = None\nb = None\n"),
        (r"\bTODO\b", "TODO\nxTODO\n TODO_\n(TODO)"),
        (r"(?<=\.)None\b", "x.None\n.\nNone"),
        (r"^[ \t]*raise \w+Error", "  raise ValueError\n\nraise X\nraise KeyError"),
        (r"TODO(?!\w)", "TODO\nTODOs\nTODO"),
    ],
)
def test_guided_lines_at_line_and_text_ends(pattern: str, text: str) -> None:
    compiled = regex_compile(pattern)
    plan = scan_plan(compiled.pattern, compiled.flags)
    assert plan is not None and plan.single_line
    assert line_matches(compiled, text, 50, Guide.of(plan.as_dict())) == plain(compiled, text, 50)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), pieces=st.lists(PIECES, min_size=1, max_size=4), ignore_case=st.booleans())
def test_every_match_holds_a_planned_literal_and_no_newline_when_single_line(data: st.DataObject, pieces: list[str], ignore_case: bool) -> None:
    compiled = regex_compile("".join(pieces), ignore_case)
    plan = scan_plan(compiled.pattern, compiled.flags)
    if plan is None:
        return
    finder = re.compile("|".join(map(re.escape, plan.literals)), re.IGNORECASE if plan.ignore_case else 0)
    for _ in range(4):
        matched = data.draw(st.from_regex(compiled, fullmatch=True))
        found = compiled.search(matched)
        assert found is not None
        held = found.group(0)
        assert finder.search(held), (compiled.pattern, held, plan)
        if plan.single_line:
            assert "\n" not in held, (compiled.pattern, held)


@pytest.mark.parametrize(
    ("pattern", "flags", "expected"),
    [
        (r"\bTODO\b", 0, ScanPlan(("TODO",), False, True)),
        (r"raise \w+Error", 0, ScanPlan(("raise ",), False, True)),
        (r"self\.\w+ = None", 0, ScanPlan((" = None",), False, True)),
        (r"(?s)def.*return", 0, ScanPlan(("return",), False, False)),
        (r"def\s+main", 0, ScanPlan(("main",), False, False)),
        (r"TODO|FIXME", 0, ScanPlan(("FIXME", "TODO"), False, True)),
        (r"todo", re.IGNORECASE, ScanPlan(("todo",), True, True)),
        (r"(?i:todo)xyz", 0, ScanPlan(("xyz",), False, True)),  # the letters matched ignoring case: no exact literal
        (r"[^\n]*Error", 0, ScanPlan(("Error",), False, True)),
        (r"[0-9]{4}-[0-9]{2}", 0, ScanPlan(("-",), False, True)),  # nothing longer is required
        (r"[0-9]{4}\d", 0, None),
    ],
)
def test_scan_plans_of_typical_patterns(pattern: str, flags: int, expected: ScanPlan | None) -> None:
    compiled = re.compile(pattern, flags | re.MULTILINE)
    assert scan_plan(compiled.pattern, compiled.flags) == expected


@pytest.mark.parametrize(
    "pattern",
    [r"[0-9]{4}-[0-9]{2}", r"\d{2,}", r"a+?b", r"[xy]{1,3}+z", r"x{2}", r"(x){2}", r"\w+Error", r"[ \t]+$", r".*Error", r"a+?", r"\w*y", r"[^\n]+z", r"(?i)[A-Z]+z", r"\s+x"],
)
def test_the_leading_repeat_rewrite_finds_the_same_lines(pattern: str) -> None:
    """Cut and run-start lookbehind alike: the same lines, from the whole text and from each line's
    start, though ``a+?`` now matches once per run of ``a`` where it matched at every ``a``."""
    text = "2024-01-02 xxz aab x xx 99 ValueError yyyz  \n\taaa\t\n  \n" * 3 + "y ValueError"
    compiled = re.compile(pattern, re.MULTILINE)
    faster = scan_compile(compiled.pattern, compiled.flags)
    assert line_matches(faster, text, 100) == line_matches(compiled, text, 100) != []
    starts = [0, *(index + 1 for index, char in enumerate(text) if char == "\n")]
    assert [bool(faster.search(text, start, text.find("\n", start) + 1 or len(text))) for start in starts] == [
        bool(compiled.search(text, start, text.find("\n", start) + 1 or len(text))) for start in starts
    ]
    assert faster.groups == compiled.groups


def test_a_leading_run_is_tried_at_its_start_alone() -> None:
    """The lookbehind is there: a match no longer starts inside a run of its leading class."""
    assert [m.start() for m in scan_compile(r"a+?", re.MULTILINE).finditer("aaa ba")] == [0, 5]
    assert [m.start() for m in scan_compile(r"\s+x", re.MULTILINE).finditer("  \n x")] == [0]  # a newline: left as it was


def test_a_file_without_a_planned_literal_is_not_matched_and_guided_lines_are_numbered_as_plain() -> None:
    text = "x = 1\n# TODO: one\nTODOS = []\n\n  # a TODO\n"
    compiled = regex_compile(r"\bTODO\b")
    plan = scan_plan(compiled.pattern, compiled.flags)
    assert plan is not None and plan.single_line
    guide = Guide.of(plan.as_dict())
    assert line_matches(compiled, text, 10, guide) == [(2, "# TODO: one"), (5, "  # a TODO")] == plain(compiled, text, 10)
    multi = regex_compile(r"(?s)begin.*end")
    multi_plan = scan_plan(multi.pattern, multi.flags)
    assert multi_plan is not None and not multi_plan.single_line
    assert line_matches(multi, "no such word\n", 10, Guide.of(multi_plan.as_dict())) == []
    assert line_matches(multi, "x\nbegin\n\nend\n", 10, Guide.of(multi_plan.as_dict())) == [(2, "begin")]


@pytest.fixture
async def pool() -> AsyncIterator[MatcherPool]:
    matchers = MatcherPool(size=1)
    yield matchers
    matchers.close()


async def test_the_matching_process_answers_the_same_with_and_without_a_plan(pool: MatcherPool) -> None:
    """A request without ``plan`` gets one from the pool; ``plan: None`` scans every line plainly."""
    files = [
        {"path": "a.py", "text": "import os\n# TODO later\nraise ValueError('2024-01')\n"},
        {"path": "b.py", "text": "nothing\n"},
        {"path": "c.py", "text": "class FooException(Exception):\n    self.x = None  # TODO\n"},
    ]
    for pattern in (r"\bTODO\b", r"raise \w+Error", r"class \w+Exception", r"self\.\w+ = None", r"[0-9]{4}-[0-9]{2}", r"(?s)import.*TODO"):
        compiled = regex_compile(pattern)
        request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": "/nonexistent", "max_bytes": 1 << 20, "max_matches": 50, "files": files}
        planned = await pool.run(request, time.monotonic() + 10)
        unplanned = await pool.run(dict(request, plan=None), time.monotonic() + 10)
        assert planned.error is None and planned.found == unplanned.found and planned.scanned == unplanned.scanned == 3, pattern
        assert planned.found, pattern


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(PIECES, min_size=1, max_size=5), lines=st.lists(st.text(alphabet=ALPHABET.replace("\n", ""), max_size=30), min_size=1, max_size=12), span=st.sampled_from([0, 1, 7, 40, 512]), limit=st.sampled_from([1, 3, 50]))
def test_a_guided_scan_answers_the_same_lines_whatever_its_blocks(pieces: list[str], lines: list[str], span: int, limit: int) -> None:
    """A guided scan searches from each line holding a literal through ``span`` characters more in
    one call: blocks that end inside, at or past a matching line give the lines a plain scan gives."""
    compiled = regex_compile("".join(pieces))
    plan = scan_plan(compiled.pattern, compiled.flags)
    if plan is None or not plan.single_line:
        return
    guide = Guide.of(plan.as_dict())
    assert guide is not None
    text = "\n".join(lines)
    assert guided_line_matches(compiled, text, limit, guide, span) == plain(compiled, text, limit), (compiled.pattern, text, span)


def test_dense_literal_lines_are_searched_a_block_at_a_time() -> None:
    """A space on every line (``[ \\t]+$``): one search call per block of lines, not per line, and
    the same lines as a plain scan, the last line of a block included."""
    text = "def f():\n    x = 1\n    return x  \n" * 50 + "y = 2\t\n"
    compiled = regex_compile(r"[ \t]+$")
    guide = Guide.of(scan_plan(compiled.pattern, compiled.flags).as_dict())  # type: ignore[union-attr]
    assert guide is not None
    expected = plain(compiled, text, 500)
    assert len(expected) == 51 and expected[-1] == (151, "y = 2\t")
    for span in (0, 30, 512, 10_000):
        assert guided_line_matches(compiled, text, 500, guide, span) == expected
