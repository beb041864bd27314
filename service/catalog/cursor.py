"""The opaque cursor of a paged domain listing: where the previous page ended, in curated order.

A listing is sorted by ``(order, entity id, record key)``, a total order, and a page starts after
the cursor's position (keyset paging): a capability written or deleted between two calls neither
repeats nor skips the others. The cursor is base64url JSON; it carries nothing the caller may not
see (a position in a listing it was shown) and names its domain, so a cursor passed with another
domain is refused rather than silently starting elsewhere.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from service.errors import ValidationError

_VERSION = 1
_UNORDERED = 1_000_000  # entries without an explicit order list after the curated ones
_FIX = "pass nextCursor from the previous page of this listing unchanged, or drop cursor to start over"

SortKey = tuple[int, str, str]


def listing_key(payload: Mapping[str, Any]) -> SortKey:
    """The curated position of a listed capability or MCP tool (unique: the record key breaks ties)."""
    return (_order_of(payload), str(payload.get("entity_id", "")), str(payload.get("key", "")))


def _order_of(payload: Mapping[str, Any]) -> int:
    order = payload.get("order", _UNORDERED)
    return order if isinstance(order, int) and not isinstance(order, bool) else _UNORDERED


@dataclass(frozen=True)
class ListingCursor:
    domain: str
    after: SortKey

    def encode(self) -> str:
        raw = orjson.dumps({"v": _VERSION, "d": self.domain, "a": list(self.after)})
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str, domain: str) -> ListingCursor:
        """The cursor ``text`` names, for a listing of ``domain``; ValidationError (400) otherwise."""
        try:
            raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
            data = orjson.loads(raw)
        except (binascii.Error, ValueError):
            raise ValidationError(f"cursor is not a listing cursor; {_FIX}") from None
        cursor = cls._from_json(data)
        if cursor is None:
            raise ValidationError(f"cursor is not a listing cursor; {_FIX}")
        if cursor.domain != domain:
            raise ValidationError(f"cursor pages the listing of domain {cursor.domain!r}, not {domain!r}; {_FIX}")
        return cursor

    @classmethod
    def _from_json(cls, data: Any) -> ListingCursor | None:
        if not isinstance(data, dict) or data.get("v") != _VERSION or not isinstance(data.get("d"), str):
            return None
        after = data.get("a")
        if not (isinstance(after, list) and len(after) == 3):
            return None
        order, entity_id, key = after
        if not (isinstance(order, int) and not isinstance(order, bool) and isinstance(entity_id, str) and isinstance(key, str)):
            return None
        return cls(data["d"], (order, entity_id, key))
