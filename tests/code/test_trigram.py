"""The trigram prefilter: index lifecycle, literal and regex candidates, soundness, matching."""

from __future__ import annotations

import re
import sysconfig
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.code.chunker import chunk_file
from service.code.lexical import run_matcher
from service.code.pattern import regex_compile
from service.code.prefilter import AllOf, AnyOf, Requirement, line_requirement, required_literals
from service.code.rematch import line_matches
from service.code.trigram import (
    COUNTED_TERMS,
    TERMS_TOKENIZER,
    TRIGRAM_TOKENIZER,
    IndexLocked,
    Place,
    TrigramIndex,
    Within,
    terms_analyzer,
    trigram_analyzer,
    trigrams,
)
from service.engine.analyzer import terms_text

DOCS = {
    "a#1": ("src/a.py", "def getUserById(user_id):\n    return db.fetch(user_id)\n"),
    "a#2": ("src/a.py", "class UserRepository:\n    pass\n"),
    "b#1": ("src/b.go", "func ParseConfig(path string) (*Config, error) {\n\treturn nil, nil\n}\n"),
    "c#1": ("docs/readme.md", "Colour and color are both spelled here. naïve café\n"),
    "d#1": ("src/d.rs", "fn kullanıcı() -> Straße { todo!() }\n"),
}


def literal_keys(index: TrigramIndex, literal: str, limit: int) -> list[str] | None:
    """The literal's candidate chunks, without their places."""
    places = index.literal_places(literal, limit)
    return None if places is None else list(places)


@pytest.fixture
def index(tmp_path: Path) -> TrigramIndex:
    opened = TrigramIndex.open(tmp_path / "trigram")
    opened.add((chunk_id, path, text, terms_text(text), 1, None) for chunk_id, (path, text) in DOCS.items())
    opened.commit()
    yield opened
    opened.close()


def test_literal_candidates_are_case_insensitive(index: TrigramIndex) -> None:
    assert sorted(literal_keys(index, "getuserbyid", 10) or []) == ["a#1"]
    assert sorted(literal_keys(index, "USER", 10) or []) == ["a#1", "a#2"]
    assert literal_keys(index, "nothing like this", 10) == []


def test_short_literals_cannot_be_prefiltered(index: TrigramIndex) -> None:
    assert literal_keys(index, "db", 10) is None
    assert literal_keys(index, "", 10) is None


def test_literal_candidates_respect_the_limit(index: TrigramIndex) -> None:
    assert len(literal_keys(index, "user", 1) or []) == 1


def test_folding_keeps_unicode_case_equivalents_together(index: TrigramIndex) -> None:
    # re.IGNORECASE matches "kullanici" in "kullanıcı" (ı ~ i): the prefilter must not lose it.
    assert re.search("kullanici", DOCS["d#1"][1], re.IGNORECASE)
    assert literal_keys(index, "kullanici", 10) == ["d#1"]
    assert literal_keys(index, "CAFÉ", 10) == ["c#1"]


def test_regex_candidates(index: TrigramIndex) -> None:
    assert sorted(index.candidates_regex(r"colou?r", 10) or []) == ["c#1"]
    assert sorted(index.candidates_regex(r"func \w+\(path", 10) or []) == ["b#1"]
    assert sorted(index.candidates_regex(r"(Parse|get)(Config|User)", 10) or []) == ["a#1", "b#1"]
    assert index.candidates_regex(r"\w+", 10) is None
    assert index.candidates_regex(r"ab|c", 10) is None


def test_deleted_paths_leave_the_index(index: TrigramIndex) -> None:
    index.delete_paths(["src/a.py"])
    assert sorted(literal_keys(index, "user", 10) or []) == ["a#1", "a#2"]  # not committed yet

    index.commit()

    assert literal_keys(index, "user", 10) == []
    assert index.num_docs == 3


def test_a_second_writer_is_refused_and_the_index_reopens(tmp_path: Path) -> None:
    directory = tmp_path / "trigram"
    first = TrigramIndex.open(directory)
    first.add([("x#1", "x.py", "hello world", "hello world", 1, None)])
    first.commit()
    with pytest.raises(IndexLocked):
        TrigramIndex.open(directory)
    first.close()

    with TrigramIndex.open(directory) as reopened:
        assert literal_keys(reopened, "hello", 10) == ["x#1"]


