"""Property tests of the input parsers: the analyzer, entity refs, path and glob scopes, and user regexes (bounded in time).

Each property is one the unit tests beside the modules do not state already: a lowercase query
meets the identifier it spells, the analyzer and the compiler stay fast on hostile input, refs and
scopes refuse (never crash on) anything, a scope never leaves its workspace, and regex search
answers exactly the lines Python's ``re`` matches in the whole file. The last tests
send the hostile regexes through HTTP: a bounded 200 or a 400, never a 5xx or a stuck server.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from service.auth import Caller
from service.catalog.refs import ENTITY_TYPES, EntityRef, parse_entity_param, parse_ref
from service.code.lexical import run_matcher
from service.code.pattern import MAX_FIXED_EXPANSION, regex_compile
from service.code.rematch import line_matches
from service.code.roots import (
    caller_bases,
    check_not_protected,
    expand_base,
    placeholder_segment,
    protected_dirs,
    resolve_caller_root,
)
from service.code.scope import ScopeError, resolve_scope
from service.engine.analyzer import ANALYZER_VERSION, analyze, query_terms, terms_text, upgrade_terms
from service.errors import AgentSearchError, InvalidEntityRef
from service.settings import Settings
from service.state import ENGINE
from tests.code.helpers import ALICE, register, search, wait_indexed

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
JOINERS = {"snake": "_", "kebab": "-", "dotted": ".", "path": "/"}


# ---- the analyzer ---------------------------------------------------------------------------------


def _camel(words: list[str]) -> str:
    return words[0] + "".join(word.capitalize() for word in words[1:])


@given(words=st.lists(WORDS, min_size=1, max_size=4), style=st.sampled_from(["camel", "pascal", *JOINERS]))
def test_a_lowercase_query_of_an_identifier_meets_it(words: list[str], style: str) -> None:
    """``getitems`` typed as one word finds ``get_items``, ``getItems``, ``get.items``..."""
    if style == "camel":
        identifier = _camel(words)
    elif style == "pascal":
        identifier = _camel(words).capitalize() if len(words) == 1 else words[0].capitalize() + _camel(words)[len(words[0]) :]
    else:
        identifier = JOINERS[style].join(words)
    document = set(terms_text(f"x = {identifier}(y)").split())

    assert set(query_terms("".join(words)).split()) <= document, (identifier, sorted(document))
    if style in JOINERS:  # split on explicit joiners, each word is a term of its own
        for word in words:
            assert set(query_terms(word).split()) <= document, (word, identifier, sorted(document))


@given(before=st.text(max_size=40), query=st.text(max_size=40), after=st.text(max_size=40))
def test_a_query_meets_every_text_that_holds_it_between_spaces(before: str, query: str, after: str) -> None:
    """Analysis has no context: the terms of a text are found in any text that holds it as whole words."""
    assert set(query_terms(query).split()) <= set(terms_text(f"{before} {query} {after}").split())


@given(text=st.text(max_size=300), version=st.integers(1, ANALYZER_VERSION))
def test_upgrading_terms_leaves_todays_output_as_it_is(text: str, version: int) -> None:
    """``reindex`` upgrades every record whose stamp is older, including records today's analyzer
    wrote before the stamp existed: the upgrade must not change today's output."""
    assert upgrade_terms(terms_text(text), version) == terms_text(text)


@given(text=st.text(max_size=300))
def test_query_terms_are_unique_document_terms_keep_their_counts(text: str) -> None:
    query = query_terms(text).split()
    assert len(query) == len(set(query))
    assert set(query) <= set(analyze(text))
    assert terms_text(text).split() == analyze(text)


@pytest.mark.parametrize(
    "hostile",
    ["a." * 100_000, "aA" * 100_000, "a-" * 100_000 + "!", "é" * 200_000, "1a" * 100_000, ".-/:" * 50_000, "getUserById.snake_case/x " * 8_000],
    ids=["dotted", "camel", "dashed", "accents", "digits", "connectors", "mixed"],
)
def test_analysis_of_200k_hostile_characters_is_bounded(hostile: str) -> None:
    started = time.monotonic()
    terms = analyze(hostile)
    query_terms(hostile[:2_000])

    assert time.monotonic() - started < 3.0
    assert all(len(term) <= 40 for term in terms)


