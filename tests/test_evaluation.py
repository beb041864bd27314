"""``service.evaluation`` and ``agentsearch eval``: the metrics against hand-computed values, the qrels
file's refusals, and the command against a real running service and an in-process data directory."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from service.code.state import workspaces_of
from service.code.workspace import SearchConfig
from service.engine.queue import forget_deployment
from service.engine.startup import open_engine
from service.evaluation import (
    METRICS,
    DataDirTarget,
    EvaluationError,
    Judged,
    QueryFailed,
    all_at,
    evaluate,
    first_relevant_rank,
    mrr_at,
    ndcg_at,
    read_qrels,
    recall_at,
    scores_of,
    search_body,
)
from service.settings import Settings
from service.surfaces import surfaces
from tests.callers import ADMIN, OTHER_SECRET, token_for
from tests.helpers import REDIS_URL, ROOT, ServiceProcess, free_port, wait_until

# ---- metrics ------------------------------------------------------------------------------------------


def test_metrics_of_two_relevant_ids_one_repeated() -> None:
    """[a, x, b, a, y] for {a, b}: a at 1 and b at 3 (the second a counts nowhere)."""
    ranking, relevant = ["a", "x", "b", "a", "y"], ("a", "b")
    assert ndcg_at(ranking, relevant) == pytest.approx((1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))  # 0.9197
    assert ndcg_at(ranking, relevant) == pytest.approx(0.919721, abs=1e-6)
    assert recall_at(ranking, relevant) == 1.0
    assert mrr_at(ranking, relevant) == 1.0
    assert all_at(ranking, relevant) == 1.0


def test_repeated_ids_count_once_at_their_first_place() -> None:
    """Five copies of x then a: a is second, not sixth, so it is in the top 5."""
    ranking, relevant = ["x", "x", "x", "x", "x", "a"], ("a",)
    assert first_relevant_rank(ranking, relevant) == 2
    assert ndcg_at(ranking, relevant) == pytest.approx(1 / math.log2(3))
    assert recall_at(ranking, relevant) == 1.0
    assert mrr_at(ranking, relevant) == 0.5
    assert all_at(ranking, relevant) == 1.0


def test_metrics_of_three_relevant_ids_two_found_one_past_the_top_five() -> None:
    ranking, relevant = ["x", "a", "y", "z", "w", "v", "b"], ("a", "b", "c")
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(ranking, relevant) == pytest.approx((1 / math.log2(3) + 1 / math.log2(8)) / ideal)  # 0.4525
    assert ndcg_at(ranking, relevant) == pytest.approx(0.452509, abs=1e-6)
    assert recall_at(ranking, relevant) == pytest.approx(1 / 3)
    assert mrr_at(ranking, relevant) == 0.5
    assert all_at(ranking, relevant) == 0.0


def test_metrics_when_nothing_relevant_is_found() -> None:
    assert scores_of(["x", "y", "z"], ("a", "b")) == {"nDCG@10": 0.0, "Recall@5": 0.0, "MRR@10": 0.0, "all@5": 0.0}
    assert scores_of([], ("a",)) == {"nDCG@10": 0.0, "Recall@5": 0.0, "MRR@10": 0.0, "all@5": 0.0}
    assert first_relevant_rank(["x"], ("a",)) is None


def test_cutoffs_apply_past_ten_and_the_ideal_stops_at_ten() -> None:
    ranking = [f"x{i}" for i in range(10)] + ["a"]
    assert first_relevant_rank(ranking, ("a",)) == 11
    assert mrr_at(ranking, ("a",)) == 0.0 and ndcg_at(ranking, ("a",)) == 0.0
    many = tuple(f"r{i}" for i in range(12))
    assert ndcg_at(list(many[:10]), many) == pytest.approx(1.0)  # ten relevant at the top is ideal for a top 10
    assert recall_at(list(many[:10]), many) == pytest.approx(5 / 12)


# ---- qrels -----------------------------------------------------------------------------------------------


def test_read_qrels_reads_lines_skips_blank_ones_and_drops_repeated_ids(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "send mail", "relevant": ["capability:emailSend", "capability:emailSend", "capability:emailRead"]}\n\n{"query": "jobs", "relevant": ["capability:jobList"], "note": "kept aside"}\n')
    assert read_qrels(path) == [Judged("send mail", ("capability:emailSend", "capability:emailRead")), Judged("jobs", ("capability:jobList",))]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"query": "a", "relevant": ["x"]', "not JSON"),
        ('["a", ["x"]]', "expected an object"),
        ('{"relevant": ["x"]}', "query must be a non-empty string"),
        ('{"query": "  ", "relevant": ["x"]}', "query must be a non-empty string"),
        ('{"query": "a", "relevant": []}', "relevant must be a non-empty list"),
        ('{"query": "a", "relevant": "x"}', "relevant must be a non-empty list"),
        ('{"query": "a", "relevant": ["x", 3]}', "relevant must be a non-empty list"),
    ],
)
def test_read_qrels_names_the_bad_line_and_what_is_wrong(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "fine", "relevant": ["x"]}\n\n' + line + "\n")
    with pytest.raises(EvaluationError) as refused:
        read_qrels(path)
    assert f"{path}:3: " in str(refused.value) and reason in str(refused.value)


def test_read_qrels_refuses_an_empty_or_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(EvaluationError, match="has no judged query"):
        read_qrels(empty)
    with pytest.raises(EvaluationError, match="cannot read qrels file"):
        read_qrels(tmp_path / "absent.jsonl")


def run_eval(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m service eval ARGS`` from the repository root."""
    return subprocess.run([sys.executable, "-m", "service", "eval", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def test_a_bad_qrels_line_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "fine", "relevant": ["x"]}\n{"query": 7, "relevant": ["x"]}\n')
    done = run_eval("--surface", "catalog", "--qrels", str(path), "--url", f"http://127.0.0.1:{free_port()}", "--token", "t")
    assert done.returncode == 2, done
    assert done.stderr.strip() == f"agentsearch eval: {path}:2: query must be a non-empty string", done.stderr
    assert done.stdout == ""


def test_an_unreachable_service_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "fine", "relevant": ["x"]}\n')
    url = f"http://127.0.0.1:{free_port()}"
    done = run_eval("--surface", "catalog", "--qrels", str(path), "--url", url, "--token", "t")
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"agentsearch eval: cannot reach {url}") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


