"""The linear screen of the regex matching process: an RE2 automaton translated from a pattern
matches wherever the pattern can, so a file it rules out has no match; on ASCII text (and on any
text, for patterns without ``\\b``) it rules out exactly the files without one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.code import rematch
from service.code.matchers import MatcherPool
from service.code.pattern import regex_compile
from service.code.rematch import decode, linear_screen

# Pieces that RE2 has as they are, and (last row) those it lacks and the screen widens.
EXACT_PIECES = [
    "TODO", "todo", "é", "k", "s", " ", "#", ":", r"\.", "=", r"\w", r"\w+", r"\W", r"\d", r"\d+", r"\D", r"\s", r"\s*",
    r"\S", ".", ".*", "(?s:.)", "[^x]", "[a-f]", "[^\\n]", r"\n", "^", "$", r"\A", r"\Z", "(?:TODO|é)", "(a|bc)", "(?i:k)",
    "(?i:[a-z])", "(?i:ſ)", "x?", "e{2,3}", "e{1,}?", "[ \t]+", r"\x00", "\ufffd",
]  # fmt: skip
WIDENED_PIECES = [r"\b", r"\B", r"(?=No)", r"(?!ne)", r"(?<=\.)", r"(?<!s)", r"(a)\1", "(?>ab|a)", "e{2}+", "(?:x){1001,}", "(a)?(?(1)b|c)"]
# ASCII, then what Unicode classes and case folding reach: a non-ASCII letter, digit and space,
# the Kelvin sign and long s (which fold to k and s), a dotless i, the replacement character.
ASCII_ALPHABET = "abexkKsS TODOtodo#:.=_-0123456789\n\t"
ALPHABET = ASCII_ALPHABET + "é٣\xa0\u2028\u212a\u017f\u0131\ufffd中"
RAW = st.binary(max_size=40) | st.text(alphabet=ALPHABET, max_size=60).map(lambda text: text.encode("utf-8"))


def matches(pattern: str, data: bytes) -> bool:
    """Whether ``re`` matches the text a file of ``data`` decodes to, as the matching process reads it."""
    return regex_compile(pattern).search(decode(data)) is not None


def screen_of(pattern: str) -> rematch.LinearScreen:
    compiled = regex_compile(pattern)
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None, pattern
    return screen


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(EXACT_PIECES + WIDENED_PIECES), min_size=1, max_size=5), files=st.lists(RAW, min_size=1, max_size=4), ignore_case=st.booleans())
def test_the_screen_never_rules_out_a_file_that_matches(pieces: list[str], files: list[bytes], ignore_case: bool) -> None:
    compiled = regex_compile("".join(pieces), ignore_case)
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None, compiled.pattern
    for data in [*files, b"\n".join(files)]:
        if compiled.search(decode(data)) is not None:
            assert screen.may_match(data), (compiled.pattern, data)
            assert screen.may_match(decode(data)), (compiled.pattern, data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.sampled_from([*EXACT_PIECES, r"\b", r"\B"]), min_size=1, max_size=5),
    lines=st.lists(st.text(alphabet=ASCII_ALPHABET, min_size=1, max_size=40), min_size=1, max_size=4),
    ignore_case=st.booleans(),
)
def test_on_ascii_text_the_screen_rules_out_exactly_the_files_without_a_match(pieces: list[str], lines: list[str], ignore_case: bool) -> None:
    """Texts are not empty: there the screen is wider than ``re`` only for ``\\B`` (which this Python's ``re`` never matches in an empty text)."""
    compiled = regex_compile("".join(pieces), ignore_case)
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None
    for text in [*lines, "\n".join(lines)]:
        assert screen.may_match(text.encode("ascii")) == (compiled.search(text) is not None), (compiled.pattern, text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(EXACT_PIECES), min_size=1, max_size=5), data=RAW, ignore_case=st.booleans())