# ---- entity refs ---------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=12) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@given(value=st.one_of(JSON_VALUES, st.lists(st.text(max_size=40), max_size=12)))
def test_the_entity_parameter_answers_each_ref_or_refuses_the_whole(value: Any) -> None:
    try:
        parsed = parse_entity_param(value)
    except InvalidEntityRef as exc:
        assert exc.message and len(exc.message) < 300
        return
    items = value if isinstance(value, list) else orjson.loads(value) if _is_json_list(value) else [value]
    assert 1 <= len(parsed) <= 10 and [text for text, _ in parsed] == items
    for text, outcome in parsed:
        if isinstance(outcome, EntityRef):
            assert outcome.full == text
        else:
            assert outcome.startswith(("invalid entity ref", "empty entity ref")) and len(outcome) < 400


def _is_json_list(value: Any) -> bool:
    if not isinstance(value, str) or not value.startswith("["):
        return False
    try:
        return isinstance(orjson.loads(value), list)
    except orjson.JSONDecodeError:
        return False


@given(text=st.text(min_size=100, max_size=2_000))
def test_a_refused_ref_is_quoted_short_in_the_message(text: str) -> None:
    try:
        parse_ref(text)
    except InvalidEntityRef as exc:
        # 80 characters of the ref at most, each escaped to 10 at most (\U0010ffff), plus the reason.
        assert len(exc.message) < 1_000, exc.message
    else:
        assert len(text) <= 512


@given(type_=st.sampled_from(ENTITY_TYPES), first=st.integers(0, 10**12), last=st.integers(0, 10**12))
def test_line_ranges_parse_exactly_or_are_refused(type_: str, first: int, last: int) -> None:
    text = f"{type_}:some-id#L{first}-L{last}"
    if 1 <= first <= last:
        assert parse_ref(text).line_span == (first, last)
    else:
        with pytest.raises(InvalidEntityRef, match="line anchor"):
            parse_ref(text)


# ---- path and glob scopes ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with nested files, a symlink inside, symlinks pointing out, and a loop."""
    base = tmp_path_factory.mktemp("scope")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours\n")
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "x.py").write_text("x = 1\n")
    (root / "a" / "b" / "y.go").write_text("package b\n")
    os.symlink(outside, root / "out")
    os.symlink(outside / "secret.txt", root / "a" / "leak.txt")
    os.symlink(root / "a" / "b", root / "alias")
    os.symlink("..", root / "a" / "up")
    os.symlink(root / "loop", root / "loop")
    return root


PATH_TOKENS = ["a", "b", "x.py", "y.go", "..", ".", "", "out", "leak.txt", "alias", "up", "loop", "secret.txt", "~", "a\\..\\..", "%2e%2e"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.lists(st.sampled_from(PATH_TOKENS), max_size=6), absolute=st.sampled_from(["", "root", "/", "outside"]))
def test_a_scope_never_leaves_its_workspace(workspace: Path, tokens: list[str], absolute: str) -> None:
    prefix = {"": "", "root": f"{workspace}/", "/": "/", "outside": f"{workspace.parent / 'outside'}/"}[absolute]
    path = prefix + "/".join(tokens)
    try:
        scope = resolve_scope(workspace, path, None)
    except ScopeError as exc:
        assert str(exc)
        return
    target = (workspace / scope.prefix).resolve()
    real_root = workspace.resolve()
    assert target == real_root or real_root in target.parents, (path, scope.prefix)
    assert target.exists() and target.is_file() == scope.is_file


# ---- workspace roots -----------------------------------------------------------------------------------


@given(value=st.text(max_size=40), other=st.text(max_size=40))
def test_a_claim_value_is_one_path_segment_of_its_own(value: str, other: str) -> None:
    """``{user}`` expands to exactly one segment under the base, whatever the sub holds ('/', '..',
    NUL, a leading dot), and two subs never share a directory."""
    assume(value)
    template = Path("/srv/ws/{user}")
    (expanded,) = expand_base(template, Caller(sub=value))
    assert expanded.parent == Path("/srv/ws") and expanded.name == placeholder_segment(value)
    assert expanded.name not in {"", ".", ".."} and not expanded.name.startswith(".") and "\0" not in expanded.name
    if other and other != value:
        assert placeholder_segment(other) != placeholder_segment(value)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path]:
    """Bases ``ws/{user}`` where alice's base holds the data directory, bob's tree, links out and a loop."""
    top = tmp_path_factory.mktemp("roots")
    alice, bob = top / "ws" / "alice", top / "ws" / "bob"
    for path in (alice / "repo" / "src", bob / "repo", alice / "data" / "workspaces"):
        path.mkdir(parents=True)
    (alice / "data" / "jwt-secret").write_text("secret\n")
    os.symlink(bob / "repo", alice / "repo" / "out")
    os.symlink(alice / "data", alice / "repo" / "data-link")
    os.symlink(alice / "loop", alice / "loop")
    os.symlink("..", alice / "repo" / "up")
    settings = Settings(data_dir=alice / "data", allowed_roots=(top / "ws" / "{user}",), single_tenant=False)
    return settings, alice


