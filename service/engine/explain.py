"""A search's explanation: what each ranked hit's score was made of, noted by the ranking code while an explained search runs.

The admin playground runs a search inside ``explaining()``; each surface's ranking code notes the
channel scores and bonuses of the hits it ranks with ``note`` (keyed the way the surface's answer
names a hit). Outside ``explaining()`` there is no current explanation and ``note`` does nothing:
a normal search ranks and answers exactly as before. The explanation travels in a context
variable, so it reaches the tasks the search starts and no other request's search.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Explanation:
    """Hit key -> the evidence noted for it (channel scores, bonuses), in the order the hits were noted."""

    hits: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, key: str, evidence: Mapping[str, Any]) -> None:
        self.hits.setdefault(key, {}).update(evidence)


_CURRENT: ContextVar[Explanation | None] = ContextVar("agentsearch_explanation", default=None)


@contextmanager
def explaining() -> Iterator[Explanation]:
    """Collect the evidence of the search run inside this block (and the tasks it starts)."""
    explanation = Explanation()
    token = _CURRENT.set(explanation)
    try:
        yield explanation
    finally:
        _CURRENT.reset(token)


def current() -> Explanation | None:
    """The explanation being collected, or None when the search is not explained (the normal case)."""
    return _CURRENT.get()


def note(key: str, evidence: Mapping[str, Any]) -> None:
    """Note ``evidence`` for the hit ``key`` when the search is explained; nothing otherwise."""
    explanation = _CURRENT.get()
    if explanation is not None:
        explanation.note(key, evidence)
