"""A workspace node's front end in production (no in-process embed and fast workers) runs the worker
of its own node queue in its event loop: the workspace caches admit one process, so no separate
worker may index them. Other nodes' workspace jobs stay queued for their nodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.code.runtime import workspaces_of
from service.code.semantic import INDEX_JOB, schedule_indexing
from service.code.workspace import SearchConfig, workspace_id
from service.routing import node_for_workspace
from service.settings import Settings, load_settings
from service.state import ENGINE, WORKER_STATE
from tests.code.trees import write_tree
from tests.conftest import wait_until
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


def front_end(settings: Settings, node: str) -> Settings:
    """A workspace node's front end as production runs it: the embed and fast workers elsewhere."""
    return replace(settings, workspace_nodes=NODES, node_id=node, worker_in_process=False, embeddings_model=None)


async def test_the_front_end_runs_its_node_queue_and_leaves_the_other_nodes_jobs(settings: Settings) -> None:
    base = settings.allowed_roots[0]
    own, other = tree_held_by(base, "node-a"), tree_held_by(base, "node-b")
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(front_end(settings, "node-a"))))
    await client.start_server()
    try:
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
    finally:
        await client.close()


async def test_a_front_end_that_holds_no_workspaces_runs_no_worker(settings: Settings) -> None:
    client: TestClient[Any, Any] = TestClient(TestServer(create_app(front_end(settings, "gateway-1"))))
    await client.start_server()
    try:
        assert WORKER_STATE not in client.app
    finally:
        await client.close()


def test_the_node_worker_runs_in_the_front_end_only_on_a_listed_node_without_the_full_workers() -> None:
    production = {"QDRANT_URL": "http://qdrant:6333", "AGENTSEARCH_JWT_SECRET": "s", "AGENTSEARCH_NODE_ID": "node-b"}
    nodes = {"AGENTSEARCH_WORKSPACE_NODES": ",".join(NODES)}
    assert load_settings({**production, **nodes}).runs_node_worker_in_process
    assert not load_settings({**production, **nodes, "AGENTSEARCH_NODE_ID": "node-c"}).runs_node_worker_in_process
    assert not load_settings(production).runs_node_worker_in_process  # one machine: no node queues
    embedded = load_settings({"AGENTSEARCH_WORKSPACE_NODES": ",".join(NODES), "AGENTSEARCH_NODE_ID": "node-a"})
    assert embedded.runs_worker_in_process and not embedded.runs_node_worker_in_process  # the full workers include it
