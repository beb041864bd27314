"""Splitting a request into its intents, and the words of asking left out of its BM25 query."""

from __future__ import annotations

import pytest

from service.engine.intents import MAX_INTENTS, split_intents, task_terms


@pytest.mark.parametrize(
    ("query", "intents"),
    [
        (
            "I want to know the latest news about Tesla and how has it impacted the stock market",
            ["I want to know the latest news about Tesla", "how has it impacted the stock market"],
        ),
        (
            "What's the weather like in Tokyo right now? Which hotels in the city center offer discounted rates?",
            ["What's the weather like in Tokyo right now?", "Which hotels in the city center offer discounted rates?"],
        ),
        (
            "Find a course on machine learning algorithms, then suggest job openings in artificial intelligence",
            ["Find a course on machine learning algorithms", "suggest job openings in artificial intelligence"],
        ),
    ],
)
def test_a_request_of_several_things_splits_into_them(query: str, intents: list[str]) -> None:
    assert split_intents(query) == intents


@pytest.mark.parametrize(
    "query",
    [
        "send an email to the team",
        "pros and cons of electric cars for a family of four people",
        "the hexadecimal values of the primary and secondary brand colors used by a company",
        "I need something with good mileage and low maintenance costs for my daily commute",
    ],
)
def test_a_request_for_one_thing_stays_whole(query: str) -> None:
    """Short queries, and ``and`` inside one phrase, do not split."""
    assert split_intents(query) == [query]


def test_a_fragment_without_content_joins_its_neighbour_and_the_count_is_bounded() -> None:
    assert split_intents("Find the weather forecast for Paris and also please") == ["Find the weather forecast for Paris and also please"]
    many = ". ".join(f"Find the {word} report for our northern office" for word in ("sales", "travel", "payroll", "audit", "energy", "fleet"))
    intents = split_intents(many)
    assert len(intents) == MAX_INTENTS and intents[-1].startswith("Find the audit report") and "fleet" in intents[-1]


def test_task_terms_leave_out_the_words_of_asking() -> None:
    assert task_terms("Can you please find me the weather forecast for Paris?") == "weather forecast pari"
    assert task_terms("can you help me") == "can you help me"  # only asking words: kept
