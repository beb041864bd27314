"""Relevance benchmark: every search surface on the public dev sets, served and against the bare model, as markdown tables.

For each dev set (bench/relevance_sets.py: MetaTool single- and multi-tool as catalog capabilities,
CoSQA dev as a code workspace, APIs.guru known-item queries as actions), ranked top 10:

- bare dense: the MiniLM model alone, cosine over each item's own plain text; bare BM25: a plain
  BM25 over the same texts (bench/relevance_bare.py; no service code in either);
- lexical, dense and served: the service's own modes, as ``agentsearch eval`` asks them
  (``service.evaluation``), from a service started as its own process on this checkout and loaded
  over HTTP (bench/relevance_served.py);
- served (baseline), with ``--baseline-tree PATH``: the served ranking of another checkout's service,
  started the same way after this one's, asked without the ``ranking`` request field;
- the gain of served over bare dense (and over the baseline).

Metrics: nDCG@10, Recall@5, MRR@10, and all@5 ("both in top 5") for the multi-tool set; every score
comes from ``service.evaluation``'s metric functions, the bare rankings' too. Each set is shuffled
with a fixed seed and split in halves: the tuning half and the report half, printed apart. The
served query latency p50 per set times every served search, one at a time, as the client sees it;
served runs before the channels, so each query meets the model uncached, as a new caller's does.
The judged queries of each set and half are written as qrels files, for ``agentsearch eval``.

    python -m bench.bench_relevance                      # MetaTool sample of 1,000 queries, 200 action queries per kind
    python -m bench.bench_relevance --full               # every MetaTool query and every qualifying action
    python -m bench.bench_relevance --sets catalog,multi --quick --baseline-tree ../before
    python -m bench.bench_relevance --work-dir /tmp/rel  # keep data dirs, vectors and qrels between runs

Cost on 2 cores: the service embeds CoSQA's 6,267 snippets in about 8 minutes (each service, each
fresh data directory; a kept ``--work-dir`` re-embeds only what changed), and this process encodes
them once more for bare dense (kept in ``--work-dir`` too); ``--quick`` uses a 1,500-snippet subset
holding every gold snippet instead, and ``--sets`` picks sets. The machine's load moves latencies:
compare the served and baseline p50 of one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import machine, percentile, versions
from bench.relevance_bare import K1, B, BareModel, bm25_rankings, dense_rankings
from bench.relevance_served import ServiceUnderTest, Timed, WithoutRankingField
from bench.relevance_sets import (
    ACTIONS_PER_KIND,
    CATALOG_SAMPLE,
    SEED,
    SETS,
    DevSet,
    Halves,
    action_templates,
    actions_set,
    catalog_set,
    code_set,
    halves,
    metatool_tools,
    multi_set,
    write_qrels,
    write_tree,
)
from service.evaluation import METRICS, HttpTarget, Judged, evaluate, scores_of

TREE = Path(__file__).resolve().parents[1]
HALF_NAMES = ("report", "tuning")
BARE_TEXT = {"catalog": '"name: description"', "multi": '"name: description"', "code": "the snippet", "actions": '"action name: description"'}
GOAL_NDCG_GAIN = 0.05
GOAL_ALL5_GAIN = 0.15
CONCURRENCY = 2  # lexical and dense; served searches run one at a time, so their latency is a client's


@dataclass
class SetResult:
    """One dev set's scores: ranking -> half -> metric, with the served latencies and any failures."""

    dev: DevSet
    halves: Halves
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def half(self, name: str) -> tuple[Judged, ...]:
        return self.halves.report if name == "report" else self.halves.tuning


def mean_scores(rankings: dict[str, list[str]], judged: Sequence[Judged]) -> dict[str, float]:
    per_query = [scores_of(rankings[j.query], j.relevant) for j in judged]
    return {metric: sum(s[metric] for s in per_query) / len(per_query) for metric in METRICS} if per_query else {}


def dev_sets(chosen: Sequence[str], *, full: bool, quick: bool) -> list[DevSet]:
    built: dict[str, Callable[[], DevSet]] = {
        "catalog": lambda: catalog_set(None if full else CATALOG_SAMPLE),
        "multi": multi_set,
        "code": lambda: code_set(quick=quick),
        "actions": lambda: actions_set(action_templates(), None if full else ACTIONS_PER_KIND),
    }
    return [built[key]() for key in SETS if key in chosen]


def score_bare(results: list[SetResult], model: BareModel) -> None:
    """Bare dense and bare BM25 over each set's items, scored per half."""
    for result in results:
        dev = result.dev
        ids, texts = list(dev.items), list(dev.items.values())
        queries = [j.query for j in dev.judged]
        started = time.perf_counter()
        rankings = {"bare dense": dense_rankings(model, ids, texts, queries), "bare BM25": bm25_rankings(ids, texts, queries)}
        for label, ranked in rankings.items():
            result.scores[label] = {half: mean_scores(ranked, result.half(half)) for half in HALF_NAMES}
        say(f"bare rankings of {dev.key}: {time.perf_counter() - started:.0f} s")