def test_an_index_with_another_schema_is_rebuilt(tmp_path: Path) -> None:
    import tantivy

    directory = tmp_path / "trigram"
    directory.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("other", stored=True)
    stale = tantivy.Index(builder.build(), path=str(directory))
    writer = stale.writer(heap_size=15_000_000, num_threads=1)
    writer.add_document(tantivy.Document(other=["x"]))
    writer.commit()
    del writer, stale

    with TrigramIndex.open(directory) as rebuilt:
        assert rebuilt.num_docs == 0
        rebuilt.add([("y#1", "y.py", "fresh text", "fresh text", 1, None)])
        rebuilt.commit()
        assert literal_keys(rebuilt, "fresh", 10) == ["y#1"]


def test_a_literals_candidates_come_with_their_places(tmp_path: Path) -> None:
    with TrigramIndex.open(tmp_path / "trigram") as opened:
        opened.add([("m#12", "pkg/m.py", "def load_user(x):\n    return x", "", 12, "Store.load_user"), ("n#1", "n.py", "load_user = None", "", 1, None)])
        opened.commit()
        assert opened.literal_places("load_user", 10) == {"m#12": Place("pkg/m.py", 12, "Store.load_user"), "n#1": Place("n.py", 1, None)}
        assert opened.literal_places("lo", 10) is None