# ---- the report ----------------------------------------------------------------------------------------------


class FixedRankings:
    """A target with fixed answers per (mode, query); a query it has none for fails as a refused search would."""

    def __init__(self, answers: dict[tuple[str, str], list[str]]) -> None:
        self.answers = answers

    async def ranked(self, surface: str, query: str, mode: str, limit: int) -> list[str]:
        if (mode, query) not in self.answers:
            raise QueryFailed(f"400 validation_error: no answer for {query!r}")
        return self.answers[mode, query]


async def test_evaluate_averages_each_mode_counts_failures_and_orders_the_worst() -> None:
    judged = [Judged("q1", ("a",)), Judged("q2", ("b", "c")), Judged("q3", ("d",))]
    target = FixedRankings(
        {
            ("lexical", "q1"): ["a"],
            ("lexical", "q2"): ["b", "c"],
            ("lexical", "q3"): ["d"],
            ("served", "q1"): ["x", "y", "a"],
            ("served", "q2"): ["z", "z", "y", "x", "w", "v", "u", "t", "s", "r", "c"],
            ("served", "q3"): ["d", "x"],
        }
    )
    report = await evaluate(target, "catalog", judged, modes=("lexical", "served"), worst=5)
    assert report.scores["lexical"] == {"nDCG@10": 1.0, "Recall@5": 1.0, "MRR@10": 1.0, "all@5": 1.0}
    served = report.scores["served"]
    assert served["MRR@10"] == pytest.approx((1 / 3 + 1 / 10 + 1) / 3)
    assert served["nDCG@10"] == pytest.approx((0.5 + 1 / math.log2(11) / (1 + 1 / math.log2(3)) + 1) / 3)
    assert served["Recall@5"] == pytest.approx((1 + 0 + 1) / 3) and served["all@5"] == pytest.approx(2 / 3)
    assert report.answered == {"lexical": 3, "served": 3} and report.failures == {}
    assert [(w.query, w.first_relevant_rank, w.ranked_above) for w in report.worst] == [
        ("q2", 10, ("z", "y", "x", "w", "v")),  # "c" is tenth once the repeated z counts once
        ("q1", 3, ("x", "y")),
    ]
    table = report.table()
    assert "| served | 3/3 |" in table and "### Worst queries (served)" in table and "| q1 | 0.500 | 0.333 | 3 | `x`, `y` |" in table


