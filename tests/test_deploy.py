"""deploy/: the shipped files pass `make deploy-check`, and the checker fails on what is broken;
the image's health-check script answers for a front end and for the workers' queues."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml

from deploy import healthcheck
from deploy.check import DEPLOY_DIR, main, run_checks
from tests.helpers import REDIS_URL

ROOT = DEPLOY_DIR.parent


def _copy_k8s(tmp_path: Path) -> Path:
    target = tmp_path / "k8s"
    shutil.copytree(DEPLOY_DIR / "k8s", target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _copy_compose(tmp_path: Path) -> Path:
    """The compose file in a tree like the repository's: its build context (..) holds deploy/Dockerfile."""
    (tmp_path / "deploy").mkdir()
    shutil.copy(DEPLOY_DIR / "Dockerfile", tmp_path / "deploy" / "Dockerfile")
    target = tmp_path / "deploy" / "docker-compose.yml"
    shutil.copy(DEPLOY_DIR / "docker-compose.yml", target)
    return target


def test_shipped_deploy_files_pass_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_checks()
    assert report.ok, "\n".join(map(str, report.problems))
    assert [s.split(":", 1)[0] for s in report.summaries] == ["compose", "kubernetes", "dockerfile"]
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "deploy-check: ok" in out and "Kubernetes 1.32 schemas" in out and "Compose specification schema" in out


def test_a_manifest_with_an_unknown_field_fails_the_schema_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k8s = _copy_k8s(tmp_path)
    _edit(k8s / "frontend.yaml", "readinessProbe:", "readinessProbes:")
    report = run_checks(compose=None, dockerfile=None, k8s_dir=k8s)
    assert not report.ok
    [problem] = report.problems
    assert problem.file.endswith("frontend.yaml") and problem.where.startswith("Deployment/agentsearch-frontend")
    assert "'readinessProbes' was unexpected" in problem.message
    assert main(["--k8s-dir", str(k8s)]) == 1
    assert "readinessProbes" in capsys.readouterr().err