def test_an_index_without_places_is_rebuilt(tmp_path: Path) -> None:
    """An index written before chunks' places were stored in it (the same fields less those) is
    taken as stale: it opens empty, and the workspace refills it from its chunk cache."""
    import tantivy

    directory = tmp_path / "trigram"
    directory.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("path", stored=True, fast=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("dirs", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("terms", tokenizer_name=TERMS_TOKENIZER, index_option="freq")
    builder.add_text_field("grams", tokenizer_name=TRIGRAM_TOKENIZER, index_option="basic")
    earlier = tantivy.Index(builder.build(), path=str(directory))
    earlier.register_tokenizer(TRIGRAM_TOKENIZER, trigram_analyzer())
    earlier.register_tokenizer(TERMS_TOKENIZER, terms_analyzer())
    writer = earlier.writer(heap_size=15_000_000, num_threads=1)
    writer.add_document(tantivy.Document(chunk_id=["x#1"], path=["x.py"], dirs=[""], terms=["x"], grams=["x"]))
    writer.commit()
    del writer, earlier

    with TrigramIndex.open(directory) as rebuilt:
        assert rebuilt.num_docs == 0


def test_a_closed_index_refuses_writes(tmp_path: Path) -> None:
    opened = TrigramIndex.open(tmp_path / "trigram")
    opened.close()
    with pytest.raises(RuntimeError, match="closed"):
        opened.add([("x", "x", "x", "x", 1, None)])


# --- BM25 ranking ------------------------------------------------------------------------------

RANKED = {
    "r#1": ("pkg/orders/refund.py", "refund refund order customer"),
    "r#2": ("pkg/orders/ship.py", "ship order customer"),
    "r#3": ("pkg/billing/invoice.py", "invoice customer refund"),
    "r#4": ("top.py", "refund"),
    "r#5": ("pkg/billing/tax.py", "tax rate"),
}


@pytest.fixture
def ranked_index(tmp_path: Path) -> TrigramIndex:
    opened = TrigramIndex.open(tmp_path / "lexical")
    opened.add((key, path, terms, terms, 1, None) for key, (path, terms) in RANKED.items())
    opened.commit()
    yield opened
    opened.close()


def test_bm25_ranks_by_term_frequency_and_rarity_and_skips_chunks_without_a_term(ranked_index: TrigramIndex) -> None:
    found = ranked_index.ranked(["refund", "customer"], 10)
    keys = [hit.key for hit in found]
    assert set(keys) == {"r#1", "r#2", "r#3", "r#4"}  # r#5 holds neither term
    assert keys[0] == "r#1"  # both terms, "refund" twice
    assert [hit.score for hit in found] == sorted((hit.score for hit in found), reverse=True)
    # "customer" is in three chunks of five, "refund" in three: the two-term chunk outranks the one-term ones.
    assert keys.index("r#3") < keys.index("r#2")
    assert ranked_index.ranked(["nothing"], 10) == [] and ranked_index.ranked([], 10) == []


def test_bm25_counts_the_distinct_query_terms_each_hit_holds(ranked_index: TrigramIndex) -> None:
    held = {hit.key: hit.terms_held for hit in ranked_index.ranked(["refund", "customer", "refund", "order"], 10)}
    assert held == {"r#1": 3, "r#2": 2, "r#3": 2, "r#4": 1}
    assert {hit.key: hit.terms_held for hit in ranked_index.ranked(["tax"], 10)} == {"r#5": 1}


def test_a_long_query_counts_the_terms_held_among_its_first_terms_and_ranks_by_all(ranked_index: TrigramIndex) -> None:
    absent = [f"absent{n}" for n in range(COUNTED_TERMS - 1)]
    found = ranked_index.ranked(["refund", *absent, "tax"], 10)  # "tax" is past the counted terms
    assert {hit.key: hit.terms_held for hit in found} == {"r#1": 1, "r#3": 1, "r#4": 1, "r#5": 0}, "r#5 ranks by 'tax' alone"


def test_bm25_stays_within_a_directory_a_file_or_a_set_of_files(ranked_index: TrigramIndex) -> None:
    def keys(within: Within) -> set[str]:
        return {hit.key for hit in ranked_index.ranked(["refund", "customer", "tax"], 10, within)}

    assert keys(Within(directory="pkg")) == {"r#1", "r#2", "r#3", "r#5"}
    assert keys(Within(directory="pkg/billing")) == {"r#3", "r#5"}
    assert keys(Within(directory="pkg/bill")) == set()  # a directory, not a string prefix
    assert keys(Within(path="pkg/orders/ship.py")) == {"r#2"}
    assert keys(Within(paths=("top.py", "pkg/billing/tax.py"))) == {"r#4", "r#5"}
    assert keys(Within()) == set(RANKED)


def test_bm25_keeps_its_limit_and_sees_deletions_after_a_commit(ranked_index: TrigramIndex) -> None:
    best = ranked_index.ranked(["refund"], 10)[0]
    assert ranked_index.ranked(["refund"], 1) == [best]
    ranked_index.delete_paths(["pkg/orders/refund.py"])
    ranked_index.commit()
    assert "r#1" not in {hit.key for hit in ranked_index.ranked(["refund"], 10)}


# --- literal extraction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("foo", "foo"),
        ("fo", None),
        (r"foo\w+bar", AllOf(("foo", "bar"))),
        ("colou?r", AnyOf(("color", "colour"))),
        ("(foo|bar)baz", AnyOf(("barbaz", "foobaz"))),
        ("(?i)HeLLo", "hello"),
        (r"^import (os|sys)$", AnyOf(("import os", "import sys"))),
        (r"\d+", None),
        ("a.*b", None),
        ("x|yz", None),
        ("(ab){3}", "ababab"),
        ("[[:alpha:]]abc", None),  # re warns of a possible nested set: no prefilter
        ("abc{e<=1}", "abc{e<=1}"),  # literal text in re
        ('"{d}', '"{d}'),
        ("{self.x}", AllOf(("{self",))),
        ("(unclosed", None),
    ],
)
def test_required_literals(pattern: str, expected: Requirement | None) -> None:
    assert required_literals(pattern) == expected


def satisfies(requirement: Requirement | None, text: str) -> bool:
    """Whether a text meets a requirement the way the index judges it: by trigrams."""
    if requirement is None:
        return True
    if isinstance(requirement, str):
        return set(trigrams(requirement)) <= set(trigrams(text))
    results = [satisfies(part, text) for part in requirement.parts]
    return all(results) if isinstance(requirement, AllOf) else any(results)


ATOMS = st.sampled_from(
    ["a", "b", "c", "ab", "abc", "A", "S", "k", "ı", ".", r"\w", "[ab]", "[a-c]", "[^a]", "(?:x|yz)"]
)


def regexes() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map("".join),
            st.tuples(inner, inner).map(lambda pair: f"(?:{pair[0]}|{pair[1]})"),
            st.tuples(inner, st.sampled_from(["?", "*", "+", "{2}", "{1,3}", "{0,2}", "+?"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"
            ),
            st.tuples(inner, inner, st.sampled_from(["?", "*", "{0,2}"])).map(lambda p: f"{p[0]}(?:{p[1]}){p[2]}"),
            inner.map(lambda body: f"({body})"),
        )

    return st.recursive(ATOMS, extend, max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), pattern=regexes(), ignore_case=st.booleans())