ROOT_TOKENS = ["repo", "src", "..", ".", "out", "data-link", "data", "workspaces", "loop", "up", "bob", "alice", "ws", "x" * 300]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.lists(st.sampled_from(ROOT_TOKENS), max_size=6), start=st.sampled_from(["alice", "bob", "top", "/"]))
def test_a_root_lies_in_the_callers_base_outside_the_data_or_is_a_4xx(bases: tuple[Settings, Path], tokens: list[str], start: str) -> None:
    root_settings, alice_base = bases
    prefix = {"alice": alice_base, "bob": alice_base.parent / "bob", "top": alice_base.parent.parent, "/": Path("/")}[start]
    raw = str(prefix / "/".join(tokens)) if tokens else str(prefix)
    caller_bases_ = caller_bases(root_settings, Caller(sub="alice"))
    try:
        root, base = resolve_caller_root(raw, root_settings, caller_bases_)
        check_not_protected(raw, root, protected_dirs(root_settings))
    except AgentSearchError as exc:
        assert 400 <= exc.status < 500 and exc.message, (raw, exc)
        return
    real_base = alice_base.resolve()
    data = (alice_base / "data").resolve()
    assert root == real_base or real_base in root.parents, (raw, root)
    assert base.path == real_base and root.is_dir()
    assert root != data and data not in root.parents and root not in data.parents, (raw, root)


GLOB_CHARS = "ab.*?[]!^\\-$()+|{}/"


@given(glob=st.text(alphabet=GLOB_CHARS, max_size=12), name=st.text(alphabet="ab.-^!$()[]\\", min_size=1, max_size=8))
def test_a_basename_glob_matches_like_fnmatch_or_is_refused(glob: str, name: str) -> None:
    assume("/" not in glob)
    try:
        scope = resolve_scope(Path(__file__).parent, None, glob)
    except ScopeError as exc:
        assert str(exc)
        return
    if scope.glob is None:
        assert not glob.strip()
        return
    assert scope.contains(f"dir/{name}") == fnmatch.fnmatchcase(name, scope.glob), (scope.glob, name)


@given(glob=st.text(max_size=30))
def test_any_glob_text_scopes_or_is_refused_with_a_scope_error(glob: str) -> None:
    try:
        scope = resolve_scope(Path(__file__).parent, ".", glob)
    except ScopeError as exc:
        assert str(exc)
        return
    for path in ("a", "a/b.go", glob, f"x/{glob}"):
        scope.contains(path)  # must not raise


# ---- regexes -------------------------------------------------------------------------------------