async def score_served(results: list[SetResult], service: ServiceUnderTest, *, baseline: bool) -> None:
    """Score every set on ``service``: lexical, dense and served, or (a baseline) served alone."""
    label = "served (baseline)" if baseline else "served"
    for result in results:
        dev = result.dev
        workspace = service.workspace if dev.surface == "code" else None
        async with HttpTarget(service.url, service.user_token, workspace=workspace) as target, WithoutRankingField(service) as legacy:
            timed = Timed(legacy if baseline else target)
            for half in HALF_NAMES:
                judged = result.half(half)
                # Served first: its searches meet the query embedding uncached, as a new caller's query does.
                served = await evaluate(timed, dev.surface, judged, modes=("served",), worst=0, concurrency=1)
                result.scores.setdefault(label, {})[half] = served.scores.get("served", {})
                result.failures += [f"{dev.key} {half} {label}: {f.count} failed, first: {f.first_error}" for f in served.failures.values()]
                if not baseline:
                    channels = await evaluate(target, dev.surface, judged, modes=("lexical", "dense"), worst=0, concurrency=CONCURRENCY)
                    for mode in ("lexical", "dense"):
                        result.scores.setdefault(f"service {mode}", {})[half] = channels.scores.get(mode, {})
                    result.failures += [f"{dev.key} {half} {mode}: {f.count} failed, first: {f.first_error}" for mode, f in channels.failures.items()]
        result.latency_ms[label] = timed.ms
        say(f"{label} rankings of {dev.key}: p50 {percentile(timed.ms, 50):.1f} ms over {len(timed.ms)} searches")


async def serve_and_score(results: list[SetResult], tree: Path, work: Path, *, baseline: bool, code_root: Path | None) -> None:
    name = "baseline" if baseline else "served"
    started = time.perf_counter()
    (work / "trees").mkdir(parents=True, exist_ok=True)
    async with ServiceUnderTest(tree, work / f"data-{name}", allow_root=work / "trees", label=name) as service:
        surfaces = {r.dev.surface for r in results}
        if "catalog" in surfaces:
            await service.load_tools(metatool_tools())
        if "actions" in surfaces:
            await service.load_templates(action_templates())
        if code_root is not None:
            await service.register_workspace(code_root)
        waited = await service.wait_embedded(tuple(s for s in ("catalog", "actions") if s in surfaces))
        say(f"{name} service ({tree}) loaded and embedded in {time.perf_counter() - started:.0f} s (waited {waited:.0f} s for embeddings)")
        await score_served(results, service, baseline=baseline)


def say(text: str) -> None:
    print(f"[relevance] {text}", file=sys.stderr, flush=True)


def write_all_qrels(results: list[SetResult], folder: Path) -> Path:
    for result in results:
        for half in HALF_NAMES:
            write_qrels(folder / f"{result.dev.key}-{half}.jsonl", result.half(half))
    return folder


# ---- report ------------------------------------------------------------------------------------------