def test_every_match_meets_the_required_literals(data: st.DataObject, pattern: str, ignore_case: bool) -> None:
    compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    requirement = required_literals(pattern, ignore_case=ignore_case)
    for _ in range(4):  # several matches per pattern: the short ones break unsound extractions
        matched = data.draw(st.from_regex(compiled, fullmatch=True))
        context = data.draw(st.text(alphabet="abcxyz \n", max_size=5))
        assert satisfies(requirement, context + matched), (pattern, matched, requirement)


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("x(?:ab)+c", "xababc"),
        ("(?:abc)*d", "d"),
        ("a(?:bc){0,2}d", "ad"),
        ("(?:foo|)bar", "bar"),
        ("ab(?:cd)?ef", "abef"),
        ("[ab]{2}cd", "bacd"),
        ("(?i)kullanici", "KULLANıCı"),
        ("(?i)ſtring", "STRING"),
        ("a(?=bcd)bcd", "abcd"),
        ("(?:abc){2,}", "abcabcabc"),
    ],
)
def test_tricky_matches_meet_the_required_literals(pattern: str, match: str) -> None:
    assert re.fullmatch(pattern, match)
    assert satisfies(required_literals(pattern), match)


@settings(max_examples=100, deadline=None)
@given(
    word=st.text(alphabet="abcABCsSıſkK", min_size=3, max_size=6),
    haystack=st.text(alphabet="abcABCsSıſkK x", max_size=30),
)
def test_ignore_case_matches_always_share_trigrams(word: str, haystack: str) -> None:
    if re.search(re.escape(word), haystack, re.IGNORECASE):
        assert satisfies(required_literals(re.escape(word), ignore_case=True), haystack)


def test_candidates_cover_every_real_match(tmp_path: Path) -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chunks = [
        c
        for name in ("argparse.py", "json/decoder.py", "socket.py")
        for c in chunk_file(name, (stdlib / name).read_text())
    ]
    texts = {f"{c.path}#{c.start_line}": c.text for c in chunks}
    with TrigramIndex.open(tmp_path / "trigram") as index:
        index.add((chunk_id, chunk_id.split("#")[0], text, "", 1, None) for chunk_id, text in texts.items())
        index.commit()
        for pattern in [
            r"def \w+_action",
            r"(getaddrinfo|gethostbyname)",
            r"raise \w+Error\(",
            r"JSONDecodeError",
            r"self\.(_\w+)",
        ]:
            candidates = index.candidates_regex(pattern, 100_000)
            assert candidates is not None
            compiled = re.compile(pattern, re.IGNORECASE)
            truth = {chunk_id for chunk_id, text in texts.items() if compiled.search(text)}
            assert truth, pattern
            assert truth <= set(candidates), pattern
            assert len(candidates) < len(texts), pattern


# --- compiling and matching ----------------------------------------------------------------------


def test_invalid_patterns_raise_value_error_with_position() -> None:
    with pytest.raises(ValueError, match=r"position 2: missing \), unterminated subpattern"):
        regex_compile("ab(c")
    with pytest.raises(ValueError, match="bad escape"):
        regex_compile(r"\p{L}")  # valid for the regex module, not for re: the documented syntax is re's


def test_line_matches_give_line_numbers_and_texts() -> None:
    text = "import os\ndef first():\n    pass\n\ndef second(): return first()\nDEF third"
    pattern = regex_compile(r"^def (\w+)")

    assert line_matches(pattern, text, 10) == [(2, "def first():"), (5, "def second(): return first()")]
    assert line_matches(regex_compile("first"), text, 10) == [
        (2, "def first():"),
        (5, "def second(): return first()"),
    ]
    assert line_matches(regex_compile("def", ignore_case=True), text, 2) == [
        (2, "def first():"),
        (5, "def second(): return first()"),
    ]
    assert line_matches(regex_compile("absent"), text, 10) == []


