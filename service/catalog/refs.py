"""Entity refs (``type:id#fragment``): parsing, validation, and the ``entity`` search parameter.

The first ``:`` ends the type and the id may hold more colons (``capability:mcp:home:set_pin``);
the first ``#`` starts the fragment, which may hold more ``#`` (``package:x#README.md#export-jsdoc``,
``package:x#src/index.ts#L165``). Every fault raises ``InvalidEntityRef`` with a message that
says what to fix.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import orjson

from service.catalog.markdown import parse_line_fragment
from service.errors import InvalidEntityRef

__all__ = [
    "ENTITY_TYPES",
    "MAX_ENTITY_REFS",
    "MAX_REF_LENGTH",
    "EntityRef",
    "parse_entity_param",
    "parse_ref",
]

ENTITY_TYPES = ("capability", "guide", "integration", "mcp-server", "package", "secret")
MAX_REF_LENGTH = 512
MAX_ENTITY_REFS = 10
_EXAMPLE = "guide:package_authoring"


@dataclass(frozen=True)
class EntityRef:
    """A parsed ref: ``type`` is one of ENTITY_TYPES, ``id`` is non-empty, ``fragment`` follows the first ``#``."""

    type: str
    id: str
    fragment: str | None = None

    @property
    def ref(self) -> str:
        """``type:id``, the ref without its fragment."""
        return f"{self.type}:{self.id}"

    @property
    def full(self) -> str:
        """``type:id#fragment`` (or ``type:id`` when there is no fragment): parses back to this ref."""
        return self.ref if self.fragment is None else f"{self.ref}#{self.fragment}"

    @property
    def fragment_parts(self) -> tuple[str, ...]:
        """The fragment split on ``#``: ``("src/index.ts", "L165")``; ``()`` without a fragment."""
        return () if self.fragment is None else tuple(self.fragment.split("#"))

    @property
    def line_span(self) -> tuple[int, int] | None:
        """The (first, last) lines when the fragment's last part is a line anchor (``L165``), else None."""
        parts = self.fragment_parts
        return parse_line_fragment(parts[-1]) if parts else None

    def __str__(self) -> str:
        return self.full


def _invalid(text: str, problem: str) -> InvalidEntityRef:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return InvalidEntityRef(f"invalid entity ref {shown!r}: {problem}")


def _check_characters(text: str) -> None:
    for char in text:
        if char.isspace() or unicodedata.category(char)[0] == "C":
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            raise _invalid(text, f"it contains whitespace or a control character ({name}); refs have none")


def _check_fragment(text: str, fragment: str) -> None:
    parts = fragment.split("#")
    if any(not part for part in parts):
        raise _invalid(text, "empty fragment after '#': name a heading slug, a path, an export subpath or L165")
    try:
        parse_line_fragment(parts[-1])
    except ValueError as exc:
        raise _invalid(text, str(exc)) from None


def parse_ref(text: str) -> EntityRef:
    """Parse ``type:id`` or ``type:id#fragment``; raise InvalidEntityRef saying what is wrong."""
    if not isinstance(text, str):
        raise InvalidEntityRef(f"an entity ref must be a string like {_EXAMPLE!r}, got {type(text).__name__}")
    if not text:
        raise InvalidEntityRef(f"empty entity ref: expected type:id, for example {_EXAMPLE!r}")
    if len(text) > MAX_REF_LENGTH:
        raise _invalid(text, f"it is {len(text)} characters long; the limit is {MAX_REF_LENGTH}")
    _check_characters(text)
    head, hash_sign, fragment = text.partition("#")
    type_, colon, entity_id = head.partition(":")
    if not colon:
        raise _invalid(
            text, f"expected type:id with one of the types {', '.join(ENTITY_TYPES)}, for example {_EXAMPLE!r}"
        )
    if type_ not in ENTITY_TYPES:
        raise _invalid(text, f"unknown entity type {type_!r}; valid types: {', '.join(ENTITY_TYPES)}")
    if not entity_id:
        raise _invalid(text, f"empty id after '{type_}:'")
    if hash_sign:
        _check_fragment(text, fragment)
    return EntityRef(type=type_, id=entity_id, fragment=fragment if hash_sign else None)


def parse_entity_param(value: object) -> list[tuple[str, EntityRef | str]]:
    """The ``entity`` parameter: a ref string or a list of 1-10 ref strings, each parsed on its own.

    Each element becomes ``(original text, EntityRef)`` or ``(original text, error message)`` so
    one bad ref does not abort the batch. A string holding a JSON array (clients that stringify
    arrays) is read as that array. Raises InvalidEntityRef when the parameter itself is wrong: not
    a string or list, an empty list, more than 10 refs, or a non-string element.
    """
    items = _entity_items(value)
    parsed: list[tuple[str, EntityRef | str]] = []
    for item in items:
        try:
            parsed.append((item, parse_ref(item)))
        except InvalidEntityRef as exc:
            parsed.append((item, exc.message))
    return parsed


def _entity_items(value: object) -> list[str]:
    if isinstance(value, str) and value.startswith("["):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, list):
            value = decoded
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise InvalidEntityRef(
            f"entity must be a ref string like {_EXAMPLE!r} or a list of 1-{MAX_ENTITY_REFS} ref strings, "
            f"got {type(value).__name__}"
        )
    if not value:
        raise InvalidEntityRef(f"entity is an empty list: pass 1-{MAX_ENTITY_REFS} ref strings")
    if len(value) > MAX_ENTITY_REFS:
        raise InvalidEntityRef(f"entity lists {len(value)} refs; pass at most {MAX_ENTITY_REFS} per call")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidEntityRef(f"entity[{index}] must be a ref string like {_EXAMPLE!r}, got {type(item).__name__}")
    return list(value)
