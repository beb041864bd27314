"""Query intents: a long request split into the separate things it asks for, each searched on its own.

An agent's task often asks for several things in one request ("find the latest news on Tesla and
show me its stock price; then save a summary"). One embedding of the whole request lands between
its intents, and BM25 over it favours whichever intent has the rarest words, so the tool for the
other intent sinks. ``split_intents`` cuts the request at sentence ends and at the words that join
separate requests (``then``, ``also``, ``as well as``, ``additionally``; ``and`` or ``plus`` when
a new request follows; commas around them), then merges any piece with fewer than ``MIN_CONTENT_WORDS`` content words back
into its neighbour, so a short query, or a phrase such as "pros and cons", stays whole.
"""

from __future__ import annotations

import re

from service.engine.analyzer import STOPWORDS, analyze, query_terms

MAX_INTENTS = 4
MIN_CONTENT_WORDS = 2
# Only requests at least this long are split: shorter ones rarely ask for two things.
MIN_SPLIT_WORDS = 8

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\s*\n+\s*")
# Words that always join two requests, and ``and`` / ``plus`` when a new request follows them (a
# verb of asking or doing, a question word, "any"/"some" before a new object): "news about Tesla and
# its stock price" stays one intent, "news about Tesla and show me its stock price" is two.
_STARTERS = (
    "can|could|would|will|please|provide|give|show|tell|find|get|suggest|recommend|check|send|create|make|"
    "help|let|list|search|look|book|plan|compare|translate|summarize|summarise|convert|generate|save|write|"
    "download|upload|share|post|schedule|remind|calculate|analyze|analyse|track|monitor|fetch|retrieve|"
    "explain|what|which|where|when|how|who|why|is|are|do|does|i|also|any|some|then"
)
_JOINERS = re.compile(
    r"\s*,?\s*\b(?:and\s+then|and\s+also|and\s+afterwards|after\s+that|as\s+well\s+as|additionally|afterwards|"
    rf"then|also|(?:and|plus)(?=\s+(?:{_STARTERS})\b))\b\s*,?\s*",
    re.IGNORECASE,
)
# Words of the request itself, not of what it asks for: they do not make a piece an intent.
_REQUEST_WORDS = frozenset(
    ["can", "could", "would", "will", "you", "me", "my", "i", "we", "us", "our", "please", "provide", "give", "show", "tell", "find", "get", "want", "need", "like", "help", "some", "any", "there", "do", "does", "also", "them", "it", "its", "that", "those", "these", "their", "if", "so", "about"]
) | STOPWORDS


def content_words(text: str) -> list[str]:
    return [term for term in analyze(text) if term not in _REQUEST_WORDS and not term.isdigit()]


def task_terms(query: str) -> str:
    """The BM25 query of a request in words: its terms without the words of asking ("can you please
    find me"), which match every description that says "find" or "get" and rank nothing; a query
    made only of such words keeps them."""
    return " ".join(dict.fromkeys(content_words(query))) or query_terms(query)


def split_intents(query: str) -> list[str]:
    """The separate requests in ``query``, in order; ``[query]`` when it asks for one thing."""
    text = " ".join(query.split())
    if len(text.split()) < MIN_SPLIT_WORDS:
        return [text] if text else []
    pieces = [piece for sentence in _SENTENCE_END.split(text) for piece in _JOINERS.split(sentence)]
    merged: list[str] = []
    pending = ""
    for piece in (p.strip(" ,;.") for p in pieces):
        if not piece:
            continue
        candidate = f"{pending} {piece}".strip()
        if len(content_words(candidate)) < MIN_CONTENT_WORDS:
            pending = candidate
            continue
        merged.append(candidate)
        pending = ""
    if pending:
        if merged:
            merged[-1] = f"{merged[-1]} {pending}"
        else:
            merged.append(pending)
    if len(merged) > MAX_INTENTS:
        merged = [*merged[: MAX_INTENTS - 1], " ".join(merged[MAX_INTENTS - 1 :])]
    return merged if len(merged) > 1 else [text]