def test_without_word_boundaries_any_text_is_screened_exactly(pieces: list[str], data: bytes, ignore_case: bool) -> None:
    """Unicode classes, case folding and undecodable bytes (read as U+FFFD) included."""
    compiled = regex_compile("".join(pieces), ignore_case)
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None
    assert screen.may_match(data) == (compiled.search(decode(data)) is not None), (compiled.pattern, data)


@pytest.mark.parametrize(
    ("pattern", "kept", "ruled_out"),
    [
        (r"[ \t]+$", b"x = 1 \ny\n", b"x = 1\ny\n"),
        (r"^\s*#\s*\w+:\s*\d+$", "  # caf\u00e9: \u0663\n".encode(), "  # caf\u00e9: x\n".encode()),  # an Arabic-Indic digit is a \d
        (r"a.b", b"a\xffb", b"a\nb"),  # the undecodable byte reads as U+FFFD, which . matches
        (r"a\wb", "a\u00e9b".encode(), b"a\xffb"),  # U+FFFD is no word character; e-acute is
        (r"(?i)kelvin", "\u212aelvin".encode(), b"celvin"),  # the Kelvin sign folds to k
        (r"(x+x+)+y", b"xxxxxxy", b"x" * 12),
        (r"\bTODO\b", b"# TODO: later", b"# TODOS: later"),
        (r"(?<=\.)\w+\(\)", b"self.close()", b"close ()"),
        (r"(\w+) \1", b"the the", b"the"),
    ],
)
def test_typical_patterns_keep_matching_files_and_rule_out_others(pattern: str, kept: bytes, ruled_out: bytes) -> None:
    screen = screen_of(pattern)
    assert matches(pattern, kept) and screen.may_match(kept)
    assert not matches(pattern, ruled_out) and not screen.may_match(ruled_out)


@pytest.mark.parametrize(
    ("pattern", "lead"),
    [
        (r"^\s*#\s*\w+:\s*\d+$", "[\\x{23}]"),  # from the first literal on
        (r"\bTODO\b", "[\\x{54}]"),
        (r"^(ab|cd)x\w+", "[\\x{78}]"),  # a group before it, not a literal of its own
        (r"#\s*x", None),  # the pattern starts with its literal
        (r"^\s*\w+$", None),  # no literal at the top level
        (r"^\s*(#)", None),  # a literal only inside a group
        (r"(?i)^\s*#k", None),  # ignoring case, a literal is a class
    ],
)
def test_a_pattern_with_a_literal_after_its_start_is_screened_from_it_first(pattern: str, lead: str | None) -> None:
    screen = screen_of(pattern)
    if lead is None:
        assert screen.lead is None
    else:
        assert screen.lead is not None and screen.lead.startswith(lead), screen.lead


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    head=st.lists(st.sampled_from([r"^", r"\s*", r"\w+", r"\b", "(a|bc)", ".*", r"\d"]), min_size=1, max_size=3),
    tail=st.lists(st.sampled_from(EXACT_PIECES + WIDENED_PIECES), min_size=0, max_size=3),
    literal=st.sampled_from(["#", ":", "e", "\u00e9", "T"]),
    data=RAW,
)
def test_a_screen_with_a_lead_keeps_exactly_the_files_the_whole_keeps(head: list[str], tail: list[str], literal: str, data: bytes) -> None:
    """The lead only passes over files the whole would rule out: the answer is the whole's alone."""
    compiled = regex_compile("".join([*head, literal, *tail]))
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None and screen.lead is not None, compiled.pattern
    whole = rematch.LinearScreen(screen._ascii, screen._other)
    for content in (data, decode(data)):
        assert screen.may_match(content) == whole.may_match(content), (compiled.pattern, data)
        if compiled.search(decode(data)) is not None:
            assert screen.may_match(content), (compiled.pattern, data)


def test_a_file_a_catastrophic_pattern_does_not_match_is_ruled_out_without_backtracking() -> None:
    """``re`` would try 2^n ways to split the run before failing; the automaton reads it once."""
    assert not screen_of(r"(x+x+)+y").may_match(b"x" * 100_000)
    assert screen_of(r"(x+x+)+y").may_match(b"x" * 100_000 + b"y")


