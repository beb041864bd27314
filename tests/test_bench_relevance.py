"""The relevance benchmark's pure parts: the bare BM25, the fixed-seed halves and the qrels files it writes."""

from __future__ import annotations

import math
from pathlib import Path

from bench.relevance_bare import BM25, bm25_rankings, tokenize
from bench.relevance_sets import halves, write_qrels
from service.evaluation import Judged, read_qrels


def test_the_tokenizer_splits_identifiers_at_case_changes_and_underscores() -> None:
    assert tokenize("getAuditEvents: list_repos HTTPServer v2") == ["get", "audit", "events", "list", "repos", "http", "server", "v", "2"]


def test_bm25_scores_follow_the_okapi_formula() -> None:
    texts = ["send email", "send send message", "weather forecast"]
    index = BM25(texts, k1=1.2, b=0.75)
    average = 7 / 3
    idf_send = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected_first = idf_send * 1 * 2.2 / (1 + 1.2 * (1 - 0.75 + 0.75 * 2 / average))
    expected_second = idf_send * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / average))
    scores = index.scores("send")
    assert math.isclose(scores[0], expected_first)
    assert math.isclose(scores[1], expected_second)
    assert 2 not in scores


def test_bm25_ranks_the_rarer_term_match_first_and_leaves_out_items_without_a_match() -> None:
    ids = ["a", "b", "c", "d"]
    texts = ["send an email to a friend", "send a message", "email templates", "weather forecast"]
    rankings = bm25_rankings(ids, texts, ["email templates", "unrelated words"], limit=3)
    assert rankings["email templates"][0] == "c"
    assert "d" not in rankings["email templates"]
    assert rankings["unrelated words"] == []


def test_halves_are_a_fixed_seed_shuffle_split_in_two() -> None:
    judged = [Judged(query=f"q{i}", relevant=(f"id{i}",)) for i in range(11)]
    first, again = halves(judged, seed=16), halves(judged, seed=16)
    assert first == again
    assert len(first.tuning) == 5 and len(first.report) == 6
    assert sorted(first.tuning + first.report, key=lambda j: int(j.query[1:])) == judged
    assert [j.query for j in first.tuning + first.report] != [j.query for j in judged]
    assert halves(judged, seed=17) != first


def test_qrels_files_read_back_as_the_judged_queries(tmp_path: Path) -> None:
    judged = [Judged(query="book a flight", relevant=("capability:FlightTool",)), Judged(query='news "and" stocks', relevant=("capability:NewsTool", "capability:FinanceTool"))]
    path = write_qrels(tmp_path / "qrels" / "multi-report.jsonl", judged)
    assert read_qrels(path) == judged
