"""Which node serves a workspace: rendezvous (highest-random-weight) hashing of the workspace id.

A workspace's files, chunk cache and trigram index live on one node (README, "Beyond one
machine"). Gateways, the platform that places checkouts and operators must all agree on that
node without asking anyone, so the mapping is a pure function of the workspace id and the node
names: every node gets a score ``sha256(node NUL workspace_id)``, the highest score wins.

Why rendezvous hashing rather than ``hash(id) % len(nodes)``: adding a node moves only the
workspaces the new node now wins (about 1/N of them) and removing one moves only that node's
workspaces; every other workspace stays where its files already are. The order in which nodes
are listed does not matter. The hash is SHA-256, not Python's ``hash``, so every process and
every release computes the same mapping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _score(node: str, workspace_id: str) -> int:
    digest = hashlib.sha256(f"{node}\x00{workspace_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def rank_nodes(workspace_id: str, nodes: Iterable[str]) -> list[str]:
    """All distinct ``nodes``, best first for ``workspace_id``: the first serves it, the next takes
    over if it is gone for good. Ties (astronomically rare) break by node name, so the rank is total."""
    distinct = {node for node in nodes}
    if not workspace_id:
        raise ValueError("workspace_id must not be empty")
    if not distinct or any(not node for node in distinct):
        raise ValueError("nodes must name at least one node, and no node name may be empty")
    return sorted(distinct, key=lambda node: (-_score(node, workspace_id), node))


def node_for_workspace(workspace_id: str, nodes: Iterable[str]) -> str:
    """The node that serves ``workspace_id`` among ``nodes`` (a stable mapping, see the module doc)."""
    return rank_nodes(workspace_id, nodes)[0]


__all__ = ["node_for_workspace", "rank_nodes"]
