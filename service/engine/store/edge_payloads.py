"""Decoded payloads of the points an embedded shard's searches returned, kept by point version so each change is read once.

qdrant-edge decodes a hit's whole stored payload however few fields are asked for, and converts
it to Python objects while holding the GIL: on the catalog's records (each carries its analysed
text) a dense query of 50 hits took 0.05 ms without payloads and 0.7 ms with them, most of a
search's store time. Searches therefore ask the shard for ids, scores and versions alone, and the
payloads come from here: kept per field selection, valid while the point's version (the number of
the operation that last changed it; every write to a point moves it) is the one the search saw.
Missing or outdated ones are read in one ``retrieve`` of the shard, in the same synchronous step
as the search, so nothing can change the points in between.

A shard replaced by an index build numbers its operations afresh: its collection starts a new
cache (``clear``). Each field selection keeps at most ``PAYLOAD_CACHE_POINTS`` points, the least
recently returned dropped first: about 10 MB for the catalog's ranking fields (2.3 KB a record,
measured at 100k records). Cold, a search pays one more engine call (``retrieve``): 0.2-0.4 ms
more at 100k records when no hit is kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import qdrant_edge as qe

from .edge_codec import payload_out

PAYLOAD_CACHE_POINTS = 4096

Fields = tuple[str, ...] | None
"""A field selection: the names asked for, or None for the whole payload."""

_Entry = tuple[int, str, dict[str, Any]]  # (version, the id as text, the payload)


class PayloadCache:
    """The decoded payloads of one shard's points, by field selection, the least recently returned dropped first."""

    def __init__(self, points: int = PAYLOAD_CACHE_POINTS) -> None:
        self.points = points
        self._kept: dict[Fields, OrderedDict[Any, _Entry]] = {}
        self.reads = 0
        """Points read from the shard (tests see what was kept)."""

    def clear(self) -> None:
        self._kept.clear()

    def kept(self) -> int:
        """Payloads kept now, over every field selection."""
        return sum(len(kept) for kept in self._kept.values())

    def resolve(self, shard: qe.EdgeShard, found: Sequence[Sequence[qe.ScoredPoint]], fields: Sequence[Fields]) -> list[list[tuple[str, float, dict[str, Any]]]]:
        """``(id, score, payload)`` for each point of each list in ``found`` (``fields[i]`` for list ``i``).

        Call it right after the search that gave ``found``, with no await between: the versions
        must be the shard's current ones. Each payload returned is the caller's own copy."""
        # Each attribute of a hit is a conversion from the engine (the id alone about 1 us): read once.
        lists = [[(p.id, p.version, p.score) for p in points] for points in found]
        resolved: dict[Fields, dict[Any, _Entry]] = {}
        for selection in dict.fromkeys(fields):
            kept = self._kept.setdefault(selection, OrderedDict())
            ready: dict[Any, _Entry] = {}
            missing: dict[Any, int] = {}
            for rows, wanted in zip(lists, fields, strict=True):
                if wanted != selection:
                    continue
                for point_id, version, _ in rows:
                    entry = kept.get(point_id)
                    if entry is not None and entry[0] == version:
                        ready[point_id] = entry
                        kept.move_to_end(point_id)
                    else:
                        missing[point_id] = version
            if missing:
                ready.update(self._read(shard, kept, selection, missing))
            resolved[selection] = ready
        return [
            [(entry[1], score, dict(entry[2])) for point_id, _, score in rows if (entry := resolved[selection].get(point_id)) is not None]
            for rows, selection in zip(lists, fields, strict=True)
        ]

    def _read(self, shard: qe.EdgeShard, kept: OrderedDict[Any, _Entry], selection: Fields, missing: dict[Any, int]) -> dict[Any, _Entry]:
        """Read the ``missing`` points' payloads from ``shard`` and keep them at the versions given."""
        records = shard.retrieve(list(missing), with_payload=True if selection is None else list(selection), with_vector=False)
        self.reads += len(records)
        fresh: dict[Any, _Entry] = {}
        for record in records:
            point_id = record.id
            entry = fresh[point_id] = (missing[point_id], str(point_id), payload_out(record.payload))
            if self.points <= 0:
                continue
            kept[point_id] = entry
            kept.move_to_end(point_id)
            while len(kept) > self.points:
                kept.popitem(last=False)
        return fresh


__all__ = ["PAYLOAD_CACHE_POINTS", "PayloadCache"]
