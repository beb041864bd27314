"""Query texts that are new every time: real queries from the data sets, each sent at most once in a run.

A load that repeats its queries measures the query-embedding cache, not the engine. ``UniqueTexts``
deals every search kind texts from its own pool of real ones (shuffled once), skipping any text
already dealt to any kind; when a pool runs dry it makes new texts by joining the first part of one
real query to the last part of another (never a random token), so they read like queries too.
``SentTexts`` records what was actually sent and says at the end whether any text went out twice.

Pools: catalog searches take the MetaTool queries (single- and multi-tool), action searches the
APIs.guru action descriptions, code searches the CoSQA dev queries and the first docstring lines of
the CoSQA corpus. Texts are compared by ``normalized`` (case and runs of spaces folded), which is
stricter than the cache, keyed by the exact text.
"""

from __future__ import annotations

import csv
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from bench.datasets import ACTIONS_CATALOG, COSQA_CORPUS, COSQA_QUERIES, METATOOL_MULTI_TOOL, METATOOL_QUERIES, dataset
from service.actions.loader import read_catalog_file

# A real text shorter or longer than this is left out of a pool (a bare word, or a paragraph).
MIN_CHARS, MAX_CHARS = 12, 200
# Tries at a fresh join before giving up (only reachable with a pool of one or two texts).
JOIN_TRIES = 1000
_DOCSTRING = re.compile(r'(?:"""|\'\'\')\s*(.+?)\s*(?:\n|"""|\'\'\')')


def normalized(text: str) -> str:
    return " ".join(text.lower().split())


def _usable(texts: Iterable[str]) -> list[str]:
    """Stripped texts of a usable length, first occurrence of each kept, order kept."""
    seen: set[str] = set()
    out = []
    for raw in texts:
        text = " ".join(raw.split())
        key = normalized(text)
        if MIN_CHARS <= len(text) <= MAX_CHARS and key not in seen:
            seen.add(key)
            out.append(text)
    return out


def catalog_texts() -> list[str]:
    """The MetaTool queries: single-tool ones, then multi-tool ones."""
    with dataset(METATOOL_QUERIES).open(newline="") as handle:
        single = [row["Query"] for row in csv.DictReader(handle)]
    multi = [row["query"] for row in orjson.loads(dataset(METATOOL_MULTI_TOOL).read_bytes())]
    return _usable([*single, *multi])


def action_texts() -> list[str]:
    """The first line of every APIs.guru action description."""
    lines = (str(a.get("description") or "").split("\n", 1)[0] for t in read_catalog_file(dataset(ACTIONS_CATALOG)) for a in t["actions"])
    return _usable(lines)


def code_texts() -> list[str]:
    """The CoSQA dev queries, then the first line of each CoSQA corpus snippet's docstring."""
    queries = [row["query"] for row in orjson.loads(dataset(COSQA_QUERIES).read_bytes())]
    docstrings = [m.group(1) for row in orjson.loads(dataset(COSQA_CORPUS).read_bytes()) if (m := _DOCSTRING.search(row["code"]))]
    return _usable([*queries, *docstrings])


def real_pools() -> dict[str, list[str]]:
    """Search kind -> its real texts, read from the data sets."""
    return {"catalog": catalog_texts(), "actions": action_texts(), "code": code_texts()}


def join(first: str, second: str, rng: random.Random) -> str:
    """The first part of ``first`` (about half its words) followed by the last part of ``second``."""
    head, tail = first.split(), second.split()
    cut_head = max(1, len(head) // 2 + rng.randint(-1, 1)) if len(head) > 1 else 1
    cut_tail = max(1, len(tail) // 2 + rng.randint(-1, 1)) if len(tail) > 1 else 1
    return " ".join([*head[:cut_head], *tail[-cut_tail:]])


@dataclass
class UniqueTexts:
    """Deals texts per search kind, none dealt twice in the run across kinds (see the module doc)."""

    pools: Mapping[str, Sequence[str]]
    rng: random.Random
    dealt: set[str] = field(default_factory=set)
    joined: Counter[str] = field(default_factory=Counter)
    _order: dict[str, list[str]] = field(default_factory=dict)
    _next: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for kind, texts in self.pools.items():
            if not texts:
                raise ValueError(f"the {kind} pool is empty: every search kind needs at least one real text")
            order = list(texts)
            self.rng.shuffle(order)
            self._order[kind] = order

    def next(self, kind: str) -> str:
        """A text for ``kind`` never dealt before in this run."""
        order = self._order[kind]
        while self._next[kind] < len(order):
            text = order[self._next[kind]]
            self._next[kind] += 1
            if self._take(text):
                return text
        for _ in range(JOIN_TRIES):
            text = join(self.rng.choice(order), self.rng.choice(order), self.rng)
            if self._take(text):
                self.joined[kind] += 1
                return text
        raise RuntimeError(f"no new {kind} text after {JOIN_TRIES} joins: the pool is too small for this run")

    def _take(self, text: str) -> bool:
        key = normalized(text)
        if key in self.dealt:
            return False
        self.dealt.add(key)
        return True


@dataclass
class SentTexts:
    """Every text a run sent (to every target); ``repeated`` says which went out more than once."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, text: str) -> None:
        self.counts[normalized(text)] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def repeated(self) -> dict[str, int]:
        return {text: n for text, n in self.counts.items() if n > 1}