async def test_evaluate_reports_failed_searches_and_scores_the_answered_ones() -> None:
    judged = [Judged("q1", ("a",)), Judged("q2", ("b",))]
    report = await evaluate(FixedRankings({("served", "q1"): ["a"], ("dense", "q1"): ["x"]}), "catalog", judged, modes=("dense", "served"))
    assert report.answered == {"dense": 1, "served": 1}
    assert {mode: (f.count, f.first_error) for mode, f in report.failures.items()} == {
        "dense": (1, "400 validation_error: no answer for 'q2'"),
        "served": (1, "400 validation_error: no answer for 'q2'"),
    }
    assert report.scores["served"]["nDCG@10"] == 1.0 and report.scores["dense"]["nDCG@10"] == 0.0
    assert report.worst_mode == "served" and report.worst == []  # q1 is perfect, q2 unanswered
    assert report.as_json()["failures"]["dense"] == {"count": 1, "first_error": "400 validation_error: no answer for 'q2'"}
    assert "dense: 1 of 2 searches failed; the first: 400 validation_error: no answer for 'q2'" in report.table()


def test_search_bodies_name_each_surface_s_modes() -> None:
    assert search_body("catalog", "q", "dense", 10) == {"query": "q", "limit": 10, "ranking": "dense"}
    assert search_body("actions", "q", "served", 10) == {"query": "q", "limit": 10, "include_catalog": True, "ranking": "served"}
    assert [search_body("code", "q", mode, 10)["mode"] for mode in ("lexical", "dense", "served")] == ["lexical", "semantic", "hybrid"]


# ---- against a real service ------------------------------------------------------------------------------

DOMAINS = [
    {"type": "domain", "id": "email", "description": "Send and read email."},
    {"type": "domain", "id": "jobs", "description": "Schedule and inspect background jobs."},
]
CAPABILITIES = [
    {"type": "capability", "id": "emailSend", "domain": "email", "summary": "Send an email message to one or more recipients."},
    {"type": "capability", "id": "emailList", "domain": "email", "summary": "List recent emails in the inbox."},
    {"type": "capability", "id": "emailRead", "domain": "email", "summary": "Read the full body of one email."},
    {"type": "capability", "id": "jobSchedule", "domain": "jobs", "summary": "Schedule a recurring background job with a cron expression."},
    {"type": "capability", "id": "jobList", "domain": "jobs", "summary": "List scheduled jobs and their last run."},
]
QRELS = [
    {"query": "emailSend", "relevant": ["capability:emailSend"]},
    {"query": "jobSchedule", "relevant": ["capability:jobSchedule"]},
    {"query": "run a background job every night on a cron schedule", "relevant": ["capability:jobSchedule"]},
    {"query": "read an email then send a reply", "relevant": ["capability:emailRead", "capability:emailSend"]},
    {"query": "emailList", "relevant": ["capability:noSuchCapability"]},
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServiceProcess]:
    """A served ``agentsearch serve`` with its worker, the capabilities above loaded and embedded (one
    for the module: starting it costs seconds)."""
    base, prefix = tmp_path_factory.mktemp("eval-service"), f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    served = ServiceProcess(base / "data", base / "service.log", AGENTSEARCH_QUEUE_PREFIX=prefix)
    try:
        await served.start()
        async with aiohttp.ClientSession(headers=ADMIN) as session:
            async with session.put(f"{served.url}/v1/catalog/entities", json={"entities": DOMAINS + CAPABILITIES}) as response:
                assert response.status == 200, await response.text()

            async def embedded() -> bool:
                async with session.get(f"{served.url}/v1/index/status") as response:
                    counts = (await response.json())["surfaces"]["catalog"]
                return bool(counts["records"] and counts["pending"] == 0)

            await wait_until(embedded, timeout_s=120)
        yield served
    finally:
        served.stop()
        redis = aioredis.from_url(REDIS_URL)
        try:
            await forget_deployment(redis, prefix)
        finally:
            await redis.aclose()


async def rankings_of(url: str, token: str, mode: str) -> list[list[str]]:
    """Each qrels query's catalog ranking in ``mode``, as the test itself asks the service for it."""
    found = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        for item in QRELS:
            async with session.post(f"{url}/v1/catalog/search", json={"query": item["query"], "limit": 10, "ranking": mode}) as response:
                body: dict[str, Any] = await response.json()
                assert response.status == 200, body
            found.append(list(dict.fromkeys(r["entity"] for r in body["structuredContent"]["results"])))
    return found


