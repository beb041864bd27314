"""The load test: texts never sent twice, the capacity search's bracketing, and a quick capacity run against a real service."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from pathlib import Path

import orjson

from bench.loadtest import Samples, Search, Step, find_capacity
from bench.loadtexts import SentTexts, UniqueTexts, join, normalized

ROOT = Path(__file__).resolve().parents[1]


def test_every_text_is_dealt_once_across_kinds_and_a_dry_pool_joins_two_real_texts() -> None:
    pools = {"catalog": ["book a flight to Paris", "Book a flight to  paris", "find a hotel near the beach"], "code": ["find a hotel near the beach", "read a json file"]}
    texts = UniqueTexts(pools, random.Random(3))
    dealt = [texts.next("catalog") for _ in range(6)] + [texts.next("code") for _ in range(6)]
    assert len({normalized(t) for t in dealt}) == len(dealt)
    # The two spellings of the flight query and the hotel query shared by both pools go out once.
    assert sum(normalized(t) in {"book a flight to paris", "find a hotel near the beach"} for t in dealt) == 2
    assert texts.joined["catalog"] == 4 and texts.joined["code"] == 5
    words = {w for pool in pools.values() for text in pool for w in text.split()}
    assert all(set(t.split()) <= words for t in dealt)


def test_a_join_is_the_head_of_one_text_and_the_tail_of_another() -> None:
    first_text, second_text = "convert a string to a datetime object", "list every open pull request of a repository"
    first, second = first_text.split(), second_text.split()
    for seed in range(20):
        words = join(first_text, second_text, random.Random(seed)).split()
        head = next(n for n in range(len(words), 0, -1) if words[:n] == first[:n])
        assert 2 <= head <= 4 and 3 <= len(words) - head <= 5
        assert words[head:] == second[head - len(words) :]


def test_sent_texts_name_those_that_went_out_twice() -> None:
    sent = SentTexts()
    for text in ("read a file", "Read a  file", "parse json"):
        sent.add(text)
    assert sent.total == 3
    assert sent.repeated() == {"read a file": 2}


def test_the_capacity_search_doubles_then_bisects_to_the_resolution() -> None:
    """The probe stands for a target that holds any rate up to 23 req/s (the search only reads ``held``)."""
    probed: list[float] = []

    async def probe(rate: float) -> Step:
        probed.append(rate)
        return Step("target", "mix", rate, round(rate), Samples(), rate <= 23, False)

    steps = asyncio.run(find_capacity(probe, Search(start=5, resolution=0.1, resolution_abs=2, max_rate=1000)))
    assert probed[:4] == [5, 10, 20, 40]
    held = max(s.rate for s in steps if s.held)
    failed = min(s.rate for s in steps if not s.held)
    assert held <= 23 < failed
    assert failed - held <= max(0.1 * held, 2)
    assert len(steps) <= 8


def test_a_rate_that_cannot_hold_is_reported_as_not_held(tmp_path: Path) -> None:
    """A tiny capacity search on the small data set, with a p99 bound no search can meet: the service
    and the engine-only target each report the step not held, and no text went out twice."""
    report = tmp_path / "capacity.json"
    command = [
        sys.executable, "-m", "bench.loadtest", "--capacity", "--small", "--surfaces", "mix", "--hold", "3", "--settle", "0.5",
        "--start-rate", "2", "--p99-ms", "0.5", "--json", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = orjson.loads(report.read_bytes())
    assert set(doc["targets"]) == {"service", "engine-only"}
    for target in doc["targets"].values():
        mix = target["mix"]
        assert mix["capacity"] is None
        assert [step["rate"] for step in mix["steps"]] == [2]
        step = mix["steps"][0]
        assert step["held"] is False and step["sent"] >= 1 and step["p99_ms"] > 0.5
        assert set(step) >= {"rate", "planned", "sent", "p50_ms", "p99_ms", "errors", "held"}
    assert doc["texts"]["uncached"] is True
    assert doc["texts"]["repeated"] == 0 and doc["texts"]["sent"] == doc["texts"]["distinct"] > 0
    assert doc["criterion"] == {"p99_ms": 0.5, "hold_s": 3.0, "errors": 0}
    assert "| service | mix | 2 |" in done.stdout and "| engine-only | mix | 2 |" in done.stdout
    assert "| mix | service | under 2 |" in done.stdout