def test_a_manifest_of_the_wrong_type_or_api_version_fails(tmp_path: Path) -> None:
    k8s = _copy_k8s(tmp_path)
    _edit(k8s / "worker.yaml", "replicas: 2", "replicas: two")
    _edit(k8s / "frontend.yaml", "apiVersion: autoscaling/v2", "apiVersion: autoscaling/v2beta1")
    messages = [p.message for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("'two' is not of type 'integer'" in m for m in messages)
    assert any("autoscaling/v2beta1" in m for m in messages)


def test_broken_references_between_manifests_fail(tmp_path: Path) -> None:
    k8s = _copy_k8s(tmp_path)
    _edit(k8s / "frontend.yaml", "path: /readyz", "path: /ready")
    _edit(k8s / "worker.yaml", "name: agentsearch-config", "name: agentsearch-conf")
    _edit(k8s / "config.yaml", 'AGENTSEARCH_QDRANT_SHARD_NUMBER: "6"', 'AGENTSEARCH_QDRANT_SHARDS: "6"')
    (k8s / "extra.yaml").write_text((k8s / "namespace.yaml").read_text().replace("name: agentsearch", "name: other"))
    messages = [str(p) for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("readinessProbe is an httpGet on /readyz" in m for m in messages)
    assert any("envFrom ConfigMap 'agentsearch-conf' is not in these manifests" in m for m in messages)
    assert any("AGENTSEARCH_QDRANT_SHARDS is not a setting" in m for m in messages)
    assert any("extra.yaml is not listed" in m for m in messages)


def test_a_compose_file_agentsearch_would_refuse_fails(tmp_path: Path) -> None:
    compose = _copy_compose(tmp_path)
    _edit(compose, 'AGENTSEARCH_QDRANT_REPLICATION_FACTOR: "2"', 'AGENTSEARCH_QDRANT_REPLICATION_FACTOR: "two"')
    _edit(compose, '"--bootstrap", "http://qdrant-0:6335", "--uri", "http://qdrant-2:6335"', '"--uri", "http://qdrant-2:6335"')
    report = run_checks(compose=compose, k8s_dir=None, dockerfile=None)
    messages = [str(p) for p in report.problems]
    assert any("services.frontend-1.environment: agentsearch would refuse" in m and "replication_factor" in m for m in messages)
    assert any("exactly one Qdrant node starts the cluster" in m for m in messages)


NODE_LIST = "  AGENTSEARCH_WORKSPACE_NODES: agentsearch-ws-0,agentsearch-ws-1\n"
NODE_ID_ENV = """            - name: AGENTSEARCH_NODE_ID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
"""


def test_the_workspace_node_list_is_in_the_configmap_every_pod_reads() -> None:
    """The shipped manifests: the list is in the shared ConfigMap, which the front ends, the workers
    and the workspace nodes all read; only the workspace nodes set a node id (their pod name)."""
    k8s = DEPLOY_DIR / "k8s"
    [config] = yaml.safe_load_all((k8s / "config.yaml").read_text())
    assert config["data"]["AGENTSEARCH_WORKSPACE_NODES"] == "agentsearch-ws-0,agentsearch-ws-1"
    for name in ("frontend.yaml", "worker.yaml", "workspace-nodes.yaml"):
        [workload] = [d for d in yaml.safe_load_all((k8s / name).read_text()) if d["kind"] in {"Deployment", "StatefulSet"}]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        assert {"configMapRef": {"name": "agentsearch-config"}} in container["envFrom"], name
        env = {v["name"] for v in container.get("env") or []}
        assert "AGENTSEARCH_WORKSPACE_NODES" not in env, name
        assert ("AGENTSEARCH_NODE_ID" in env) is (name == "workspace-nodes.yaml"), name
    [compose] = yaml.safe_load_all((DEPLOY_DIR / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        if service.get("command") in (["serve"], ["worker"]):
            assert service["environment"]["AGENTSEARCH_WORKSPACE_NODES"] == "frontend-1,frontend-2", name
            assert service["environment"].get("AGENTSEARCH_NODE_ID") == (name if name.startswith("frontend") else None), name


def test_workspace_nodes_that_miss_a_replica_or_a_front_end_fail(tmp_path: Path) -> None:
    k8s = _copy_k8s(tmp_path)
    _edit(k8s / "workspace-nodes.yaml", "replicas: 2", "replicas: 3")
    _edit(k8s / "workspace-nodes.yaml", "fieldPath: metadata.name", "fieldPath: metadata.namespace")
    messages = [str(p) for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("must list every replica, and only them: agentsearch-ws-0,agentsearch-ws-1,agentsearch-ws-2" in m for m in messages), messages
    assert any("AGENTSEARCH_NODE_ID comes from the pod's name" in m for m in messages), messages
    # The ConfigMap says two nodes; the front ends and workers read it too, so they miss the third.
    for where in ("Deployment/agentsearch-frontend", "Deployment/agentsearch-worker"):
        assert any(f"{where} container agentsearch: AGENTSEARCH_WORKSPACE_NODES must list the workspace nodes, agentsearch-ws-0,agentsearch-ws-1,agentsearch-ws-2" in m for m in messages), messages

    k8s = _copy_k8s(tmp_path / "unset")
    _edit(k8s / "config.yaml", NODE_LIST, "")
    messages = [str(p) for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("on 2 pods: set AGENTSEARCH_WORKSPACE_NODES=agentsearch-ws-0,agentsearch-ws-1 in the ConfigMap" in m for m in messages), messages

    (tmp_path / "short").mkdir()
    compose = _copy_compose(tmp_path / "short")
    _edit(compose, "AGENTSEARCH_WORKSPACE_NODES: frontend-1,frontend-2", "AGENTSEARCH_WORKSPACE_NODES: frontend-1")
    messages = [str(p) for p in run_checks(compose=compose, k8s_dir=None, dockerfile=None).problems]
    for name in ("frontend-1", "frontend-2", "worker-1", "worker-2"):
        assert any(f"services.{name}.environment: AGENTSEARCH_WORKSPACE_NODES must list every front end holding workspaces, by its AGENTSEARCH_NODE_ID: frontend-1,frontend-2" in m for m in messages), messages
    # frontend-2 is not in the list it reads: the service itself would refuse to start.
    assert any("services.frontend-2.environment: agentsearch would refuse these settings: node_id (AGENTSEARCH_NODE_ID): 'frontend-2' is not among workspace_nodes" in m for m in messages), messages
    (tmp_path / "same").mkdir()
    compose = _copy_compose(tmp_path / "same")
    _edit(compose, "AGENTSEARCH_NODE_ID: frontend-2", "AGENTSEARCH_NODE_ID: frontend-1")
    messages = [str(p) for p in run_checks(compose=compose, k8s_dir=None, dockerfile=None).problems]
    assert any("need distinct AGENTSEARCH_NODE_ID values" in m for m in messages), messages


def test_a_node_list_only_on_the_workspace_nodes_fails(tmp_path: Path) -> None:
    """The bug this guards: the list set on the StatefulSet alone, so an ordinary front end (the
    dashboard's warm action, a registration) and the workers queue workspace jobs on the fast queue."""
    k8s = _copy_k8s(tmp_path)
    _edit(k8s / "config.yaml", NODE_LIST, "")
    _edit(k8s / "workspace-nodes.yaml", NODE_ID_ENV, NODE_ID_ENV + "            - name: AGENTSEARCH_WORKSPACE_NODES\n              value: agentsearch-ws-0,agentsearch-ws-1\n")
    messages = [str(p) for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("StatefulSet/agentsearch-ws container agentsearch: set AGENTSEARCH_WORKSPACE_NODES in the ConfigMap every agentsearch pod reads" in m for m in messages), messages
    for where in ("Deployment/agentsearch-frontend", "Deployment/agentsearch-worker"):
        assert any(f"{where} container agentsearch: AGENTSEARCH_WORKSPACE_NODES must list the workspace nodes, agentsearch-ws-0,agentsearch-ws-1 (it says nothing)" in m for m in messages), messages

    k8s = _copy_k8s(tmp_path / "node-id")
    _edit(k8s / "worker.yaml", "          env:\n", "          env:\n            - name: AGENTSEARCH_NODE_ID\n              value: agentsearch-ws-0\n")
    messages = [str(p) for p in run_checks(compose=None, dockerfile=None, k8s_dir=k8s).problems]
    assert any("Deployment/agentsearch-worker container agentsearch: only the workspace nodes' StatefulSet sets AGENTSEARCH_NODE_ID" in m for m in messages), messages

    (tmp_path / "compose").mkdir()
    compose = _copy_compose(tmp_path / "compose")
    _edit(compose, "  AGENTSEARCH_WORKSPACE_NODES: frontend-1,frontend-2\n", "")
    for node in ("frontend-1", "frontend-2"):
        _edit(compose, f"      AGENTSEARCH_NODE_ID: {node}\n", f"      AGENTSEARCH_NODE_ID: {node}\n      AGENTSEARCH_WORKSPACE_NODES: frontend-1,frontend-2\n")
    messages = [str(p) for p in run_checks(compose=compose, k8s_dir=None, dockerfile=None).problems]
    assert not any("services.frontend-" in m for m in messages), messages
    for name in ("worker-1", "worker-2"):
        assert any(f"services.{name}.environment: AGENTSEARCH_WORKSPACE_NODES must list every front end holding workspaces" in m for m in messages), messages


def test_a_compose_file_off_the_schema_fails(tmp_path: Path) -> None:
    compose = _copy_compose(tmp_path)
    _edit(compose, "restart: unless-stopped", "restarts: unless-stopped")
    report = run_checks(compose=compose, k8s_dir=None, dockerfile=None)
    assert any("'restarts' was unexpected" in p.message for p in report.problems), report.problems


def test_a_dockerfile_without_its_guarantees_fails(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    text = (DEPLOY_DIR / "Dockerfile").read_text()
    text = text.replace("USER 10001:10001\n", "").replace("pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0", "pip install torch==2.13.0")
    dockerfile.write_text(text)
    messages = [p.message for p in run_checks(compose=None, k8s_dir=None, dockerfile=dockerfile, context=ROOT).problems]
    assert any("non-root USER" in m for m in messages)
    assert any("--index-url https://download.pytorch.org/whl/cpu" in m for m in messages)


class _Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def healthz_port() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Healthz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_healthcheck_asks_healthz_on_the_configured_port(healthz_port: int) -> None:
    assert healthcheck.main([], {"AGENTSEARCH_PORT": str(healthz_port)}) == 0
    server_gone = HTTPServer(("127.0.0.1", 0), _Healthz)
    closed_port = server_gone.server_address[1]
    server_gone.server_close()
    assert healthcheck.main(["http"], {"AGENTSEARCH_PORT": str(closed_port)}) == 1
    assert healthcheck.main(["bogus"], {}) == 2


async def test_worker_healthcheck_reads_arqs_health_keys_of_every_queue(redis_prefix: str) -> None:
    env = {"REDIS_URL": REDIS_URL, "AGENTSEARCH_QUEUE_PREFIX": redis_prefix}
    embed_key, bulk_key, fast_key = healthcheck.worker_health_keys(redis_prefix)
    client = aioredis.from_url(REDIS_URL)
    try:
        assert healthcheck.main(["worker"], env) == 1
        await client.set(embed_key, b"alive", px=60_000)
        await client.set(bulk_key, b"alive", px=60_000)
        assert "fast:health-check" in (healthcheck.check_worker(env) or "")
        await client.set(fast_key, b"alive", px=60_000)
        assert healthcheck.main(["worker"], env) == 0
        await client.delete(bulk_key)
        assert "bulk:health-check" in (healthcheck.check_worker(env) or "")
    finally:
        await client.delete(embed_key, bulk_key, fast_key)
        await client.aclose()
    assert healthcheck.main(["worker"], {"REDIS_URL": "redis://127.0.0.1:1/0"}) == 1
