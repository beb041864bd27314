"""The warm regex matching processes (``matchers.py``, ``rematch.py``): reused between searches,
killed at a deadline and replaced, shared by concurrent searches, none left running or unreaped;
files read as the walker's rules say; and the counts and lookups the code search path relies on."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.code import rematch
from service.code.cache import CachedChunk, ChunkCache
from service.code.lexical import QueryText, anchor_line, matching_lines, shown_line_count
from service.code.matchers import SPLIT_MIN_FILES, MatcherPool, MatchRun
from service.code.pattern import regex_compile
from service.code.rematch import read_text, requests
from service.engine.analyzer import analyze

CATASTROPHIC = r"(x+x+)+y"
# A run of x that re backtracks over for ages, and a match after it: a file without one would be
# ruled out by the linear screen before re ever read it.
HOSTILE_TEXT = "ok line\n" + "x" * 5_000 + "\nxxy\n"


def request(pattern: str, files: list[dict[str, str]], *, root: str = "/nonexistent", max_matches: int = 50) -> dict[str, object]:
    compiled = regex_compile(pattern)
    return {"pattern": compiled.pattern, "flags": compiled.flags, "root": root, "max_bytes": 1 << 20, "max_matches": max_matches, "files": files}


def gone(pid: int) -> bool:
    """The process has ended and been reaped: no entry, not even a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1].startswith("X")
    except FileNotFoundError:
        return True


@pytest.fixture
async def pool() -> AsyncIterator[MatcherPool]:
    matchers = MatcherPool(size=2)
    yield matchers
    matchers.close()


async def test_a_process_serves_one_search_after_another(pool: MatcherPool) -> None:
    assert pool.started == 0 and pool.idle_pids == []  # nothing starts before the first search
    first = await pool.run(request(r"def (\w+)", [{"path": "a.py", "text": "x = 1\ndef first():\n"}]), time.monotonic() + 10)
    pid = pool.idle_pids[0]
    second = await pool.run(request(r"return", [{"path": "b.py", "text": "return 1\n\nreturn 2"}]), time.monotonic() + 10)
    third = await pool.run(request(r"absent", [{"path": "c.py", "text": "nothing here"}]), time.monotonic() + 10)

    assert first.found == [(0, [(2, "def first():")])] and first.scanned == 1 and first.error is None
    assert second.found == [(0, [(1, "return 1"), (3, "return 2")])]
    assert third.found == [] and third.scanned == 1 and not third.timed_out
    assert pool.started == 1 and pool.idle_pids == [pid]


async def test_a_process_past_its_deadline_is_killed_reaped_and_replaced(pool: MatcherPool) -> None:
    await pool.run(request("warm", [{"path": "w", "text": "warm"}]), time.monotonic() + 10)
    warm_pid = pool.idle_pids[0]
    files = [{"path": "ok.txt", "text": "xxy\n"}, {"path": "slow.txt", "text": HOSTILE_TEXT}]

    started = time.monotonic()
    run = await pool.run(request(CATASTROPHIC, files), time.monotonic() + 0.5)

    assert time.monotonic() - started < 3.0
    assert run.timed_out and run.scanned == 1 and run.found == [(0, [(1, "xxy")])]
    assert gone(warm_pid), "the process that ran past its deadline is killed and reaped"
    assert pool.idle_pids == []
    after = await pool.run(request("xxy", [{"path": "ok.txt", "text": "xxy"}]), time.monotonic() + 10)
    assert after.found == [(0, [(1, "xxy")])] and not after.timed_out
    assert pool.started == 2 and pool.idle_pids != [warm_pid]


async def test_a_process_killed_while_idle_is_replaced(pool: MatcherPool) -> None:
    await pool.run(request("a", [{"path": "a", "text": "a"}]), time.monotonic() + 10)
    victim = pool.idle_pids[0]
    os.kill(victim, signal.SIGKILL)
    await asyncio.sleep(0.1)

    run = await pool.run(request("b", [{"path": "b", "text": "b"}]), time.monotonic() + 10)

    assert run.found == [(0, [(1, "b")])] and run.error is None
    assert gone(victim) and pool.started == 2 and pool.idle_pids != [victim]