def test_a_non_ascii_file_is_not_ruled_out_by_an_ascii_word_boundary() -> None:
    """``re``'s ``\\b`` sees the e-acute as a word character, RE2's would not: for such text the screen drops ``\\b``."""
    data = "caf\u00e9 TODO".encode()
    assert matches(r"\u00e9\b", data) and screen_of(r"\u00e9\b").may_match(data)


def test_a_text_with_a_lone_surrogate_is_left_to_re() -> None:
    """A file's text given in a request may hold what UTF-8 cannot: the screen rules nothing out then."""
    assert screen_of("zzz").may_match("a\ud800b")


def test_patterns_re2_cannot_take_are_left_to_re() -> None:
    assert linear_screen(r"(?:(?:a{1,1000}){1,1000}){1,1000}", re.MULTILINE) is None, "past RE2's program size"
    many_classes = "".join(f"[\\d{letter}]" for letter in "abcdefghijklmnopq")  # 17 classes, each found by a pass of re over every code point
    assert linear_screen(many_classes, re.MULTILINE) is None


def test_an_ignore_case_pattern_of_many_letters_is_screened_exactly() -> None:
    """ASCII letters ignoring case match their other case and a few non-ASCII partners alone (the
    Kelvin sign for k): found without a pass over every code point, however many letters."""
    compiled = regex_compile("the quick brown fox jumps over lazy dogs", ignore_case=True)
    screen = linear_screen(compiled.pattern, compiled.flags)
    assert screen is not None
    for text in ["THE QUICK BROWN FOX JUMPS OVER LAZY DOGS", "the quic\u212a brown fox jumps over lazy dogs", "the quick brown fox", "the quick brown fox jumps over lazy do"]:
        assert screen.may_match(text.encode()) == (compiled.search(text) is not None), text


@pytest.fixture
async def pool() -> AsyncIterator[MatcherPool]:
    matchers = MatcherPool(size=1)
    yield matchers
    matchers.close()


FILES = [
    {"path": "a.py", "text": "def f():\n    return 1  \n"},
    {"path": "b.py", "text": "def g():\n    return 2\n"},
    {"path": "c.py", "text": "x = 'caf\u00e9'\t\n"},
    {"path": "d.py", "text": "nothing here\n"},
]


async def test_the_matching_process_screens_files_and_answers_as_without(pool: MatcherPool) -> None:
    compiled = regex_compile(r"[ \t]+$")
    request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": "/nonexistent", "max_bytes": 1 << 20, "max_matches": 50, "files": FILES}
    screened = await pool.run(request, time.monotonic() + 10)
    plain = await pool.run(dict(request, screen=False), time.monotonic() + 10)
    assert screened.error is None and screened.found == plain.found == [(0, [(2, "    return 1  ")]), (2, [(1, "x = 'caf\u00e9'\t")])]
    assert (screened.ruled_out, plain.ruled_out) == (2, 0), "b.py and d.py were passed over without re"
    assert screened.scanned == plain.scanned == 4


def test_a_matching_process_without_re2_answers_the_same() -> None:
    """Started as the service starts it but without ``--site``, the process cannot import RE2: it
    matches every file with ``re`` and rules none out."""
    compiled = regex_compile(r"[ \t]+$")
    request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": "/nonexistent", "max_bytes": 1 << 20, "max_matches": 50, "files": FILES}
    script = Path(rematch.__file__)
    answered = subprocess.run([sys.executable, "-I", "-S", str(script)], input=json.dumps(request) + "\n", capture_output=True, text=True, timeout=30, check=True)
    lines = [json.loads(line) for line in answered.stdout.splitlines()]
    assert [line for line in lines if "lines" in line] == [{"i": 0, "lines": [[2, "    return 1  "]]}, {"i": 2, "lines": [[1, "x = 'caf\u00e9'\t"]]}]
    assert lines[-1] == {"done": True, "scanned": 4, "ruled_out": 0}