CATASTROPHIC = [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+$", r"(.*a){12}$", r"^(\w+\s?)*$", r"([a-zA-Z]+)*$", r"^(a+)+b", r"(\w*)*\d$", r"(.*){1,32000}[bc]"]


@pytest.mark.parametrize("ignore_case", [False, True])
@pytest.mark.parametrize("pattern", CATASTROPHIC)
async def test_catastrophic_patterns_stop_at_their_budget(pattern: str, ignore_case: bool) -> None:
    """Python's re cannot be interrupted: its matching process is killed at the deadline. The
    text holds a match of each pattern after the run re backtracks over (a file without one is
    ruled out by the linear screen before re reads it)."""
    compiled = regex_compile(pattern, ignore_case)
    text = "first line\n" + "a" * 30_000 + "!\n" + "last line\n" + "a" * 12 + "\naab\na1\n"
    request = {"pattern": compiled.pattern, "flags": compiled.flags, "root": "/nonexistent", "max_bytes": 1 << 20, "max_matches": 10, "files": [{"path": "t", "text": text}]}
    started = time.monotonic()
    await run_matcher(request, time.monotonic() + 0.3)
    assert time.monotonic() - started < 2.0


@settings(max_examples=200, deadline=None)
@given(
    body=st.sampled_from(["a", "ab", "[ab]", r"\w", ".", "(?:a|b)"]),
    inner=st.integers(1, 100_000),
    outer=st.integers(1, 100_000),
    open_range=st.booleans(),
)
def test_nested_repeat_counts_compile_fast_or_are_refused(body: str, inner: int, outer: int, open_range: bool) -> None:
    """Fixed counts that multiply out past the bound are refused at once, the rest compile at once."""
    pattern = f"(?:{body}{{{inner}}}){{{outer}{',' if open_range else ''}}}"
    started = time.monotonic()
    try:
        regex_compile(pattern)
    except ValueError as exc:
        assert "multiply out" in str(exc) and inner * outer * len(body.strip("()?:|")) >= MAX_FIXED_EXPANSION // 3
    assert time.monotonic() - started < 1.0


@given(pattern=st.text(alphabet="ab()[]{}*+?|^$.\\-,0123456789:?=!<>PiLsmx#", max_size=25), ignore_case=st.booleans())
def test_any_pattern_compiles_or_is_a_value_error(pattern: str, ignore_case: bool) -> None:
    started = time.monotonic()
    try:
        regex_compile(pattern, ignore_case)
    except ValueError as exc:
        assert str(exc).startswith("invalid regex")
    assert time.monotonic() - started < 1.0


def _file_patterns() -> st.SearchStrategy[str]:
    """Patterns of Python re syntax, multi-line ones too: newlines, \\s, negated classes, (?s),
    braces that ``re`` reads as literal text, and ``[[:alpha:]]`` (a set to ``re``)."""
    atoms = st.sampled_from(
        ["a", "b", "c", ".", "[ab]", "[a-c]", r"\w", r"\d", r"\s", "[^a]", "\n", "^", "$", r"\b", "(?i:a)", "(?s:.)", "{d}", "{s}", "{e<=1}", "[[:alpha:]]", "[ \t]"]
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map("".join),
            st.tuples(inner, inner).map(lambda pair: f"(?:{pair[0]}|{pair[1]})"),
            st.tuples(inner, st.sampled_from(["?", "*", "+", "{2}", "{1,3}", "*?", "+?"])).map(lambda p: f"(?:{p[0]}){p[1]}"),
            inner.map(lambda body: f"({body})"),
        ),
        max_leaves=6,
    )


def _reference_lines(compiled: re.Pattern[str], text: str) -> list[tuple[int, str]]:
    """The lines holding a position where ``re`` matches the whole file's text, by brute force."""
    found = []
    start = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if any(compiled.match(text, position) for position in range(start, start + len(line) + 1)):
            found.append((number, line))
        start += len(line) + 1
    return found


@settings(max_examples=300, deadline=None)
@given(pattern=_file_patterns(), lines=st.lists(st.text(alphabet="abcAB1 _.{}\t:", max_size=12), min_size=1, max_size=6), ignore_case=st.booleans())
def test_line_matches_are_the_lines_re_matches(pattern: str, lines: list[str], ignore_case: bool) -> None:
    """Regex search is Python's ``re`` on the whole file: exactly the lines ``re`` matches."""
    try:
        compiled = regex_compile(pattern, ignore_case)
    except ValueError:
        assume(False)
        return
    text = "\n".join(lines)
    assert compiled.flags & re.MULTILINE
    assert line_matches(compiled, text, 100) == _reference_lines(compiled, text)


# ---- hostile regexes over HTTP -------------------------------------------------------------------