async def test_concurrent_searches_each_get_their_own_answer_from_at_most_size_processes(pool: MatcherPool) -> None:
    texts = [f"line {n}\n" * (n + 1) + f"needle{n}\n" for n in range(8)]
    runs = await asyncio.gather(
        *(pool.run(request(rf"needle{n}$", [{"path": f"f{n}", "text": texts[n]}]), time.monotonic() + 10) for n in range(8))
    )

    assert [run.found for run in runs] == [[(0, [(n + 2, f"needle{n}")])] for n in range(8)]
    assert pool.started <= 2 and len(pool.idle_pids) == pool.started


async def test_a_hostile_search_holds_one_process_and_the_others_still_answer(pool: MatcherPool) -> None:
    hostile = asyncio.create_task(pool.run(request(CATASTROPHIC, [{"path": "slow", "text": HOSTILE_TEXT}]), time.monotonic() + 1.5))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    plain = [await pool.run(request("plain", [{"path": "p", "text": "plain"}]), time.monotonic() + 10) for _ in range(5)]
    assert time.monotonic() - started < 1.0, "plain searches waited for the hostile one"
    assert all(run.found == [(0, [(1, "plain")])] for run in plain)
    assert (await hostile).timed_out


async def test_searches_queued_past_their_deadline_stop_without_a_process(pool: MatcherPool) -> None:
    hostile = [asyncio.create_task(pool.run(request(CATASTROPHIC, [{"path": "s", "text": HOSTILE_TEXT}]), time.monotonic() + 1.0)) for _ in range(2)]
    await asyncio.sleep(0.1)
    queued = await pool.run(request("x", [{"path": "x", "text": "x"}]), time.monotonic() + 0.3)
    assert queued.timed_out and queued.scanned == 0 and queued.found == []
    assert all(run.timed_out for run in await asyncio.gather(*hostile))
    assert (await pool.run(request("x", [{"path": "x", "text": "x"}]), time.monotonic() + 10)).found == [(0, [(1, "x")])]


async def test_a_cancelled_search_kills_its_process_and_frees_its_slot(pool: MatcherPool) -> None:
    task = asyncio.create_task(pool.run(request(CATASTROPHIC, [{"path": "s", "text": HOSTILE_TEXT}]), time.monotonic() + 30))
    await asyncio.sleep(0.3)
    assert pool.started == 1 and pool.idle_pids == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Both slots are free again: two hostile searches at once would otherwise leave none.
    runs = await asyncio.gather(*(pool.run(request("y", [{"path": "y", "text": "y"}]), time.monotonic() + 5) for _ in range(2)))
    assert all(run.found == [(0, [(1, "y")])] for run in runs)


def many_files(count: int) -> list[dict[str, str]]:
    """``count`` small files, every seventh holding a comment that ``TAGGED`` matches, some twice."""
    files = []
    for n in range(count):
        text = f"x_{n} = {n}\n"
        if n % 7 == 0:
            text += f"# tag_{n}: {n}\n" + ("# again: 1\n" if n % 21 == 0 else "")
        files.append({"path": f"f{n:04}.py", "text": text})
    return files


TAGGED = r"^\s*#\s*\w+:\s*\d+$"  # no literal narrows it: every file is screened and read


async def one_process(pattern: str, files: list[dict[str, str]], max_matches: int) -> MatchRun:
    """The answer of a single process (a pool of one never splits)."""
    alone = MatcherPool(size=1)
    try:
        return await alone.run(request(pattern, files, max_matches=max_matches), time.monotonic() + 30)
    finally:
        alone.close()


async def test_a_large_request_to_an_idle_pool_is_matched_by_two_processes_with_one_processs_answer(pool: MatcherPool) -> None:
    files = many_files(SPLIT_MIN_FILES * 2 + 3)
    expected = await one_process(TAGGED, files, 10_000)

    run = await pool.run(request(TAGGED, files, max_matches=10_000), time.monotonic() + 30)

    assert pool.started == 2 and len(pool.idle_pids) == 2, "both processes matched, and both went back"
    assert run.found == expected.found and run.scanned == expected.scanned == len(files)
    assert run.ruled_out == expected.ruled_out == len(files) - len(expected.found) and run.ruled == sorted(run.ruled)
    assert not run.timed_out and run.error is None
    assert len(expected.found) == len(range(0, len(files), 7))


