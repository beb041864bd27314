"""The public dev sets as judged queries over plain-text items: loading, fixed-seed halves and qrels files.

Each set is what the relevance benchmark ranks twice, once by the bare baselines over ``items`` (the
relevant id of each item and its own plain text) and once by the service, which is loaded with the
same items in its own form:

    catalog   MetaTool single-tool: 199 tools as capabilities, a fixed-seed sample of the 20,614 queries
    multi     MetaTool multi-tool: 497 long requests, each needing two tools
    code      CoSQA dev: 500 queries over 6,267 snippets, one file each (a 1,500-snippet subset that
              keeps every gold snippet in quick mode)
    actions   APIs.guru: the ~1k-action subset, known-item queries of the action benchmark's kinds

Halves: every set's judged queries are shuffled with one fixed seed; the first half is for tuning,
the second is the one to report.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.bench_actions import _exact, _first_sentence, _typo, _without_name, choose_templates
from bench.datasets import COSQA_CORPUS, COSQA_QUERIES, METATOOL_MULTI_TOOL, METATOOL_QUERIES, METATOOL_TOOLS, dataset
from service.actions.index import humanize, query_words
from service.evaluation import Judged

SEED = 16
SETS = ("catalog", "multi", "code", "actions")
CATALOG_SAMPLE = 1_000
ACTIONS_SIZE = 1_000
ACTIONS_PER_KIND = 200
QUICK_SNIPPETS = 1_500
SNIPPETS_DIR = "snippets"


@dataclass(frozen=True)
class DevSet:
    """One dev set: its judged queries, and the items they are judged against (id -> plain text)."""

    key: str
    surface: str
    title: str
    items: dict[str, str]
    judged: tuple[Judged, ...]
    all_at_5: bool = False


@dataclass(frozen=True)
class Halves:
    """A set's judged queries after the fixed-seed shuffle: the first half tunes, the second reports."""

    tuning: tuple[Judged, ...]
    report: tuple[Judged, ...]


def halves(judged: Sequence[Judged], seed: int = SEED) -> Halves:
    shuffled = list(judged)
    random.Random(seed).shuffle(shuffled)
    middle = len(shuffled) // 2
    return Halves(tuning=tuple(shuffled[:middle]), report=tuple(shuffled[middle:]))


def write_qrels(path: Path, judged: Iterable[Judged]) -> Path:
    """``judged`` as the JSONL file ``agentsearch eval --qrels`` reads: one {"query", "relevant"} a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps({"query": j.query, "relevant": list(j.relevant)}) + b"\n" for j in judged))
    return path


# ---- MetaTool ---------------------------------------------------------------------------------------


def metatool_tools() -> dict[str, str]:
    tools: dict[str, str] = orjson.loads(dataset(METATOOL_TOOLS).read_bytes())
    return tools


def tool_capability(name: str, description: str) -> dict[str, Any]:
    """A MetaTool tool as the built-in capability the catalog is loaded with."""
    return {"type": "capability", "id": name, "domain": "metatool", "title": name, "summary": description.strip() or name}


def tool_items() -> dict[str, str]:
    return {f"capability:{name}": f"{name}: {description.strip()}" for name, description in metatool_tools().items()}


def catalog_set(sample: int | None = CATALOG_SAMPLE, seed: int = SEED) -> DevSet:
    with dataset(METATOOL_QUERIES).open(newline="") as handle:
        rows = [(row["Query"], row["Tool"]) for row in csv.DictReader(handle)]
    chosen = rows if sample is None or sample >= len(rows) else random.Random(seed).sample(rows, sample)
    what = f"all {len(rows):,} queries" if len(chosen) == len(rows) else f"{len(chosen):,} of {len(rows):,} queries (seed {seed})"
    return DevSet(
        key="catalog",
        surface="catalog",
        title=f"MetaTool single-tool: 199 tools as catalog capabilities, {what}, one gold tool each",
        items=tool_items(),
        judged=tuple(Judged(query=query, relevant=(f"capability:{tool}",)) for query, tool in chosen),
    )


def multi_set() -> DevSet:
    rows = orjson.loads(dataset(METATOOL_MULTI_TOOL).read_bytes())
    return DevSet(
        key="multi",
        surface="catalog",
        title=f"MetaTool multi-tool: 199 tools as catalog capabilities, {len(rows)} requests needing two tools each",
        items=tool_items(),
        judged=tuple(Judged(query=row["query"], relevant=tuple(f"capability:{tool}" for tool in row["tool"])) for row in rows),
        all_at_5=True,
    )


# ---- CoSQA ------------------------------------------------------------------------------------------


def snippet_path(idx: int) -> str:
    """A snippet's file in the workspace tree, as code search answers name it (relative to the root)."""
    return f"{SNIPPETS_DIR}/{idx}.py"


