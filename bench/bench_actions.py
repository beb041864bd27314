"""Action-search benchmark: catalog load, embedding, HTTP latency and known-item quality, as markdown tables.

Quick mode (default): two subsets of the APIs.guru catalog (~1k and ~10k actions, whole templates
in key order); full mode (``--full``) adds the whole catalog (2,628 templates, 124,730 actions).
For each size, one process serves the real app on a loopback port and this module is its HTTP
client:

1. load the templates over HTTP (``PUT /v1/actions/templates`` in bodies under 4 MiB), the arq
   worker stopped, so loading and embedding are timed apart;
2. start the worker and time until ``GET /v1/index/status`` has nothing pending: the real embedding
   pipeline (model, vector writes), beside the model's raw ``encode`` of the same texts in the
   same batches (of 512 of them on the full catalog).
   In quick mode a size over 2,000 actions embeds a timed sample of 2,000 with the embed job's own
   code instead; the full-catalog embedding time is measured in full mode and extrapolated in
   quick mode (the table says which);
3. a caller with 40 instances (30 own, 5 org, 5 global) sends 20 queries, ``rounds`` times each,
   for: search, search with ``include_catalog``, browse, browse with ``include_catalog``: p50/p99;
4. known-item quality (derived, no invented labels): the query is an action's own name, humanized
   ("list repos"), the same with two adjacent letters swapped, the first sentence of the action's
   description (how a caller describes what it wants, in the API's own words), or that sentence
   without the words of the action's name (the harder case: a caller rarely knows the name); the
   one relevant row is that action of that instance. Recall@5, nDCG@10 and MRR@10 for keyword-only
   and dense-only ranking (the bare channels, no bonuses), the blended (served) ranking, and the
   ceiling no ranking can pass (actions the query cannot tell apart, in random order). The queries
   of each kind are shuffled with a fixed seed and split in two: ranking constants are tuned on the
   even positions (``--half tune``) and the table reports the odd ones (``--half held-out``, the
   default).

Run: ``python -m bench.bench_actions [--full] [--sizes 1000,10000] [--rounds 5] [--half held-out|tune|all]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench.common import PACKAGES, machine, percentile, versions
from bench.datasets import ACTIONS_CATALOG, dataset
from service.actions.index import content_words, embed_text, humanize, words
from service.actions.loader import http_batches, read_catalog_file
from service.actions.model import RankingMode, SearchRequest
from service.actions.parsing import parse_template
from service.actions.ranking import DENSE_TOP_K_MAX, DENSE_TOP_K_MIN, KEYWORD_POOL, rank
from service.actions.state import catalog_for
from service.actions.visibility import Unit, select_units, visible_instances
from service.app import create_app
from service.auth import Caller, mint_token
from service.engine.queue import forget_deployment
from service.settings import Settings
from service.state import ENGINE

FULL_CATALOG_ACTIONS = 124_730
QUICK_SIZES = (1_000, 10_000)
# Quick subsets skip the giant templates (Microsoft Graph has 21,943 actions) so a size means many services.
QUICK_MAX_TEMPLATE_ACTIONS = 500
# Quick mode embeds sizes up to this many actions in full (through the worker) and a timed sample of larger ones.
QUICK_EMBED_LIMIT = 2_000
SECRET = "bench-secret-for-agentsearch-actions-0123456789"
QUERIES = (
    "send an email",
    "list repositories",
    "create a customer",
    "delete a file",
    "get the weather forecast",
    "upload an image",
    "search contacts by email",
    "create an invoice",
    "list users in my organization",
    "refund a payment",
    "post a message to a channel",
    "get account balance",
    "schedule a meeting",
    "translate text",
    "lsit_users",
    "create_payment_intent",
    "stripe",
    "github issues",
    "get quotes",
    "update a DNS record",
)


@dataclass
class SizeResult:
    actions: int
    templates: int
    load_s: float
    embedded: int
    """Actions embedded: all of them, or (quick mode, large sizes) a sample timed through the same job code."""
    embed_s: float
    encode_rate: float
    query_embed_ms: float
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    candidates: dict[str, float] = field(default_factory=dict)
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    quality_queries: int = 0


def choose_templates(target_actions: int | None) -> list[dict[str, Any]]:
    """Whole templates in key order until ``target_actions`` (None: the whole catalog)."""
    chosen, total = [], 0
    for raw in read_catalog_file(dataset(ACTIONS_CATALOG)):
        if target_actions is not None and len(raw["actions"]) > QUICK_MAX_TEMPLATE_ACTIONS:
            continue
        chosen.append(raw)
        total += len(raw["actions"])
        if target_actions is not None and total >= target_actions:
            break
    return chosen


async def bench_size(templates: list[dict[str, Any]], rounds: int, quality: QualitySplit, embed_limit: int | None) -> SizeResult:
    with tempfile.TemporaryDirectory(prefix="bench-actions-") as tmp:
        settings = Settings(
            data_dir=Path(tmp) / "data",
            queue_prefix=f"bench-actions-{uuid.uuid4().hex[:8]}",
            jwt_secret=SECRET,
            rate_limits_enabled=False,
            worker_in_process=False,  # started by hand after the load, to time loading and embedding apart
            request_deadline_s=120,
            # Sweeps re-enqueue records pending longer than 2 x job_timeout_s, and an embed job redoes
            # records another job already embedded: with a backlog of minutes (the full catalog) that
            # duplicates the work. Keep the sweeper out of the measurement.
            job_timeout_s=3600,
            sweep_interval_s=3600,
        )
        app = create_app(settings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        engine = app[ENGINE]
        try:
            async with aiohttp.ClientSession(base_url=base, timeout=aiohttp.ClientTimeout(total=600)) as http:
                result = await _run(engine, http, templates, rounds, quality, embed_limit)
        finally:
            await forget_deployment(engine.redis, settings.queue_prefix)
            await runner.cleanup()
        return result


async def _run(
    engine: Any, http: aiohttp.ClientSession, templates: list[dict[str, Any]], rounds: int, quality: QualitySplit, embed_limit: int | None
) -> SizeResult:
    admin = {"Authorization": f"Bearer {mint_token(SECRET, sub='bench-admin', admin=True)}"}
    caller = Caller(sub="bench-user", org="bench-org")
    user = {"Authorization": f"Bearer {mint_token(SECRET, sub=caller.sub, org=caller.org)}"}
    actions = sum(len(t["actions"]) for t in templates)

    started = time.perf_counter()
    for body in http_batches(templates):
        async with http.put("/v1/actions/templates", data=body, headers={**admin, "Content-Type": "application/json"}) as response:
            assert response.status == 200, await response.text()
    load_s = time.perf_counter() - started

    embedder = engine.embedders.default
    await embedder.load()
    embeds_all = embed_limit is None or actions <= embed_limit
    # The baseline encodes what the pipeline will embed (all of it, or 512 of it on the full
    # catalog), in the embed job's batches; a sampled size times its own sample in _embed_sample.
    texts = [embed_text(a, t) for t in (parse_template(raw) for raw in templates) for a in t.actions]
    sample = texts if embeds_all and actions <= 20_000 else texts[:512]
    await embedder.embed_documents(sample[:32])  # warm-up
    size = engine.settings.embeddings_batch_size
    started = time.perf_counter()
    for start in range(0, len(sample), size):
        await embedder.embed_documents(sample[start : start + size])
    encode_rate = len(sample) / (time.perf_counter() - started)
    if embed_limit is None or embeds_all:
        embed_s, embedded = await _embed_everything(engine, http, admin), actions
    else:
        embed_s, embedded, encode_rate = await _embed_sample(engine, embed_limit)
    query_embed_ms = []
    for n, query in enumerate(QUERIES):
        started = time.perf_counter()
        await embedder.embed_query(f"{query} (uncached {n})")
        query_embed_ms.append((time.perf_counter() - started) * 1000)

    await _put_instances(http, user, admin, templates)
    result = SizeResult(
        actions=actions,
        templates=len(templates),
        load_s=load_s,
        embedded=embedded,
        embed_s=embed_s,
        encode_rate=encode_rate,
        query_embed_ms=statistics.median(query_embed_ms),
    )
    modes: dict[str, dict[str, Any]] = {
        "search": {"include_catalog": False},
        "search + include_catalog": {"include_catalog": True},
        "browse": {"include_catalog": False, "query": ""},
        "browse + include_catalog": {"include_catalog": True, "query": ""},
    }
    for mode, extra in modes.items():
        queries = [""] if extra.get("query") == "" else list(QUERIES)
        timings, candidates = await _latencies(http, user, queries, extra, rounds)
        result.latencies_ms[mode], result.candidates[mode] = timings, candidates
    if embedded == actions:
        result.quality, result.quality_queries = await _quality(engine, caller, quality)
    return result


async def _embed_everything(engine: Any, http: aiohttp.ClientSession, admin: dict[str, str]) -> float:
    from workers.settings import build_workers, run_workers

    workers = build_workers(engine)
    task = asyncio.create_task(run_workers(workers))
    started = time.perf_counter()
    try:
        while True:
            async with http.get("/v1/index/status", headers=admin) as response:
                counts = (await response.json())["surfaces"]["actions"]
            if counts["pending"] == 0:
                return time.perf_counter() - started
            await asyncio.sleep(1.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _embed_sample(engine: Any, limit: int) -> tuple[float, int, float]:
    """Embed ``limit`` pending actions with the embed job's own code (model + vector writes), timed;
    and the raw encode rate of the very same texts in the same batches, as that row's baseline."""
    from service.engine.records import PENDING
    from service.engine.refresh import embed_records
    from service.engine.store import Filter, Match

    page, _ = await engine.store.scroll("actions", Filter(must=(Match("embed_state", PENDING),)), limit=limit)
    items = [(str(p.payload["key"]), str(p.payload["content_hash"])) for p in page]
    texts = [str(p.payload["embed_text"]) for p in page]
    size = engine.settings.embeddings_batch_size
    started = time.perf_counter()
    for start in range(0, len(texts), size):
        await engine.embedders.default.embed_documents(texts[start : start + size])
    raw_rate = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    for start in range(0, len(items), size):
        await embed_records(engine, "actions", items[start : start + size])
    return time.perf_counter() - started, len(items), raw_rate


