"""Workspaces on several nodes: workspace jobs go to the queue of the node that holds the workspace
(``service.routing``), chunk embedding with them, only that node's ``agentsearch worker`` takes them, a process that is not one
of the nodes runs no node worker, and one machine (no ``workspace_nodes``) keeps them on the shared
fast queue."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from service.code.semantic import INDEX_JOB, WARM_JOB, schedule_indexing
from service.code.state import workspaces_of
from service.code.texts import EMBED_JOB
from service.code.workspace import SearchConfig, workspace_id
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.errors import SettingsError
from service.routing import node_for_workspace
from service.settings import Settings
from service.settings_loader import load_settings
from service.surfaces import surfaces
from tests.code.trees import write_tree
from tests.queues import queued_functions
from workers.settings import build_workers

ROOT = Path(__file__).resolve().parents[2]
NODES = ("ws-0", "ws-1", "ws-2")
TENANT = "user:alice"


async def test_workspace_jobs_go_to_the_queue_of_the_node_holding_the_workspace(settings: Settings) -> None:
    root = write_tree(settings.allowed_roots[0] / "repo")
    wid = workspace_id(TENANT, root)
    home = node_for_workspace(wid, NODES)
    engine = await open_engine(replace(settings, workspace_nodes=NODES, node_id=home), surfaces())
    try:
        assert engine.queue.node_local_jobs == {INDEX_JOB, WARM_JOB, EMBED_JOB}
        workspace, _ = await workspaces_of(engine).register(TENANT, root, SearchConfig())
        assert workspace.id == wid
        assert await schedule_indexing(engine, workspace, always=True)
        await engine.queue.enqueue_embed("catalog", "catalog", [("k", "h")])
        await engine.queue.enqueue("sweep", job_id=f"{settings.queue_prefix}:sweep:test", fast=True)
        # A chunk's text is in its workspace's cache: its embedding runs on the workspace's node.
        assert await engine.records("code").enqueue_embedding([(f"{wid}|src/a.py|h1", "c1"), (f"{wid}|src/b.py|h2", "c2")])
        names = engine.queue.names
        assert await queued_functions(engine, names.node(home)) == [INDEX_JOB, EMBED_JOB]
        assert await queued_functions(engine, names.fast) == ["sweep"]
        assert await queued_functions(engine, names.embed) == ["embed_records"]
        assert await queued_functions(engine, names.bulk) == []
        for other in set(NODES) - {home}:
            assert await queued_functions(engine, names.node(other)) == []
    finally:
        await engine.close()


async def test_one_machine_keeps_workspace_jobs_on_the_fast_queue(engine: Engine, settings: Settings) -> None:
    root = write_tree(settings.allowed_roots[0] / "repo")
    workspace, _ = await workspaces_of(engine).register(TENANT, root, SearchConfig())
    assert await schedule_indexing(engine, workspace, always=True)
    assert await engine.records("code").enqueue_embedding([(f"{workspace.id}|src/a.py|h1", "c1")])
    assert await queued_functions(engine, engine.queue.names.fast) == [INDEX_JOB]
    assert await queued_functions(engine, engine.queue.names.bulk) == [EMBED_JOB], "chunk embedding stays on the bulk queue"
    assert not [key async for key in engine.redis.scan_iter(match=f"{settings.queue_prefix}:queue:node:*")]


async def run_worker(settings: Settings, node: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "AGENTSEARCH_DATA_DIR": str(settings.data_dir),
        "REDIS_URL": settings.redis_url,
        "AGENTSEARCH_QUEUE_PREFIX": settings.queue_prefix,
        "AGENTSEARCH_JWT_SECRET": str(settings.jwt_secret),
        "AGENTSEARCH_WORKSPACE_NODES": ",".join(NODES),
        "AGENTSEARCH_NODE_ID": node,
        "AGENTSEARCH_ALLOWED_ROOTS": str(settings.allowed_roots[0]),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", "worker", "--burst", "--node-only",
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, out.decode()
    return out.decode()


async def test_only_the_holding_nodes_worker_runs_the_workspace_job(settings: Settings) -> None:
    """Real ``agentsearch worker --node-only`` processes, one after the other on the data directory
    (the embedded store admits one process at a time; on a cluster they would run side by side)."""
    root = write_tree(settings.allowed_roots[0] / "repo")
    wid = workspace_id(TENANT, root)
    home = node_for_workspace(wid, NODES)
    node_settings = replace(settings, workspace_nodes=NODES, node_id=home)
    engine = await open_engine(node_settings, surfaces())
    try:
        workspace, _ = await workspaces_of(engine).register(TENANT, root, SearchConfig())
        assert await schedule_indexing(engine, workspace, always=True)
    finally:
        await engine.close()

    other = next(node for node in NODES if node != home)
    await run_worker(settings, other)
    engine = await open_engine(node_settings, surfaces())
    try:
        assert await queued_functions(engine, engine.queue.names.node(home)) == [INDEX_JOB]  # not taken
    finally:
        await engine.close()

    await run_worker(settings, home)
    engine = await open_engine(node_settings, surfaces())
    try:
        assert await queued_functions(engine, engine.queue.names.node(home)) == []
        workspaces = workspaces_of(engine)
        indexed = workspaces.registry.get(wid)
        assert indexed is not None
        counts = await workspaces.counts(indexed)
        assert counts["chunks"] > 0
    finally:
        await engine.close()


async def test_a_process_that_is_no_workspace_node_runs_no_node_worker(settings: Settings) -> None:
    """``agentsearch worker`` (and the full in-process workers) with the node list but no node id (a
    worker pod, an ordinary front end) runs the embed and fast queues only, yet still sends a
    workspace's jobs to its node's queue; ``--node-only`` there is refused, naming both settings."""
    assert socket.gethostname() not in NODES  # the node name falls back to the host name
    root = write_tree(settings.allowed_roots[0] / "repo")
    wid = workspace_id(TENANT, root)
    home = node_for_workspace(wid, NODES)
    engine = await open_engine(replace(settings, workspace_nodes=NODES, node_id=None), surfaces())
    try:
        names = engine.queue.names
        workers = build_workers(engine)
        try:
            assert [worker.queue_name for worker in workers] == [names.embed, names.bulk, names.fast]
        finally:
            for worker in workers:
                await worker.close()
        with pytest.raises(SettingsError, match=r"node_id \(AGENTSEARCH_NODE_ID\): .* is not among workspace_nodes \(AGENTSEARCH_WORKSPACE_NODES: ws-0,ws-1,ws-2\)"):
            build_workers(engine, node_only=True)
        workspace, _ = await workspaces_of(engine).register(TENANT, root, SearchConfig())
        assert await schedule_indexing(engine, workspace, always=True)
        assert await queued_functions(engine, names.node(home)) == [INDEX_JOB]
        assert await queued_functions(engine, names.fast) == []
    finally:
        await engine.close()

    engine = await open_engine(replace(settings, workspace_nodes=NODES, node_id=home), surfaces())
    try:
        workers = build_workers(engine)
        try:  # a workspace node's full workers (the embedded default) include its node queue
            assert [worker.queue_name for worker in workers] == [engine.queue.names.embed, engine.queue.names.bulk, engine.queue.names.fast, engine.queue.names.node(home)]
        finally:
            for worker in workers:
                await worker.close()
    finally:
        await engine.close()


def test_node_settings_are_validated_naming_their_variable() -> None:
    with pytest.raises(SettingsError, match=r"workspace_nodes \(AGENTSEARCH_WORKSPACE_NODES\): 'ws 1' must be"):
        load_settings({"AGENTSEARCH_WORKSPACE_NODES": "ws-0,ws 1"})
    with pytest.raises(SettingsError, match=r"node_id \(AGENTSEARCH_NODE_ID\)"):
        load_settings({"AGENTSEARCH_NODE_ID": "../etc"})
    with pytest.raises(SettingsError, match=r"qdrant_path \(AGENTSEARCH_QDRANT_PATH\): set either"):
        load_settings({"QDRANT_URL": "http://qdrant:6333", "AGENTSEARCH_QDRANT_PATH": "/tmp/q", "AGENTSEARCH_JWT_SECRET": "s"})
    with pytest.raises(SettingsError, match=r"node_id \(AGENTSEARCH_NODE_ID\): 'ws-2' is not among workspace_nodes \(AGENTSEARCH_WORKSPACE_NODES: ws-0,ws-1\)"):
        load_settings({"AGENTSEARCH_WORKSPACE_NODES": "ws-0,ws-1", "AGENTSEARCH_NODE_ID": "ws-2"})
    settings = load_settings({"AGENTSEARCH_WORKSPACE_NODES": "ws-0, ws-1", "AGENTSEARCH_NODE_ID": "ws-1"})
    assert settings.workspace_nodes == ("ws-0", "ws-1") and settings.node_name == "ws-1"
    assert load_settings({"AGENTSEARCH_QDRANT_PATH": "/tmp/q"}).store_kind == "qdrant-local"
