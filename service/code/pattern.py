"""Compiling a user's regex: Python's ``re``, exactly, multi-line, refusing patterns whose fixed
repeat counts spell out too much.

Regex syntax and semantics are Python's ``re``: :func:`regex_compile` compiles with ``re``, and
literal extraction (``prefilter.py``) reads ``re``'s own parse tree.
"""

from __future__ import annotations

import re
import warnings
from re import _parser as sre_parse  # type: ignore[attr-defined]  # sre_parse warns on import
from typing import Any

MAX_FIXED_EXPANSION = 100_000  # characters a pattern's repeat counts may spell out


def regex_compile(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """Compile a user's pattern with Python's ``re`` (multi-line: ``^`` and ``$`` at every line).

    Raises ValueError whose message names the error and its position. A pattern whose fixed repeat
    counts multiply out past ``MAX_FIXED_EXPANSION`` characters is refused too: no code search
    needs one, and each of its match attempts could run that long."""
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarning on "[[" is not the user's error
            compiled = re.compile(pattern, flags)
            expansion = _fixed_expansion(list(sre_parse.parse(pattern, flags)))
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ValueError(f"invalid regex{where}: {exc.msg}") from None
    except (RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regex: {exc}") from None
    if expansion > MAX_FIXED_EXPANSION:
        raise ValueError(
            f"invalid regex: its fixed repeat counts multiply out to {expansion:,} characters (the limit is "
            f"{MAX_FIXED_EXPANSION:,}); use an open range like {{1,}} or smaller counts"
        )
    return compiled


def _fixed_expansion(items: list[tuple[Any, Any]]) -> int:
    """How many characters a pattern's repeat counts spell out (``(?:a{9999}){9999}``: 99,980,001).
    Each repeat counts its lower bound (at least one) times its body; alternatives add up."""
    size = 0
    for op, arg in items:
        name = str(op)
        if name in {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}:
            low, _high, body = arg
            size += max(low, 1) * _fixed_expansion(list(body))
        elif name == "SUBPATTERN":
            size += _fixed_expansion(list(arg[3]))
        elif name == "ATOMIC_GROUP":
            size += _fixed_expansion(list(arg))
        elif name == "BRANCH":
            size += sum(_fixed_expansion(list(alternative)) for alternative in arg[1])
        elif name in {"ASSERT", "ASSERT_NOT"}:
            size += _fixed_expansion(list(arg[1]))
        elif name == "GROUPREF_EXISTS":
            size += sum(_fixed_expansion(list(branch)) for branch in arg[1:] if branch is not None)
        else:
            size += 1
    return size
