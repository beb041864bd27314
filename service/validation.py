"""Request validation: reading JSON bodies and typed fields with errors that say what to fix."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from service.errors import InvalidJSON, PayloadTooLarge, ValidationError

_MISSING = object()
# max_length of a field that only the request body's size (client_max_size) bounds: a search query
# over its searched bound is cut, not refused (see ``bounded_text``).
BODY_BOUNDED = sys.maxsize
# The accessors below are named after the JSON types they read, which shadows the builtins in the class body.
_Str = str
_Int = int
_Bool = bool


async def read_json(request: web.Request) -> Any:
    """The request's JSON body; 400 for malformed JSON or a wrong content type, 413 when too big."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise PayloadTooLarge(f"request body is too large ({exc.text}); send less per request") from None
    if not raw:
        raise InvalidJSON("request body is empty; send a JSON object")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"request body is not valid JSON: {exc}") from None


class Fields:
    """Typed access to one JSON object's fields; every accessor raises ``ValidationError``."""

    def __init__(self, data: Any, where: _Str = "body") -> None:
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where} must be a JSON object, got {_type_name(data)}")
        self.data: Mapping[str, Any] = data
        self.where: _Str = where
        self._seen: set[_Str] = set()

    def _get(self, name: _Str, required: _Bool) -> Any:
        self._seen.add(name)
        value = self.data.get(name, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise ValidationError(f"{self._path(name)} is required")
            return _MISSING
        return value

    def _path(self, name: _Str) -> str:
        return name if self.where == "body" else f"{self.where}.{name}"

    def str(self, name: _Str, *, required: _Bool = False, default: Any = None, max_length: _Int = 10_000, non_empty: _Bool = False) -> Any:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise ValidationError(f"{self._path(name)} must be a string, got {_type_name(value)}")
        if len(value) > max_length:
            raise ValidationError(f"{self._path(name)} is {len(value)} characters; the limit is {max_length}")
        if non_empty and not value.strip():
            raise ValidationError(f"{self._path(name)} must not be empty")
        return value

    def int(self, name: _Str, *, default: Any = None, minimum: _Int | None = None, maximum: _Int | None = None, required: _Bool = False) -> Any:
        value = self._get(name, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{self._path(name)} must be an integer, got {_type_name(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValidationError(f"{self._path(name)} must be between {minimum} and {maximum}, got {value}")
        return value

    def number(self, name: _Str, *, default: Any = None, minimum: float | None = None, maximum: float | None = None) -> Any:
        value = self._get(name, False)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(f"{self._path(name)} must be a number, got {_type_name(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValidationError(f"{self._path(name)} must be between {minimum} and {maximum}, got {value}")
        return float(value)

    def clamped_int(self, name: _Str, *, default: Any = None, minimum: _Int, maximum: _Int) -> tuple[Any, _Str | None]:
        """An integer of at least ``minimum`` and the notice to show: one over ``maximum`` becomes
        ``maximum`` (a caller asking for too much gets the most there is, not a refusal)."""
        value = self.int(name)
        if value is None:
            return default, None
        if value < minimum:
            raise ValidationError(f"{self._path(name)} must be between {minimum} and {maximum}, got {value}")
        if value > maximum:
            return maximum, f"{self._path(name)} is over its maximum of {maximum}; answered with {maximum}."
        return value, None

    def bool(self, name: _Str, *, default: _Bool = False) -> _Bool:
        value = self._get(name, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise ValidationError(f"{self._path(name)} must be true or false, got {_type_name(value)}")
        return value

    def str_list(self, name: _Str, *, default: Any = (), max_items: _Int = 1000, max_length: _Int = 1000) -> Any:
        value = self._get(name, False)
        if value is _MISSING:
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValidationError(f"{self._path(name)} must be a list of strings")
        if len(value) > max_items:
            raise ValidationError(f"{self._path(name)} has {len(value)} items; the limit is {max_items}")
        if any(len(v) > max_length for v in value):
            raise ValidationError(f"{self._path(name)} items must be at most {max_length} characters")
        return tuple(value)

    def list(self, name: _Str, *, required: _Bool = False, max_items: _Int = 10_000) -> Any:
        value = self._get(name, required)
        if value is _MISSING:
            return []
        if not isinstance(value, list):
            raise ValidationError(f"{self._path(name)} must be a list, got {_type_name(value)}")
        if len(value) > max_items:
            raise ValidationError(f"{self._path(name)} has {len(value)} items; the limit is {max_items}")
        return value

    def obj(self, name: _Str, *, required: _Bool = False) -> Fields | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        return Fields(value, self._path(name))

    def raw(self, name: _Str) -> Any:
        value = self._get(name, False)
        return None if value is _MISSING else value

    def reject_unknown(self, allowed: set[_Str] | None = None) -> None:
        """400 naming the unknown fields and the allowed ones."""
        known = self._seen if allowed is None else allowed
        unknown = sorted(set(self.data) - known)
        if unknown:
            raise ValidationError(
                f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in {self.where}; "
                f"allowed: {', '.join(sorted(known))}"
            )


def word_prefix(text: str, max_chars: int) -> str:
    """``text`` itself, or its longest prefix of at most ``max_chars`` that ends at a word boundary
    (trailing space dropped). A first word longer than half the bound is cut inside it instead, so a
    text without spaces (a URL, CJK) still keeps most of the bound."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars + 1]  # the character after the bound tells whether the cut ends a word
    boundary = next((i for i in range(max_chars, 0, -1) if head[i].isspace()), 0)
    cut = head[:boundary] if boundary * 2 >= max_chars else head[:max_chars]
    return cut.rstrip()


def bounded_text(value: str, max_chars: int, name: _Str = "query") -> tuple[str, _Str | None]:
    """``value`` cut to ``word_prefix`` and the notice saying so (None when nothing but surrounding
    space was dropped)."""
    if len(value) <= max_chars:
        return value, None
    words = value.strip()
    prefix = word_prefix(words, max_chars)
    if prefix == words:
        return words, None
    return prefix, (
        f"{name} is {len(value):,} characters; only its first {len(prefix):,} were searched (the bound is "
        f"{max_chars:,}, cut at a word boundary). Put the words that matter first, or search in parts."
    )


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number", type(None): "null"}.get(
        type(value), type(value).__name__
    )