def _cell(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def set_table(result: SetResult, baseline: bool) -> list[str]:
    dev = result.dev
    metrics = [m for m in METRICS if m != "all@5" or dev.all_at_5]
    rows = ["bare dense", "bare BM25", "service lexical", "service dense", "served"] + (["served (baseline)"] if baseline else [])
    lines = [
        f"#### {dev.title}",
        "",
        f"Bare rankings over {BARE_TEXT[dev.key]}; halves of a seed-{SEED} shuffle: tuning {len(result.halves.tuning)} queries, report {len(result.halves.report)}. "
        + "; ".join(f"{label} p50 {percentile(ms, 50):.1f} ms ({len(ms)} searches)" for label, ms in result.latency_ms.items())
        + ".",
        "",
        "| half | ranking | " + " | ".join(metrics) + " |",
        "|---|---|" + "---:|" * len(metrics),
    ]
    for half in HALF_NAMES:
        for row in rows:
            values = result.scores.get(row, {}).get(half, {})
            lines.append(f"| {half} | {row} | " + " | ".join(_cell(values.get(m)) for m in metrics) + " |")
        for minus in ["bare dense"] + (["served (baseline)"] if baseline else []):
            served, other = result.scores.get("served", {}).get(half, {}), result.scores.get(minus, {}).get(half, {})
            gains = [served[m] - other[m] if m in served and m in other else None for m in metrics]
            lines.append(f"| {half} | served − {minus} | " + " | ".join(_cell(g, signed=True) for g in gains) + " |")
    lines += [f"- {failure}" for failure in result.failures]
    return [*lines, ""]


def summary_table(results: list[SetResult], baseline: bool) -> list[str]:
    def report_score(result: SetResult, row: str, metric: str = "nDCG@10") -> float | None:
        return result.scores.get(row, {}).get("report", {}).get(metric)

    head = "| set (report half) | bare dense | bare BM25 | served | served − bare dense | goal |"
    lines = [
        f"Summary, report halves, nDCG@10 (all@5 for the multi-tool row marked so); goals: served at least +{GOAL_NDCG_GAIN} over bare dense, all@5 +{GOAL_ALL5_GAIN}.",
        "",
        head[:-1] + ("| served (baseline) | served p50 ms | baseline p50 ms |" if baseline else "| served p50 ms |"),
        "|---|---:|---:|---:|---:|---|" + ("---:|---:|---:|" if baseline else "---:|"),
    ]
    for result in results:
        checks = [("nDCG@10", GOAL_NDCG_GAIN)] + ([("all@5", GOAL_ALL5_GAIN)] if result.dev.all_at_5 else [])
        for metric, goal in checks:
            bare, served = report_score(result, "bare dense", metric), report_score(result, "served", metric)
            gain = served - bare if served is not None and bare is not None else None
            met = "–" if gain is None else ("met" if gain >= goal else "not met")
            name = result.dev.key if metric == "nDCG@10" else f"{result.dev.key}, all@5"
            cells = [name, _cell(bare), _cell(report_score(result, "bare BM25", metric)), _cell(served), _cell(gain, signed=True), met]
            if baseline:
                cells.append(_cell(report_score(result, "served (baseline)", metric)))
            cells.append(f"{percentile(result.latency_ms.get('served', []), 50):.1f}")
            if baseline:
                cells.append(f"{percentile(result.latency_ms.get('served (baseline)', []), 50):.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def report(results: list[SetResult], *, qrels: Path, baseline: Path | None, full: bool, quick: bool) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    mode = "full" if full else "quick" if quick else "default"
    lines = [
        f"### Relevance on the dev sets ({mode} mode)",
        "",
        f"Machine: {machine()} (load average {load:.1f} at the end); {versions()}.",
        "Served: `python -m service serve` from this checkout"
        + (f" and, as the baseline, from {baseline}" if baseline else "")
        + ", embedded store, model local/all-MiniLM-L6-v2, in-process worker, rate limits off, items loaded over HTTP and fully "
        "embedded before the first search; modes as `agentsearch eval` asks them (top 10). "
        f"Bare dense: the same model alone, cosine; bare BM25: k1 {K1}, b {B}, lowercase words split at case changes.",
        "",
    ]
    lines += summary_table(results, baseline is not None)
    for result in results:
        lines += set_table(result, baseline is not None)
    first = results[0].dev if results else None
    if first is not None:
        workspace = " --workspace ID" if first.surface == "code" else ""
        lines.append(
            f"_Qrels of every set and half (`SET-report.jsonl`, `SET-tuning.jsonl`) are in {qrels}; to judge a running service on one: "
            f"`python -m service eval --surface {first.surface} --qrels {qrels / f'{first.key}-report.jsonl'} --url URL --token TOKEN{workspace}` "
            "(code search also takes the workspace id)._"
        )
    return "\n".join(lines)


# ---- entry -------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, work: Path) -> tuple[list[SetResult], Path]:
    chosen = [s.strip() for s in args.sets.split(",") if s.strip()]
    results = [SetResult(dev=dev, halves=halves(dev.judged)) for dev in dev_sets(chosen, full=args.full, quick=args.quick)]
    # Outside a temporary work folder, the qrels outlive the run for an operator's `agentsearch eval`.
    qrels = write_all_qrels(results, work / "qrels" if args.work_dir else Path(tempfile.mkdtemp(prefix="bench-relevance-qrels-")))
    score_bare(results, BareModel(work / "vectors" if args.work_dir else None))
    code = next((r.dev for r in results if r.dev.surface == "code"), None)
    code_root = write_tree(work / "trees" / ("cosqa-quick" if args.quick else "cosqa"), code.items) if code else None
    await serve_and_score(results, TREE, work, baseline=False, code_root=code_root)
    if args.baseline_tree:
        await serve_and_score(results, Path(args.baseline_tree), work, baseline=True, code_root=code_root)
    return results, qrels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_relevance", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every MetaTool query (20,614) and every qualifying action query")
    parser.add_argument("--quick", action="store_true", help="CoSQA on a 1,500-snippet subset holding every gold snippet")
    parser.add_argument("--sets", default=",".join(SETS), help=f"dev sets, comma-separated, among {', '.join(SETS)}")
    parser.add_argument("--baseline-tree", metavar="PATH", help="also serve this checkout and report its served ranking")
    parser.add_argument("--work-dir", metavar="DIR", help="keep data directories, bare vectors and qrels here between runs (figures to publish: leave it out, so both services start on fresh data)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sets.split(",") if s.strip() and s.strip() not in SETS]
    if unknown:
        parser.error(f"unknown sets {', '.join(unknown)}; choose among {', '.join(SETS)}")
    if args.baseline_tree and not (Path(args.baseline_tree) / "service" / "__main__.py").is_file():
        parser.error(f"--baseline-tree {args.baseline_tree}: not a checkout (no service/__main__.py there)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.work_dir:
        work = Path(args.work_dir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        results, qrels = asyncio.run(run(args, work))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-relevance-") as tmp:
            results, qrels = asyncio.run(run(args, Path(tmp)))
    print(report(results, qrels=qrels, baseline=Path(args.baseline_tree).resolve() if args.baseline_tree else None, full=args.full, quick=args.quick), flush=True)
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