@pytest.mark.parametrize("max_matches", [1, 2, 5, 40])
async def test_a_split_request_stopped_at_its_limit_answers_a_prefix_of_the_files_without_gaps(pool: MatcherPool, max_matches: int) -> None:
    files = many_files(SPLIT_MIN_FILES * 2)
    every = await one_process(TAGGED, files, 10_000)
    alone = await one_process(TAGGED, files, max_matches)

    run = await pool.run(request(TAGGED, files, max_matches=max_matches), time.monotonic() + 30)

    assert pool.started == 2
    complete = [(index, lines) for index, lines in every.found if index < run.scanned]
    *whole, (last, lines) = run.found
    assert whole == complete[:-1] and complete[-1][0] == last == run.scanned - 1, "every file up to the cut-off answered, the cut one last"
    assert lines == complete[-1][1][: len(lines)], "the file at the limit gives its first lines"
    assert sum(len(lines) for _, lines in run.found) >= max_matches, "as many lines as the limit asked for"
    first = [(index, line) for index, lines in alone.found for line in lines]
    assert [(index, line) for index, lines in run.found for line in lines][: len(first)] == first, "one process's lines come first"
    assert run.scanned < len(files) and run.ruled_out == sum(1 for index in run.ruled if index < run.scanned) == len(run.ruled)


async def test_a_split_request_past_its_deadline_keeps_only_the_files_both_halves_answered(pool: MatcherPool) -> None:
    files = many_files(SPLIT_MIN_FILES * 2)
    hostile_at = 301  # the second half's 151st file: the first half runs on past it
    files[hostile_at] = {"path": "slow.txt", "text": HOSTILE_TEXT}
    every = await one_process(TAGGED, [*files[:hostile_at]], 10_000)

    started = time.monotonic()
    run = await pool.run(request(r"^\s*#\s*\w+:\s*\d+$|(x+x+)+y", files), time.monotonic() + 3.0)

    assert time.monotonic() - started < 6.0
    # Files without a match are reported done now and then, so the answered ones may stop a little short of it.
    assert run.timed_out and hostile_at - 20 < run.scanned <= hostile_at
    assert run.found == [(index, lines) for index, lines in every.found if index < run.scanned], "what either half found past it is left out"
    assert run.ruled_out == len(run.ruled) and all(index < run.scanned for index in run.ruled)
    assert pool.idle_pids == [] or len(pool.idle_pids) == 1, "the process past its deadline was killed"


async def test_a_large_request_while_a_process_is_lent_out_is_matched_by_one(pool: MatcherPool) -> None:
    # The lent process must outlive the large request's matching, also on a loaded machine (1.5 s did not, once).
    hostile = asyncio.create_task(pool.run(request(CATASTROPHIC, [{"path": "slow", "text": HOSTILE_TEXT}]), time.monotonic() + 6))
    await asyncio.sleep(0.2)
    files = many_files(SPLIT_MIN_FILES * 2)
    expected = await one_process(TAGGED, files, 10_000)

    run = await pool.run(request(TAGGED, files, max_matches=10_000), time.monotonic() + 10)

    assert not hostile.done(), "the large request did not wait for the lent process"
    assert run.found == expected.found and run.scanned == len(files) and pool.started == 2
    assert (await hostile).timed_out


async def test_close_kills_and_reaps_every_process() -> None:
    pool = MatcherPool(size=2)
    await asyncio.gather(*(pool.run(request("z", [{"path": "z", "text": "z"}]), time.monotonic() + 10) for _ in range(2)))
    lent = asyncio.create_task(pool.run(request(CATASTROPHIC, [{"path": "s", "text": HOSTILE_TEXT}]), time.monotonic() + 30))
    await asyncio.sleep(0.3)
    idle, every = pool.idle_pids, pool.pids
    assert len(idle) == 1 and len(every) == 2

    pool.close()

    assert gone(idle[0]) and pool.idle_pids == []
    lent.cancel()  # the process lent out is killed when it comes back
    with pytest.raises(asyncio.CancelledError):
        await lent
    assert all(gone(pid) for pid in every) and pool.pids == []
    after = await pool.run(request("z", [{"path": "z", "text": "z"}]), time.monotonic() + 10)
    assert after.error is not None and after.found == []


async def test_a_process_that_ended_itself_while_idle_is_replaced_without_failing_the_search(pool: MatcherPool) -> None:
    await pool.run(request("a", [{"path": "a", "text": "a"}]), time.monotonic() + 10)
    pid = pool.idle_pids[0]
    os.kill(pid, signal.SIGTERM)  # ends as at the end of its idle time, unseen by the pool until used
    await asyncio.sleep(0.2)

    run = await pool.run(request("b", [{"path": "b", "text": "b"}]), time.monotonic() + 10)

    assert run.found == [(0, [(1, "b")])] and run.error is None and pool.started == 2
    assert gone(pid)