@pytest.mark.asyncio(loop_scope="module")
async def test_eval_command_scores_a_running_service_s_catalog(service: ServiceProcess, tmp_path: Path) -> None:
    """``agentsearch eval --surface catalog --url --token --json`` gives, per mode, the means of the
    metrics of the rankings the service answers; exact names lead their answers; a query whose
    relevant id is nowhere is the worst, with what the service ranked instead."""
    qrels = tmp_path / "qrels.jsonl"
    qrels.write_text("".join(json.dumps(item) + "\n" for item in QRELS))
    token = token_for("evaluator", plan="max")
    done = run_eval("--surface", "catalog", "--qrels", str(qrels), "--url", service.url, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["surface"] == "catalog" and report["queries"] == len(QRELS) and report["failures"] == {}
    assert report["answered"] == {"lexical": 5, "dense": 5, "served": 5}
    for mode in ("lexical", "dense", "served"):
        ranked = await rankings_of(service.url, token, mode)
        per_query = [scores_of(r, item["relevant"]) for r, item in zip(ranked, QRELS, strict=True)]
        assert report["scores"][mode] == pytest.approx({m: sum(s[m] for s in per_query) / len(QRELS) for m in METRICS}), mode
        for name_query in (0, 1):
            # An exact capability name is the top hit where words are matched (BM25, and the served
            # ranking's identity bonus); the model alone only has to place it among its first two.
            place = 1 if mode != "dense" else 2
            assert QRELS[name_query]["relevant"][0] in ranked[name_query][:place], (mode, ranked[name_query])
    served = await rankings_of(service.url, token, "served")
    worst = report["worst"]
    assert report["worst_mode"] == "served"
    assert worst[0] == {
        "query": "emailList",
        "relevant": ["capability:noSuchCapability"],
        "nDCG@10": 0.0,
        "MRR@10": 0.0,
        "first_relevant_rank": None,
        "ranked_above": served[4][:5],
    }
    assert served[4][0] == "capability:emailList"
    assert all(w["query"] not in ("emailSend", "jobSchedule") for w in worst)

    table = run_eval("--surface", "catalog", "--qrels", str(qrels), "--url", service.url, "--modes", "served", env={**_env(), "AGENTSEARCH_TOKEN": token})
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("## catalog: 5 judged queries, top 10\n") and "| served | 5/5 |" in table.stdout
    assert "| emailList | 0.000 | 0.000 | not in top 10 | `capability:emailList`" in table.stdout


@pytest.mark.asyncio(loop_scope="module")
async def test_eval_command_exits_2_on_a_refused_token(service: ServiceProcess, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.jsonl"
    qrels.write_text(json.dumps(QRELS[0]) + "\n")
    done = run_eval("--surface", "catalog", "--qrels", str(qrels), "--url", service.url, "--token", token_for("evaluator", secret=OTHER_SECRET))
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"agentsearch eval: {service.url} refused the token: 401 unauthorized: bad signature"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# ---- against a data directory -------------------------------------------------------------------------------


async def test_data_dir_target_scores_a_workspace_and_reports_an_unknown_one(settings: Settings) -> None:
    """Code search in this process on a data directory: a workspace registered for the evaluating user,
    judged lexically at file level; an id of no workspace fails every search, each counted."""
    root = settings.allowed_roots[0] / "shop"
    (root / "billing").mkdir(parents=True)
    (root / "billing" / "refunds.py").write_text("def refund_payment(payment_id, reason):\n    return {'refunded': payment_id, 'why': reason}\n")
    (root / "billing" / "invoices.py").write_text("def compute_invoice_total(lines, tax_rate):\n    return sum(lines) * (1 + tax_rate)\n")
    (root / "shipping.py").write_text("def print_shipping_label(order):\n    return f'label for {order}'\n\n\ndef refund_shipping(order):\n    return refund_payment(order, 'lost')\n")
    engine = await open_engine(settings, surfaces())
    try:
        workspace, _ = await workspaces_of(engine).register("user:eval", root, SearchConfig())
        await workspaces_of(engine).revalidate(workspace, force=True)
    finally:
        await engine.close()
    judged = [
        Judged("compute_invoice_total", ("billing/invoices.py",)),
        Judged("print_shipping_label", ("shipping.py",)),
        Judged("refund_payment", ("billing/refunds.py", "shipping.py")),
    ]
    async with DataDirTarget(settings, workspace=workspace.id) as target:
        rankings = [await target.ranked("code", item.query, "lexical", 10) for item in judged]
        report = await evaluate(target, "code", judged, modes=("lexical",))
    assert rankings[0][0] == "billing/invoices.py" and rankings[1][0] == "shipping.py"
    assert set(rankings[2][:2]) == {"billing/refunds.py", "shipping.py"}  # the definition and its caller, each file once
    assert report.answered == {"lexical": 3} and report.failures == {}
    assert report.scores["lexical"] == {"nDCG@10": 1.0, "Recall@5": 1.0, "MRR@10": 1.0, "all@5": 1.0}

    async with DataDirTarget(settings, workspace="ws_" + "0" * 20) as target:
        unknown = await evaluate(target, "code", judged[:2], modes=("lexical",))
    assert unknown.answered == {"lexical": 0} and unknown.failures["lexical"].count == 2
    assert unknown.failures["lexical"].first_error.startswith("404 not_found: "), unknown.failures
