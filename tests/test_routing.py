"""Workspace routing: a stable rendezvous mapping that moves only what it must when nodes change."""

from __future__ import annotations

from collections import Counter

import pytest

from service.routing import node_for_workspace, rank_nodes

NODES = ["agentsearch-ws-0", "agentsearch-ws-1", "agentsearch-ws-2"]
IDS = [f"ws_{i:020x}" for i in range(3000)]


def test_mapping_is_pinned_across_processes_and_releases() -> None:
    # Gateways of different versions must agree: these values may never change.
    assert node_for_workspace("ws_0123456789abcdef0123", NODES) == "agentsearch-ws-0"
    assert node_for_workspace("ws_aaaaaaaaaaaaaaaaaaaa", NODES) == "agentsearch-ws-0"
    assert node_for_workspace("ws_ffffffffffffffffffff", NODES) == "agentsearch-ws-1"


def test_order_and_duplicates_of_nodes_do_not_matter() -> None:
    shuffled = [NODES[2], NODES[0], NODES[1], NODES[0]]
    assert all(node_for_workspace(ws, NODES) == node_for_workspace(ws, shuffled) for ws in IDS[:500])


def test_workspaces_spread_evenly_over_nodes() -> None:
    counts = Counter(node_for_workspace(ws, NODES) for ws in IDS)
    assert set(counts) == set(NODES)
    assert all(800 <= count <= 1200 for count in counts.values()), counts


def test_adding_a_node_moves_only_the_workspaces_it_wins() -> None:
    grown = [*NODES, "agentsearch-ws-3"]
    moved = [ws for ws in IDS if node_for_workspace(ws, NODES) != node_for_workspace(ws, grown)]
    assert all(node_for_workspace(ws, grown) == "agentsearch-ws-3" for ws in moved)
    assert 500 <= len(moved) <= 1000  # about a quarter of 3000


def test_removing_a_node_moves_only_its_workspaces_to_their_runner_up() -> None:
    shrunk = NODES[:2]
    for ws in IDS[:1000]:
        before = rank_nodes(ws, NODES)
        after = node_for_workspace(ws, shrunk)
        if before[0] != NODES[2]:
            assert after == before[0]
        else:
            assert after == before[1]


@pytest.mark.parametrize(("workspace_id", "nodes"), [("ws_1", []), ("", NODES), ("ws_1", ["a", ""])])
def test_bad_arguments_are_refused(workspace_id: str, nodes: list[str]) -> None:
    with pytest.raises(ValueError):
        node_for_workspace(workspace_id, nodes)