async def test_a_request_that_fails_ends_its_process_and_the_next_gets_a_fresh_one(pool: MatcherPool) -> None:
    broken = await pool.run({"pattern": "(", "flags": 0, "root": "/", "max_bytes": 10, "max_matches": 1, "files": []}, time.monotonic() + 10)
    assert broken.error is not None and "error" in broken.error.lower()
    fine = await pool.run(request("ok", [{"path": "o", "text": "ok"}]), time.monotonic() + 10)
    assert fine.found == [(0, [(1, "ok")])] and pool.started == 2


async def test_files_are_read_from_the_root_in_order_and_the_unreadable_skipped(pool: MatcherPool, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("import os\nTARGET = 1\n")
    (tmp_path / "src" / "bin.dat").write_bytes(b"TARGET\0binary")
    (tmp_path / "big.txt").write_text("TARGET\n" * 100)
    (tmp_path / "z.py").write_text("no\nno\nTARGET\n")
    files = [{"path": path} for path in ("big.txt", "gone.py", "src/a.py", "src/bin.dat", "z.py")]
    compiled = regex_compile("TARGET")
    run = await pool.run(
        {"pattern": compiled.pattern, "flags": compiled.flags, "root": str(tmp_path), "max_bytes": 500, "max_matches": 10, "files": files},
        time.monotonic() + 10,
    )
    assert run.found == [(2, [(2, "TARGET = 1")]), (4, [(3, "TARGET")])]  # big.txt is over max_bytes
    assert run.scanned == 5 and run.error is None


def test_links_swapped_in_since_the_walk_are_read_only_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "real.py").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("secret\n")
    (root / "pkg" / "inner.py").symlink_to(root / "pkg" / "real.py")
    (root / "pkg" / "leak.py").symlink_to(outside / "secret.py")
    (root / "linked").symlink_to(outside)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "pipe.py")

    assert read_text(str(root), "pkg/real.py", 1 << 20) == "inside\n"
    assert read_text(str(root), "pkg/inner.py", 1 << 20) == "inside\n"  # a link to a file inside: its target
    assert read_text(str(root), "pkg/leak.py", 1 << 20) is None
    assert read_text(str(root), "linked/secret.py", 1 << 20) is None  # a directory link out of the root
    assert read_text(str(root), "pkg/../../outside/secret.py", 1 << 20) is None
    assert read_text(str(root), "fifo/pipe.py", 1 << 20) is None  # not a regular file, and no blocking open
    assert read_text(str(root), "pkg/missing.py", 1 << 20) is None


# ---- what the search path counts and looks up -------------------------------------------------------


LINES = st.sampled_from(["def get_user(self):", "    return self.user", "", "   ", "user = User()", "# TODO users", "İstanbul", "x = 1"])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINES, min_size=1, max_size=12),
    symbol=st.sampled_from([None, "get_user", "Cls.get_user"]),
    query=st.sampled_from(["user", "get user", "self.user", "USER", "todo", "the", "i̇stanbul", "absent words", "=", "a\nb", " "]),
    max_lines=st.integers(1, 4),
)
def test_shown_line_count_is_the_number_of_lines_a_chunk_shows(lines: list[str], symbol: str | None, query: str, max_lines: int) -> None:
    chunk = CachedChunk("k", "p.py", 10, 10 + len(lines) - 1, "function", symbol, "h", "h", "\n".join(lines))
    text = QueryText.of(query)
    assert shown_line_count(chunk, text, max_lines) == len(matching_lines(chunk, text, max_lines) or [anchor_line(chunk)])