async def _put_instances(http: aiohttp.ClientSession, user: dict[str, str], admin: dict[str, str], templates: list[dict[str, Any]]) -> None:
    step = max(1, len(templates) // 40)
    keys = [t["template"] for t in templates[::step]][:40]
    own = [{"name": f"own_{i}", "template": k, "auth": {"type": "api_key", "secret_name": f"KEY_{i}"}, "connected": i % 4 != 0} for i, k in enumerate(keys[:30])]
    org = [{"name": f"org_{i}", "template": k, "tier": "org", "auth": {"type": "oauth", "provider": "idp"}, "account_email": "ops@example.com"} for i, k in enumerate(keys[30:35])]
    shared = [{"name": f"global_{i}", "template": k, "tier": "global", "auth": {"type": "api_key", "secret_name": f"G_{i}"}} for i, k in enumerate(keys[35:40])]
    for headers, instances in ((user, own + org), (admin, shared)):
        async with http.put("/v1/actions/instances", json={"instances": instances}, headers=headers) as response:
            assert response.status == 200, await response.text()


async def _latencies(http: aiohttp.ClientSession, user: dict[str, str], queries: Sequence[str], extra: dict[str, Any], rounds: int) -> tuple[list[float], float]:
    timings: list[float] = []
    candidates: list[int] = []
    total_rounds = rounds * (len(QUERIES) if queries == [""] else 1)  # as many browse samples as searches
    for round_number in range(total_rounds + 1):
        for query in queries:
            body = orjson.dumps({"query": query, **{k: v for k, v in extra.items() if k != "query"}})
            started = time.perf_counter()
            async with http.post("/v1/actions/search", data=body, headers={**user, "Content-Type": "application/json"}) as response:
                answer = await response.json()
            elapsed_ms = (time.perf_counter() - started) * 1000
            assert response.status == 200, answer
            if round_number:  # round 0 warms caches (fuzzy matches, query embeddings)
                timings.append(elapsed_ms)
                candidates.append(int(answer["meta"]["candidates"]))
    return timings, statistics.fmean(candidates)


async def _quality(engine: Any, caller: Caller, split: QualitySplit) -> tuple[dict[str, dict[str, float]], int]:
    """Known-item Recall@5, nDCG@10 and MRR@10 over the caller's visible actions (configured instances)."""
    index = await catalog_for(engine).current()
    units = select_units(index, await visible_instances(engine, caller), SearchRequest(query="x"))
    candidates = [(u, i) for u in units for i in range(len(u.block)) if len(humanize(u.block.columns.names[i]).split()) >= 2]
    random.Random(7).shuffle(candidates)
    named = candidates[: split.sample]
    described = [(u, i) for u, i in candidates if len(_first_sentence(u.block.columns.descriptions[i]).split()) >= 4][: split.sample]
    unnamed = [(u, i) for u, i in candidates if len(content_words(words(_without_name(u.block.columns.names[i], u.block.columns.descriptions[i])))) >= 3]
    configs = {"keyword only": RankingMode.LEXICAL, "dense only": RankingMode.DENSE, "blended": RankingMode.SERVED}
    by_name = lambda u, i: _exact(u.block.columns.names[i])  # noqa: E731
    by_sentence = lambda u, i: _first_sentence(u.block.columns.descriptions[i])  # noqa: E731
    kinds: list[tuple[str, Callable[[Unit, int], str], list[tuple[Unit, int]], Callable[[Unit, int], str]]] = [
        ("exact name", lambda u, i: _exact(u.block.columns.names[i]), named, by_name),
        ("name with a typo", lambda u, i: _typo(u.block.columns.names[i]), named, by_name),
        ("description's first sentence", by_sentence, described, by_sentence),
        ("first sentence without the name's words", lambda u, i: _without_name(u.block.columns.names[i], u.block.columns.descriptions[i]), unnamed[: split.sample], by_sentence),
    ]
    table: dict[str, dict[str, float]] = {}
    for kind, make_query, chosen, twin_key in kinds:
        rows = split.of(chosen)
        table[f"{kind}, ceiling"] = _ceiling(units, rows, twin_key)
        for config, mode in configs.items():
            hits5, reciprocal, gain = 0, 0.0, 0.0
            for unit, position in rows:
                ranking = await rank(engine, index, units, make_query(unit, position), 10, mode=mode)
                target = int(index.starts[unit.template_idx]) + position
                ranks = [r for r, row in enumerate(ranking.rows, 1) if row.action_idx == target and row.unit is unit]
                if ranks:
                    hits5 += ranks[0] <= 5
                    reciprocal += 1 / ranks[0]
                    gain += 1 / math.log2(ranks[0] + 1)  # one relevant row: the ideal DCG is 1
            table[f"{kind}, {config}"] = {"queries": len(rows), "recall@5": hits5 / len(rows), "ndcg@10": gain / len(rows), "mrr@10": reciprocal / len(rows)}
    return table, len(split.of(named))


def _ceiling(units: Sequence[Unit], rows: list[tuple[Unit, int]], twin_key: Callable[[Unit, int], str]) -> dict[str, float]:
    """The best any ranking can do when actions the query cannot tell apart (the same name for name
    queries, the same first sentence for description queries) land in random order among themselves."""
    counts: dict[str, int] = {}
    for unit in units:
        for position in range(len(unit.block)):
            key = twin_key(unit, position)
            counts[key] = counts.get(key, 0) + 1
    hits5, reciprocal, gain = 0.0, 0.0, 0.0
    for unit, position in rows:
        twins = counts[twin_key(unit, position)]
        hits5 += min(1.0, 5 / twins)
        reciprocal += sum(1 / r for r in range(1, min(twins, 10) + 1)) / twins
        gain += sum(1 / math.log2(r + 1) for r in range(1, min(twins, 10) + 1)) / twins
    return {"queries": len(rows), "recall@5": hits5 / len(rows), "ndcg@10": gain / len(rows), "mrr@10": reciprocal / len(rows)}


@dataclass(frozen=True)
class QualitySplit:
    """Which known-item queries to score: ``sample`` per kind, then the tuning half, the held-out half or all."""

    sample: int
    half: str = "held-out"

    def of(self, rows: list[tuple[Unit, int]]) -> list[tuple[Unit, int]]:
        if self.half == "tune":
            return rows[0::2]
        if self.half == "held-out":
            return rows[1::2]
        return rows


def _without_name(name: str, description: str) -> str:
    """The description's first sentence without the words of the action's name (or their plurals)."""
    own = set(words(name))
    own |= {w + "s" for w in own} | {w[:-1] for w in own if w.endswith("s")}
    return " ".join(token for token in _first_sentence(description).split() if not own.intersection(words(token)))


def _first_sentence(description: str) -> str:
    text = " ".join(description.split())
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text


def _exact(name: str) -> str:
    return humanize(name)


def _typo(name: str) -> str:
    """Swap two adjacent letters in the middle of the longest word (deterministic)."""
    words = humanize(name).split()
    longest = max(range(len(words)), key=lambda i: len(words[i]))
    word = words[longest]
    if len(word) >= 4:
        middle = len(word) // 2
        words[longest] = word[: middle - 1] + word[middle] + word[middle - 1] + word[middle + 1 :]
    return " ".join(words)


# ---- report --------------------------------------------------------------------------------------


_HALVES = {"held-out": "the held-out half (odd positions)", "tune": "the tuning half (even positions)", "all": "both halves"}


def report(results: list[SizeResult], full: bool, rounds: int, half: str = "held-out") -> str:
    lines = [
        f"### Action search ({'full' if full else 'quick'} mode)",
        "",
        f"Machine: {machine()}; {versions((*PACKAGES, 'rapidfuzz', 'numpy'))}.",
        f"Settings: embedded store (qdrant-edge), model local/all-MiniLM-L6-v2, dense top-K 2 x limit in [{DENSE_TOP_K_MIN}, {DENSE_TOP_K_MAX}], keyword pool {KEYWORD_POOL}; "
        f"latency over HTTP on loopback, {rounds} rounds of {len(QUERIES)} queries after one warm-up round; caller with 40 instances.",
        "",
        "| catalog actions | templates | load over HTTP (s) | load actions/s | embedded | embed pipeline (s) | pipeline actions/s | raw encode actions/s | pipeline / raw |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rate = r.embedded / r.embed_s if r.embed_s else float("nan")
        embedded = "all" if r.embedded == r.actions else f"{r.embedded:,} (sample)"
        lines.append(
            f"| {r.actions:,} | {r.templates:,} | {r.load_s:.1f} | {r.actions / r.load_s:,.0f} | {embedded} | {r.embed_s:.1f} | {rate:,.0f} | "
            f"{r.encode_rate:,.0f} | {rate / r.encode_rate:.2f} |"
        )
    largest = max(results, key=lambda r: r.actions)
    basis = max(results, key=lambda r: r.embedded)
    rate = basis.embedded / basis.embed_s if basis.embed_s else float("nan")
    how = "measured" if basis.embedded == FULL_CATALOG_ACTIONS else f"extrapolated from {basis.embedded:,} actions embedded at {rate:,.0f}/s"
    lines += [
        "",
        f"Full-catalog embedding ({FULL_CATALOG_ACTIONS:,} actions): {FULL_CATALOG_ACTIONS / rate / 60:.1f} min ({how}).",
        "",
        f"Search latencies below reuse query embeddings cached in the warm-up round; an uncached query adds its embedding: "
        f"{largest.query_embed_ms:.1f} ms median here. A size embedded only in part answers with dense hits among its embedded actions.",
        "",
    ]
    lines += ["| catalog actions | mode | requests | pairs or rows considered | p50 ms | p99 ms |", "|---:|---|---:|---:|---:|---:|"]
    for r in results:
        for mode, timings in r.latencies_ms.items():
            lines.append(f"| {r.actions:,} | {mode} | {len(timings)} | {r.candidates[mode]:,.0f} | {statistics.median(timings):.1f} | {percentile(timings, 99):.1f} |")
    rated = max((r for r in results if r.quality), key=lambda r: r.actions, default=None)
    if rated is None:
        return "\n".join(lines)
    lines += [
        "",
        f"Known-item quality on the {rated.actions:,}-action catalog, fully embedded ({rated.quality_queries} actions of the caller's instances per kind, "
        f"{_HALVES[half]} of a seed-7 shuffle): "
        "query = the action's own name humanized, the same with two adjacent letters swapped, the first sentence of its description "
        "(actions whose description has 4+ words; the description is also in the embedded text, so that row favours dense), "
        "or that sentence without the words of the action's name (3+ words besides stopwords left); one relevant row. "
        "No paraphrase labels exist in the data, so none are invented. The ceiling row is the best any ranking can do: "
        "actions the query cannot tell apart (the same name, or the same first sentence: many APIs.guru templates are "
        "versions of one API) placed in random order among themselves. The dense and keyword rows are the bare channels "
        "(the search body's `ranking`: dense, lexical), without the connected and risk bonuses.",
        "",
        "| queries, ranking | queries | Recall@5 | nDCG@10 | MRR@10 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, scores in rated.quality.items():
        lines.append(f"| {name} | {scores['queries']:.0f} | {scores['recall@5']:.3f} | {scores['ndcg@10']:.3f} | {scores['mrr@10']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.bench_actions", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="also run the whole catalog (124,730 actions; ~20+ minutes on 2 cores)")
    parser.add_argument("--sizes", default=",".join(str(s) for s in QUICK_SIZES), help="quick subset sizes in actions, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of the query set per mode")
    parser.add_argument("--quality-sample", type=int, default=400, help="known-item queries per kind, before the split in halves")
    parser.add_argument("--half", choices=("held-out", "tune", "all"), default="held-out", help="which half of the known-item queries to score")
    parser.add_argument(
        "--embed-limit", type=int, default=QUICK_EMBED_LIMIT, help="quick sizes above this embed a timed sample of this many actions"
    )
    parser.add_argument("--full-embed-limit", type=int, default=None, help="embed only a timed sample of the full catalog (default: all of it)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sizes: list[int | None] = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.full:
        sizes.append(None)
    results = []
    for size in sizes:
        templates = choose_templates(size)
        embed_limit = args.full_embed_limit if size is None else args.embed_limit
        results.append(asyncio.run(bench_size(templates, args.rounds, QualitySplit(args.quality_sample, args.half), embed_limit)))
    print(report(results, args.full, args.rounds, args.half))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

