"""Parent evidence: a hit's domain, MCP server or package, matched against the query, moves its members.

A task names what it needs in words that often fit the group better than any one member: "summarise
this repository's open issues" fits a GitHub server's description more than a tool called
``list_issues``. So each ranked hit's parent (a capability's domain, an MCP tool's server, an export's
package) is scored against the same query vector from the parent's own record, and each member moves
by ``PARENT_WEIGHT`` times how far its parent stands below the best parent of the list::

    score = own score - PARENT_WEIGHT * (best parent cosine - its parent's cosine)

Members of the best-matching parent keep their score, members of weaker ones fall, and a list whose
hits share one parent (or whose parents have no record) keeps its order. The parent's cosine is shown
in ``whyMatched`` (``parent``). One filtered dense search per list, over the parents' records only (a request's lists in one store call).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from service.auth import GLOBAL_TENANT
from service.catalog.keys import Kind, record_key
from service.engine.explain import note
from service.engine.store import DenseQuery, Filter, MatchAny

if TYPE_CHECKING:
    from service.engine.embeddings import Embedder
    from service.engine.records import RecordIndex

PARENT_WEIGHT = 0.3


class Member(Protocol):
    """A ranked hit as this module reads and moves it."""

    payload: Mapping[str, Any]
    score: float
    extras: dict[str, Any]


M = TypeVar("M", bound=Member)


def parent_of(payload: Any) -> tuple[str, str] | None:
    """(record key of the parent, its label) for a member record, or None for a record without one."""
    kind, tenant = payload.get("kind"), str(payload.get("tenant") or GLOBAL_TENANT)
    if kind == Kind.CAPABILITY.value and payload.get("domain"):
        return record_key(GLOBAL_TENANT, Kind.DOMAIN, str(payload["domain"])), f"domain:{payload['domain']}"
    if kind == Kind.MCP_TOOL.value and payload.get("server"):
        return record_key(tenant, Kind.MCP_SERVER, str(payload["server"])), f"mcp-server:{payload['server']}"
    if kind == Kind.EXPORT.value and payload.get("package_id"):
        return record_key(tenant, Kind.PACKAGE, str(payload["package_id"])), f"package:{payload['package_id']}"
    return None


async def apply_parent_evidence(index: RecordIndex, embedder: Embedder, vector: Sequence[float], hits: list[M]) -> list[M]:
    """``hits`` rescored by their parents' match to ``vector`` (see module doc), best first."""
    return (await apply_parent_evidence_batch(index, embedder, [(vector, hits)]))[0]


async def apply_parent_evidence_batch(index: RecordIndex, embedder: Embedder, lists: Sequence[tuple[Sequence[float], list[M]]]) -> list[list[M]]:
    """Each (vector, hits) list rescored as ``apply_parent_evidence`` does, every list's parents found in one store call."""
    parents = [{hit.payload.get("key"): parent_of(hit.payload) for hit in hits} for _, hits in lists]
    keys = [sorted({p[0] for p in of_list.values() if p is not None}) for of_list in parents]
    searched = [i for i, wanted in enumerate(keys) if len(wanted) >= 2]
    out = [hits for _, hits in lists]
    if not searched:
        return out
    queries = [DenseQuery(embedder.vector_name, lists[i][0], Filter(must=(MatchAny("key", tuple(keys[i])),)), len(keys[i]), ("key",)) for i in searched]
    for i, found in zip(searched, await index.search_batch(queries), strict=True):
        out[i] = _rescore(out[i], parents[i], {str(h.payload.get("key")): h.score for h in found})
    return out


def _rescore(hits: list[M], parents: Mapping[Any, tuple[str, str] | None], cosine: Mapping[str, float]) -> list[M]:
    """Move each hit by its parent's ``cosine`` below the best parent's; unchanged with fewer than two parents found."""
    if len(cosine) < 2:
        return hits
    best = max(cosine.values())
    floor = min(cosine.values())
    for hit in hits:
        parent = parents.get(hit.payload.get("key"))
        if parent is None:
            continue
        score = cosine.get(parent[0], floor)
        hit.score -= PARENT_WEIGHT * (best - score)
        hit.extras["parent"] = {"entity": parent[1], "cosine": round(score, 4)}
        note(str(hit.payload.get("entity")), {"parent": round(-PARENT_WEIGHT * (best - score), 4)})
    hits.sort(key=lambda s: -s.score)
    return hits