def lines_by_definition(chunk: CachedChunk, query: QueryText, max_lines: int) -> list[tuple[int, str]]:
    """``matching_lines`` as its docstring defines it, line by line: the lines holding the literal, or
    else those with the most query terms (every line analyzed)."""
    needle = query.literal.lower()
    lines = chunk.text.split("\n")
    exact = [(chunk.start_line + i, line) for i, line in enumerate(lines) if needle and needle in line.lower()]
    if exact:
        return exact[:max_lines]
    scored = [(len(query.term_set & set(analyze(line))), chunk.start_line + i, line) for i, line in enumerate(lines)]
    best = sorted((s for s in scored if s[0]), key=lambda s: (-s[0], s[1]))[:max_lines]
    return [(line_no, line) for _, line_no, line in sorted(best, key=lambda s: s[1])]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINES | st.text(alphabet="aeiİıßuser_ .()=#\t-", max_size=20), min_size=1, max_size=12),
    query=st.sampled_from(["user", "get user", "self.user", "USER", "todo", "the", "i̇stanbul", "absent words", "=", "a\nb", " ", "get_user users", "ß"]),
    max_lines=st.integers(1, 4),
)
def test_matching_lines_are_those_of_the_line_by_line_definition(lines: list[str], query: str, max_lines: int) -> None:
    chunk = CachedChunk("k", "p.py", 10, 10 + len(lines) - 1, "function", None, "h", "h", "\n".join(lines))
    text = QueryText.of(query)
    assert matching_lines(chunk, text, max_lines) == lines_by_definition(chunk, QueryText.of(query), max_lines)


def test_chunks_at_finds_the_chunk_holding_each_line(tmp_path: Path) -> None:
    cache = ChunkCache(tmp_path)
    chunks = [
        CachedChunk("a1", "a.py", 1, 3, "function", "f", "h1", "c1", "def f():\n    x\n    y"),
        CachedChunk("a2", "a.py", 6, 7, "function", "g", "h2", "c2", "def g():\n    z"),
        CachedChunk("b1", "b.py", 2, 2, "gap", None, "h3", "c3", "import os"),
    ]
    cache.replace_files([], chunks)
    try:
        found = cache.chunks_at({"a.py": [1, 3, 4, 6, 7, 8], "b.py": [1, 2], "c.py": [1]})
    finally:
        cache.close()
    assert {place: chunk.key for place, chunk in found.items()} == {("a.py", 1): "a1", ("a.py", 3): "a1", ("a.py", 6): "a2", ("a.py", 7): "a2", ("b.py", 2): "b1"}
    assert found[("a.py", 6)] == chunks[1]


def test_the_pattern_flags_travel_with_the_request() -> None:
    compiled = regex_compile("^def", ignore_case=True)
    assert compiled.flags & re.MULTILINE and compiled.flags & re.IGNORECASE


def test_a_matching_process_reads_requests_until_idle_too_long(tmp_path: Path) -> None:
    source, sink = os.pipe()
    try:
        os.write(sink, b'{"first": 1}\n{"second"')
        os.write(sink, b": 2}\n")
        started = time.monotonic()
        assert list(requests(source, 0.3)) == [b'{"first": 1}\n', b'{"second": 2}\n']
        assert 0.25 < time.monotonic() - started < 3.0
    finally:
        os.close(source)
        os.close(sink)


def test_a_match_ends_at_its_alarm_should_nobody_kill_it() -> None:
    """The backstop for a service that died mid-match: the kernel ends the process at ``alarm_s``."""
    compiled = regex_compile(CATASTROPHIC)
    line = json.dumps({**request(CATASTROPHIC, [{"path": "s", "text": HOSTILE_TEXT}]), "flags": compiled.flags, "alarm_s": 1})
    script = Path(rematch.__file__)
    process = subprocess.Popen([sys.executable, "-I", "-S", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    started = time.monotonic()
    process.stdin.write(line.encode() + b"\n")
    process.stdin.flush()
    try:
        returncode = process.wait(timeout=10)
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()
    assert returncode == -signal.SIGALRM and time.monotonic() - started < 5


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.text(alphabet=list("abcXYZ_.-/:( )\t\u00e9\u00c9\ufb01\u00b2\u0130\u3000\u2003sS01"), max_size=30), max_size=4),
    query=st.sampled_from(["a b abc", "e fi 2", "xyz s", "cab i ie", "eab c1", "abc_xyz", "éclair", "ﬁle", "x²"]),
)
def test_the_query_terms_of_a_line_are_those_the_analyzer_gives(lines: list[str], query: str) -> None:
    """Words are analyzed only when they can hold a query term, each once per query: the answer is the analyzer's."""
    text = QueryText.of(query)
    for line in [*lines, *lines]:
        expected = text.term_set & set(analyze(line))
        assert text.terms_in(line) == expected
        assert bool(text.terms_in(line, first_only=True)) == bool(expected)
