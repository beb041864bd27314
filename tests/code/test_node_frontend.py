"""A workspace node's front end in production (no in-process embed and fast workers) runs the worker
of its own node queue in its event loop: the workspace caches admit one process, so no separate
worker may index them. Other nodes' workspace jobs stay queued for their nodes, and an ordinary
front end (the node list, no node id) runs no node worker but queues workspace jobs on their nodes."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from service.code.semantic import INDEX_JOB, WARM_JOB, schedule_indexing
from service.code.state import workspaces_of
from service.code.workspace import SearchConfig, workspace_id
from service.errors import SettingsError
from service.routing import node_for_workspace
from service.settings import Settings
from service.settings_loader import load_settings
from service.state import ENGINE, WORKER_STATE
from tests.admin.helpers import get_json, post_json
from tests.callers import auth
from tests.code.trees import write_tree
from tests.helpers import running_app, wait_until
from tests.queues import queued_functions

NODES = ("node-a", "node-b")
TENANT = "user:alice"


def tree_held_by(base: Path, node: str) -> Path:
    """A workspace tree under ``base`` whose id ``node_for_workspace`` gives to ``node``."""
    for n in range(100):
        root = (base / f"repo-{n}").resolve()
        if node_for_workspace(workspace_id(TENANT, root), NODES) == node:
            return write_tree(root)
    raise AssertionError(f"no tree of 100 maps to {node}")


def front_end(settings: Settings, node: str | None) -> Settings:
    """A front end as production runs it: the embed and fast workers elsewhere, every pod given the
    node list; ``node`` is a workspace node's id, None for an ordinary (stateless) front end."""
    return replace(settings, workspace_nodes=NODES, node_id=node, worker_in_process=False, embeddings_model=None)


async def test_the_front_end_runs_its_node_queue_and_leaves_the_other_nodes_jobs(settings: Settings) -> None:
    base = settings.allowed_roots[0]
    own, other = tree_held_by(base, "node-a"), tree_held_by(base, "node-b")
    async with running_app(front_end(settings, "node-a")) as client:
        engine = client.app[ENGINE]
        names = engine.queue.names
        assert [worker.queue_name for worker in client.app[WORKER_STATE]["workers"]] == [names.node("node-a")]
        await engine.queue.enqueue("sweep", job_id=f"{settings.queue_prefix}:sweep:test", fast=True)
        workspaces = workspaces_of(engine)
        registered = [(await workspaces.register(TENANT, root, SearchConfig()))[0] for root in (own, other)]
        for workspace in registered:
            assert await schedule_indexing(engine, workspace, always=True)
        held, elsewhere = registered

        async def indexed() -> bool:
            done = not await queued_functions(engine, names.node("node-a"))
            return done and (await workspaces.counts(held))["chunks"] > 0

        await wait_until(indexed, timeout_s=60)
        assert await queued_functions(engine, names.node("node-b")) == [INDEX_JOB]
        assert (await workspaces.counts(elsewhere))["chunks"] == 0
        assert await queued_functions(engine, names.fast) == ["sweep"]  # the shared queues are not this process's


async def test_an_ordinary_front_end_runs_no_node_worker_and_queues_workspace_jobs_on_their_nodes(settings: Settings) -> None:
    """The Kubernetes front-end Deployment: the node list from the shared ConfigMap, no node id. A
    registration and the dashboard's warm action there go to the queue of the workspace's node,
    not to the shared fast queue, where no workspace node would take them."""
    assert socket.gethostname() not in NODES  # the node name falls back to the host name
    base = settings.allowed_roots[0]
    trees = {node: tree_held_by(base, node) for node in NODES}
    async with running_app(front_end(settings, None)) as client:
        assert WORKER_STATE not in client.app
        engine = client.app[ENGINE]
        names = engine.queue.names
        ids = {}
        for node, root in trees.items():
            response = await client.post("/v1/workspaces", json={"root": str(root)}, headers=auth("alice"))
            assert response.status == 201, await response.text()
            ids[node] = (await response.json())["id"]
            assert ids[node] == workspace_id(TENANT, root)
        for node in NODES:
            assert await queued_functions(engine, names.node(node)) == [INDEX_JOB]

        warmed = await post_json(client, "/admin/api/warm", {"workspace": ids["node-b"]})
        assert warmed["function"] == WARM_JOB and warmed["args"] == [ids["node-b"]] and warmed["queue"] == "node:node-b"
        # The dashboard reads the node queues too: the warm-up waits there, in the jobs table and counts.
        listed = await get_json(client, "/admin/api/jobs?queue=node:node-b")
        assert {row["id"]: row["status"] for row in listed["jobs"]}[warmed["id"]] == "queued"
        overview = await get_json(client, "/admin/api/overview")
        assert set(overview["queues"]) == {"embed", "bulk", "fast", "node:node-a", "node:node-b"}
        assert overview["queues"]["node:node-b"]["queued"] == 2 and overview["queues"]["fast"]["queued"] == 0
        assert sorted(await queued_functions(engine, names.node("node-b"))) == sorted([INDEX_JOB, WARM_JOB])
        assert await queued_functions(engine, names.node("node-a")) == [INDEX_JOB]
        assert await queued_functions(engine, names.fast) == []
        assert await queued_functions(engine, names.embed) == []


def test_the_node_worker_runs_in_the_front_end_only_on_a_listed_node_without_the_full_workers() -> None:
    production = {"QDRANT_URL": "http://qdrant:6333", "AGENTSEARCH_JWT_SECRET": "s"}
    nodes = {"AGENTSEARCH_WORKSPACE_NODES": ",".join(NODES)}
    assert load_settings({**production, **nodes, "AGENTSEARCH_NODE_ID": "node-b"}).runs_node_worker_in_process
    ordinary = load_settings({**production, **nodes})  # a stateless front end: the list, no node id
    assert ordinary.routes_workspace_jobs_to_nodes and not ordinary.runs_node_worker_in_process
    assert not load_settings(production).runs_node_worker_in_process  # one machine: no node queues
    embedded = load_settings({**nodes, "AGENTSEARCH_NODE_ID": "node-a"})
    assert embedded.runs_worker_in_process and not embedded.runs_node_worker_in_process  # the full workers include it


def test_a_node_id_outside_the_node_list_is_refused() -> None:
    production = {"QDRANT_URL": "http://qdrant:6333", "AGENTSEARCH_JWT_SECRET": "s", "AGENTSEARCH_NODE_ID": "node-c"}
    both = r"node_id \(AGENTSEARCH_NODE_ID\): 'node-c' is not among workspace_nodes \(AGENTSEARCH_WORKSPACE_NODES: "
    with pytest.raises(SettingsError, match=both + "node-a,node-b\\)"):
        load_settings({**production, "AGENTSEARCH_WORKSPACE_NODES": ",".join(NODES)})
    with pytest.raises(SettingsError, match=both + "unset\\)"):
        load_settings(production)  # a node id without the list: the list is missing from this process