async def test_any_search_of_a_workspace_whose_root_is_gone_is_a_4xx_without_results(client: TestClient[Any, Any], settings: Settings) -> None:
    """Every combination of scope path (through links, a loop, out of the root), glob, mode and
    regex, on a workspace whose root was deleted and then replaced by a file: a 4xx (409 when the
    body itself is valid), never a 5xx, never a stale result."""
    root = settings.allowed_roots[0] / "vanishing"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.py").write_text("def handler():\n    return 1\n")
    os.symlink(root / "loop", root / "loop")
    workspace = await register(client, root)
    await wait_indexed(client, workspace["id"])
    paths = [None, ".", "a", "a/x.py", "loop", "loop/x", "../..", "/etc", "x" * 300, "a/\x00"]
    bodies = [
        {"query": query, "path": path, "glob": glob, "mode": mode, "regex": regex}
        for path in paths
        for glob in (None, "*.py", "**/x")
        for query, regex in (("handler", False), ("hand.*", True), ("(", True))
        for mode in ("hybrid", "lexical")
    ]
    for replace_root in (lambda: shutil.rmtree(root), lambda: root.write_text("a file now\n")):
        replace_root()
        for body in bodies:
            response = await client.post(f"/v1/workspaces/{workspace['id']}/search", json=body, headers=ALICE)
            answer = orjson.loads(await response.read())
            assert 400 <= response.status < 500 and "results" not in answer, (body, response.status, answer)
            if response.status == 409:
                assert answer["error"]["code"] == "workspace_missing"
        plain = await client.post(f"/v1/workspaces/{workspace['id']}/search", json={"query": "handler"}, headers=ALICE)
        assert plain.status == 409


async def test_hostile_regexes_over_http_answer_in_bounded_time(client: TestClient[Any, Any], settings: Settings) -> None:
    root = settings.allowed_roots[0] / "hostile"
    root.mkdir()
    (root / "long.txt").write_text("start\n" + "a" * 50_000 + "!\nend\naa\n")  # a match after the run (else the screen rules the file out)
    (root / "small.py").write_text("def handler():\n    return 'aaaa'\n")
    workspace = await register(client, root)
    await wait_indexed(client, workspace["id"])

    started = time.monotonic()
    hostile = asyncio.create_task(search(client, workspace["id"], query=r"(a+)+$", regex=True))
    # Client and server share this event loop: a stalled loop shows as a long gap between probes.
    gaps: list[float] = []
    last = time.monotonic()
    while not hostile.done():
        assert (await client.get("/healthz")).status == 200
        await asyncio.sleep(0.05)
        gaps.append(time.monotonic() - last)
        last = time.monotonic()
    stopped = await hostile
    assert time.monotonic() - started < 15  # the 5 s regex budget plus slack, far below the request deadline
    assert any("regex search stopped" in notice for notice in stopped["notices"]), stopped["notices"]
    assert len(gaps) > 20 and max(gaps) < 1.0, f"the server stalled {max(gaps):.1f}s behind one hostile regex"

    for pattern in [r"(?:a{9999}){9999}", r"(?:[ab]{99999}){99999}", "a{65535}" * 40]:
        started = time.monotonic()
        refused = await search(client, workspace["id"], expect=400, query=pattern, regex=True)
        assert refused["error"]["code"] == "invalid_regex" and "multiply out" in refused["error"]["message"]
        assert time.monotonic() - started < 2

    plain = await search(client, workspace["id"], query=r"return '(a+)+'", regex=True)
    assert plain["results"] == [] or all(r["path"] == "small.py" for r in plain["results"])
    found = await search(client, workspace["id"], query=r"def \w+\(\)", regex=True)
    assert [(r["path"], r["line"]) for r in found["results"]] == [("small.py", 1)]


async def test_hostile_regexes_leave_the_model_its_threads(client: TestClient[Any, Any], settings: Settings) -> None:
    """Regex matches run in their own processes (two at a time), not in the default pool where the
    model encodes: with eight hostile searches running at once, a query embedding still finishes
    before any of them."""
    root = settings.allowed_roots[0] / "hostile-many"
    root.mkdir()
    (root / "long.txt").write_text("start\n" + "a" * 50_000 + "!\nend\naa\n")  # a match after the run (else the screen rules the file out)
    workspace = await register(client, root)
    await wait_indexed(client, workspace["id"])
    embedder = client.app[ENGINE].embedders.default
    assert embedder is not None
    await embedder.embed_query("load the model before the race")

    hostile = [asyncio.create_task(search(client, workspace["id"], query=r"(a+)+$", regex=True)) for _ in range(8)]
    await asyncio.sleep(0.5)  # each is matching (or queued) now, for up to its 5 s budget
    assert not any(task.done() for task in hostile)
    vector = await embedder.embed_query("a query nobody embedded before: rotate the log files")
    assert len(vector) == 384
    assert not any(task.done() for task in hostile), "the query embedding waited for the hostile regexes"
    answers = await asyncio.gather(*hostile)
    assert all(any("regex search stopped" in notice for notice in answer["notices"]) for answer in answers)