def _many_files(root: Path, count: int) -> list[dict[str, str]]:
    """``count`` files of every kind a request meets: matching ASCII files, matching non-ASCII
    files in valid and in broken UTF-8, files without a match, binary files and missing ones."""
    files = []
    for number in range(count):
        name = f"pkg{number % 7}/m{number}.py"
        kind = number % 6
        content: bytes | None
        if kind == 0:
            content = f"def f{number}():\n    return {number}  \n".encode()
        elif kind == 1:
            content = f"s = 'caf\u00e9 {number}'\t\nt = 1\n".encode()
        elif kind == 2:
            content = b"s = '\xff\xfe broken'\t\nt = '\xe9'\n" if number % 4 else b"t = '\xe9 broken, no match'\n"
        elif kind == 3:
            content = f"x = {number}\n".encode() * 40
        elif kind == 4:
            content = b"\x00binary  \n"
        else:
            name = f"gone/m{number}.py"  # listed, never written
            content = None
        if content is not None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
        files.append({"path": name})
    return files


def _expected(root: Path, files: list[dict[str, str]], pattern: re.Pattern[str]) -> list[tuple[int, list[tuple[int, str]]]]:
    found = []
    for index, item in enumerate(files):
        path = root / item["path"]
        if not path.exists() or b"\x00" in path.read_bytes():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        lines = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if pattern.search(line)]
        if lines:
            found.append((index, lines))
    return found


async def test_files_read_from_disk_are_screened_with_the_answer_of_a_plain_scan(pool: MatcherPool, tmp_path: Path) -> None:
    """Files the process reads itself, of every kind: the screened answer is the unscreened one,
    file by file and in order (broken UTF-8 read as the indexer reads it), unreadable files are
    still skipped, and every readable file without a match is ruled out."""
    files = _many_files(tmp_path, 120)
    compiled = regex_compile(r"[ \t]+$")
    request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": str(tmp_path), "max_bytes": 1 << 20, "max_matches": 10_000, "files": files}
    screened = await pool.run(request, time.monotonic() + 30)
    plain = await pool.run(dict(request, screen=False), time.monotonic() + 30)
    expected = _expected(tmp_path, files, re.compile(r"[ \t]+$"))
    assert any("\ufffd" in line for _, lines in expected for _, line in lines), "a broken UTF-8 file matched"
    assert screened.error is None and screened.found == plain.found == expected
    readable = sum(1 for item in files if (tmp_path / item["path"]).exists() and b"\x00" not in (tmp_path / item["path"]).read_bytes())
    assert screened.ruled_out == readable - len(expected) > 0
    assert screened.scanned == plain.scanned == len(files)


async def test_a_screened_request_stops_at_its_limit(pool: MatcherPool, tmp_path: Path) -> None:
    """The answer ends where the limit is reached: the same files as the unscreened scan, no
    file scanned past the one that reached it."""
    files = _many_files(tmp_path, 120)
    compiled = regex_compile(r"[ \t]+$")
    request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": str(tmp_path), "max_bytes": 1 << 20, "max_matches": 10, "files": files}
    screened = await pool.run(request, time.monotonic() + 30)
    plain = await pool.run(dict(request, screen=False), time.monotonic() + 30)
    expected = _expected(tmp_path, files, re.compile(r"[ \t]+$"))[:10]
    assert screened.found == plain.found == expected
    assert screened.scanned == plain.scanned == expected[-1][0] + 1


def test_a_file_in_broken_utf8_is_screened_as_the_indexer_reads_it() -> None:
    """Valid UTF-8 is screened as its own bytes; broken UTF-8 as its text with U+FFFD for each
    undecodable byte, which a class holding U+FFFD matches."""
    screen = linear_screen(r"[^\x00-\x7f]z", 0)
    assert screen is not None
    assert screen.may_match(b"\xffz") and screen.may_match("\u00e9z".encode())
    assert not screen.may_match("\u00e9 z".encode()) and not screen.may_match(b"\xff z")
    assert rematch.text_of("caf\u00e9".encode()) == ("caf\u00e9", "caf\u00e9".encode())
    assert rematch.text_of(b"\xffa") == ("\ufffda", "\ufffda".encode())