def code_set(quick: bool = False, seed: int = SEED) -> DevSet:
    corpus: list[dict[str, Any]] = json.loads(dataset(COSQA_CORPUS).read_text())
    queries: list[dict[str, Any]] = json.loads(dataset(COSQA_QUERIES).read_text())
    if quick:
        gold = {int(q["idx"]) for q in queries}
        others = [item for item in corpus if int(item["idx"]) not in gold]
        extra = random.Random(seed).sample(others, max(0, min(len(others), QUICK_SNIPPETS - len(gold))))
        kept = gold | {int(item["idx"]) for item in extra}
        corpus = [item for item in corpus if int(item["idx"]) in kept]
        what = f"quick: {len(corpus):,} of 6,267 snippets, every gold snippet kept"
    else:
        what = f"{len(corpus):,} snippets"
    return DevSet(
        key="code",
        surface="code",
        title=f"CoSQA dev: {len(queries)} queries over {what}, one file each in a workspace",
        items={snippet_path(int(item["idx"])): str(item["code"]) for item in corpus},
        judged=tuple(Judged(query=str(q["query"]), relevant=(snippet_path(int(q["idx"])),)) for q in queries),
    )


def write_tree(root: Path, items: dict[str, str]) -> Path:
    """The code set's items as files under ``root`` (ids are relative paths); other files there go.

    An unchanged file is left alone, so a kept tree keeps its mtimes and a service's index of it stays valid."""
    root.mkdir(parents=True, exist_ok=True)
    wanted = {root / relative for relative in items}
    for present in root.rglob("*.py"):
        if present not in wanted:
            present.unlink()
    for relative, text in items.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return root


# ---- actions ----------------------------------------------------------------------------------------


QueryKind = tuple[str, Callable[[str, str], str], Callable[[str, str], bool]]

# The action benchmark's known-item query kinds: (name, query of (action name, description), which actions qualify).
ACTION_QUERY_KINDS: tuple[QueryKind, ...] = (
    ("exact name", lambda name, _: _exact(name), lambda _n, _d: True),
    ("name with a typo", lambda name, _: _typo(name), lambda _n, _d: True),
    ("description's first sentence", lambda _, description: _first_sentence(description), lambda _, d: len(_first_sentence(d).split()) >= 4),
    ("first sentence without the name's words", _without_name, lambda n, d: len(query_words(_without_name(n, d))) >= 3),
)


def action_templates(size: int = ACTIONS_SIZE) -> list[dict[str, Any]]:
    """The action benchmark's subset: whole templates in key order until ``size`` actions."""
    return choose_templates(size)


def actions_set(templates: Sequence[dict[str, Any]], per_kind: int | None = ACTIONS_PER_KIND, seed: int = SEED) -> DevSet:
    actions = [(str(t["template"]), str(a["action"]), str(a.get("description") or "")) for t in templates for a in t["actions"]]
    candidates = [(key, name, description) for key, name, description in actions if len(humanize(name).split()) >= 2]
    random.Random(seed).shuffle(candidates)
    judged: list[Judged] = []
    for _, make_query, qualifies in ACTION_QUERY_KINDS:
        rows = [(key, name, description) for key, name, description in candidates if qualifies(name, description)]
        for key, name, description in rows if per_kind is None else rows[:per_kind]:
            judged.append(Judged(query=make_query(name, description), relevant=(f"{key}/{name}",)))
    kinds = ", ".join(kind for kind, _, _ in ACTION_QUERY_KINDS)
    per = "every qualifying action" if per_kind is None else f"up to {per_kind} actions"
    return DevSet(
        key="actions",
        surface="actions",
        title=f"APIs.guru actions: {len(actions):,} actions of {len(templates)} templates, {len(judged):,} known-item queries ({per} per kind: {kinds})",
        items={f"{key}/{name}": f"{name}: {description.strip()}" if description.strip() else name for key, name, description in actions},
        judged=tuple(judged),
    )