async def test_catastrophic_backtracking_is_bounded() -> None:
    """Python's re backtracks (x+x+)+y for ages over a run of x before the match after it (the
    linear screen lets the file through: it holds a match): the matching process is killed at its
    deadline, and the files it answered before stay answered."""
    pattern = regex_compile(r"(x+x+)+y")
    files = [{"path": "ok.txt", "text": "xxy\n"}, {"path": "slow.txt", "text": "ok line\n" + "x" * 5_000 + "\nxxy\n"}]
    request = {"pattern": pattern.pattern, "flags": pattern.flags, "root": "/nonexistent", "max_bytes": 1 << 20, "max_matches": 10, "files": files}

    started = time.monotonic()
    run = await run_matcher(request, time.monotonic() + 0.5)

    assert time.monotonic() - started < 3.0
    assert run.timed_out and run.scanned == 1
    assert run.found == [(0, [(1, "xxy")])]


# --- file candidates: matches may cross chunks --------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("foo\nbar", AllOf(("foo", "bar"))),  # each line piece lies in some chunk
        ("ab\n  \nxyz", "xyz"),  # "ab" is short, "  " a blank line: no condition from them
        ("   \n\t\t\t", None),
        ("(?s)foo.*bar", AllOf(("foo", "bar"))),
        ("x|yz\nabc", None),
    ],
)
def test_line_requirement_keeps_only_pieces_of_non_blank_lines(pattern: str, expected: Requirement | None) -> None:
    assert line_requirement(required_literals(pattern)) == expected


# Blocks of valid Python, so the chunker cuts declarations apart; blank and whitespace-only lines between.
BLOCKS = st.sampled_from(
    ["def foo():\n    return bar", "", "   ", "\t", "class Baz:\n    def qux(self):\n        pass", "x = foo + bar  # baz", "def bar():\n    return 'foo baz'"]
)
PATTERN_PIECES = st.sampled_from(
    ["foo", "bar", "baz", "def", "return", "\n", "\n\n", "bar\n\ndef", ":\n    return", " ", "    ", ".*", "(?s:.*)", r"\s*", r"\w+", "[ \t]+", "^", "$", "(?:foo|qux)"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.lists(BLOCKS, min_size=1, max_size=12).map("\n".join), min_size=1, max_size=4),
    pieces=st.lists(PATTERN_PIECES, min_size=1, max_size=5),
    ignore_case=st.booleans(),
)
def test_file_candidates_never_drop_a_file_that_matches(tmp_path_factory: pytest.TempPathFactory, files: list[str], pieces: list[str], ignore_case: bool) -> None:
    """Chunked by the real chunker, indexed by chunk, the prefilter keeps every file whose whole
    text ``re`` matches, also where the match crosses chunks or blank lines between them."""
    pattern = "".join(pieces)
    compiled = regex_compile(pattern, ignore_case)
    with TrigramIndex.open(tmp_path_factory.mktemp("trigram")) as index:
        for number, text in enumerate(files):
            path = f"f{number}.py"
            index.add((f"{path}#{chunk.start_line}", path, chunk.text, "", chunk.start_line, chunk.symbol) for chunk in chunk_file(path, text))
        index.commit()
        candidates = index.candidate_paths(pattern, 10_000, ignore_case=ignore_case)
    matching = {f"f{number}.py" for number, text in enumerate(files) if compiled.search(text)}
    assert candidates is None or matching <= candidates, (pattern, candidates, matching)


def test_file_candidates_join_the_chunks_of_a_file(tmp_path: Path) -> None:
    with TrigramIndex.open(tmp_path / "trigram") as index:
        index.add([("a#1", "a.py", "def alpha():\n    return 1", "", 1, "alpha"), ("a#4", "a.py", "def beta():\n    return 2", "", 4, "beta"), ("b#1", "b.py", "def alpha(): pass", "", 1, "alpha")])
        index.commit()
        assert index.candidate_paths("(?s)alpha.*beta", 10) == {"a.py"}  # the two literals lie in two chunks
        # Without (?s) a match lies in one line, so in one chunk: no chunk holds both literals.
        assert index.candidate_paths("alpha.*beta", 10) == set()
        assert index.candidate_paths("def alpha.*pass", 10) == {"b.py"}
        assert index.candidate_paths("return 1\n\ndef beta", 10) == {"a.py"}
        assert index.candidate_paths("alpha|gamma", 10) == {"a.py", "b.py"}
        assert index.candidate_paths("alpha", 1) is None  # more chunks hold it than the limit: scan every file
        assert index.candidate_paths(r"\w+", 10) is None
