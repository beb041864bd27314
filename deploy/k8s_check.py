"""Static check of the Kubernetes manifests in deploy/k8s: the API schemas, then the references
between objects and the shape the deployment relies on.

Each object is validated against the Kubernetes OpenAPI-derived JSON schemas that the
``kubernetes-validate`` package ships for every minor release, in strict mode (an unknown field such
as ``readinessProbes`` is an error, as ``kubectl apply --validate=strict`` would say). Then, across
objects: every Service, PodDisruptionBudget and workload selector matches pod labels; a named
``targetPort`` is a container port; a StatefulSet's ``serviceName`` is a headless Service; the
HorizontalPodAutoscaler targets an existing workload whose containers request the CPU it scales
on; every ConfigMap and Secret a pod reads exists; every container requests CPU and memory; the
agentsearch front ends probe ``/readyz`` (readiness) and ``/healthz`` (liveness); every agentsearch
container's environment passes the service's own settings validation; a StatefulSet of front ends
holding workspaces takes each pod's name as its node id, and ``AGENTSEARCH_WORKSPACE_NODES`` lists
its pods, every replica, in the shared ConfigMap (not in one workload's env), so that every
agentsearch pod (front ends, workers, workspace nodes) gets the same list and no other workload
sets a node id; everything lives in one declared namespace; kustomization.yaml lists every
manifest. What needs a cluster (admission, quotas, storage classes, the image itself) is not
checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError, VersionNotSupportedError

from .common import Problem, check_agentsearch_env, display_path, iter_mapping, load_yaml_documents

KUBERNETES_VERSION = "1.32"
KUSTOMIZATION = "kustomization.yaml"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass", "PriorityClass")
SECRET_PLACEHOLDER = "set-at-deploy-time"


@dataclass(frozen=True)
class Manifest:
    file: str
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.doc.get("metadata") or {}).get("name", ""))

    @property
    def where(self) -> str:
        return f"{self.kind}/{self.name}"


def manifest_files(directory: Path) -> list[Path]:
    """The manifests of ``directory``: every .yaml/.yml file except kustomization.yaml."""
    return sorted(p for p in directory.iterdir() if p.suffix in {".yaml", ".yml"} and p.name != KUSTOMIZATION)


def check_kubernetes(
    paths: list[Path], *, version: str = KUBERNETES_VERSION, kustomization: Path | None = None
) -> tuple[list[Problem], str]:
    """Problems of the manifests in ``paths`` (see the module docstring), and a summary line."""
    problems: list[Problem] = []
    manifests: list[Manifest] = []
    for path in paths:
        documents, parse_problem = load_yaml_documents(path)
        if parse_problem is not None:
            problems.append(parse_problem)
        for index, doc in enumerate(documents):
            if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
                problems.append(Problem(display_path(path), f"document {index + 1}", "not a Kubernetes object (apiVersion and kind)"))
                continue
            manifests.append(Manifest(display_path(path), doc))
    for manifest in manifests:
        problems += _validate_schema(manifest, version)
    if not problems:  # the cross-checks assume the shapes the schemas guarantee
        problems += _check_cross_references(manifests)
    if kustomization is not None:
        problems += _check_kustomization(kustomization, paths)
    source = f"kubernetes-validate {metadata.version('kubernetes-validate')}"
    summary = f"{len(manifests)} objects in {len(paths)} files, Kubernetes {version} schemas, strict ({source}), references"
    return problems, summary


def _validate_schema(manifest: Manifest, version: str) -> list[Problem]:
    try:
        kubernetes_validate.validate(manifest.doc, version, strict=True)
    except ValidationError as exc:
        path = ".".join(str(part) for part in exc.absolute_path)
        return [Problem(manifest.file, f"{manifest.where} {path}".strip(), exc.message)]
    except SchemaNotFoundError as exc:
        return [Problem(manifest.file, manifest.where, exc.message)]
    except VersionNotSupportedError as exc:
        return [Problem(manifest.file, manifest.where, exc.message)]
    return []


# ---- pods ----------------------------------------------------------------------------------------


def pod_template(manifest: Manifest) -> dict[str, Any] | None:
    template: dict[str, Any] | None = None
    if manifest.kind in WORKLOAD_KINDS:
        template = manifest.doc["spec"]["template"]
    elif manifest.kind == "CronJob":
        template = manifest.doc["spec"]["jobTemplate"]["spec"]["template"]
    return template


def _containers(template: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = template.get("spec") or {}
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def _labels_match(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def _workloads(manifests: list[Manifest]) -> list[tuple[Manifest, dict[str, Any]]]:
    return [(m, t) for m in manifests if (t := pod_template(m)) is not None]


def _is_agentsearch(container: dict[str, Any]) -> bool:
    return str(container.get("image", "")).split("/")[-1].startswith("agentsearch")


# ---- cross references ----------------------------------------------------------------------------


def _check_cross_references(manifests: list[Manifest]) -> list[Problem]:
    problems = _check_namespaces(manifests)
    workloads = _workloads(manifests)
    by_kind: dict[tuple[str, str], Manifest] = {(m.kind, m.name): m for m in manifests}
    for manifest, template in workloads:
        labels = (template.get("metadata") or {}).get("labels") or {}
        match_labels = ((manifest.doc["spec"].get("selector") or {}).get("matchLabels")) or {}
        if manifest.kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"} and not _labels_match(match_labels, labels):
            problems.append(Problem(manifest.file, f"{manifest.where} spec.selector", "matchLabels must be a subset of the pod template's labels"))
        if manifest.kind == "StatefulSet":
            service = by_kind.get(("Service", manifest.doc["spec"].get("serviceName", "")))
            if service is None or service.doc["spec"].get("clusterIP") != "None":
                problems.append(Problem(manifest.file, f"{manifest.where} spec.serviceName", "must name a headless Service (clusterIP: None) of these manifests"))
        problems += _check_pod(manifest, template, by_kind)
    for manifest in manifests:
        if manifest.kind == "Service":
            problems += _check_service(manifest, workloads)
        elif manifest.kind == "PodDisruptionBudget":
            problems += _check_pdb(manifest, workloads)
        elif manifest.kind == "HorizontalPodAutoscaler":
            problems += _check_hpa(manifest, by_kind)
    problems += _check_shared_workspace_nodes(workloads, by_kind)
    return problems + _check_topology(manifests, workloads)


def _check_namespaces(manifests: list[Manifest]) -> list[Problem]:
    declared = {m.name for m in manifests if m.kind == "Namespace"}
    problems = []
    for manifest in manifests:
        if manifest.kind in CLUSTER_SCOPED:
            continue
        namespace = (manifest.doc.get("metadata") or {}).get("namespace")
        if not namespace:
            problems.append(Problem(manifest.file, manifest.where, "set metadata.namespace (kubectl apply -f would use the current one)"))
        elif namespace not in declared:
            problems.append(Problem(manifest.file, manifest.where, f"namespace {namespace!r} is not declared by a Namespace of these manifests"))
    return problems


def _check_pod(manifest: Manifest, template: dict[str, Any], by_kind: dict[tuple[str, str], Manifest]) -> list[Problem]:
    problems = []
    spec = template.get("spec") or {}
    claims = {c["metadata"]["name"] for c in manifest.doc["spec"].get("volumeClaimTemplates") or []}
    volumes = {v["name"] for v in spec.get("volumes") or []} | claims
    for volume in spec.get("volumes") or []:
        for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
            ref = volume.get(key)
            if ref is not None and not ref.get("optional"):
                name = ref.get("name") if kind == "ConfigMap" else ref.get("secretName")
                if ("ConfigMap" if kind == "ConfigMap" else "Secret", name) not in by_kind:
                    problems.append(Problem(manifest.file, f"{manifest.where} volume {volume['name']}", f"{kind} {name!r} is not in these manifests"))
    for container in _containers(template):
        where = f"{manifest.where} container {container['name']}"
        requests = (container.get("resources") or {}).get("requests") or {}
        missing = [r for r in ("cpu", "memory") if r not in requests]
        if missing:
            problems.append(Problem(manifest.file, where, f"set resources.requests {' and '.join(missing)} (scheduling, and the autoscaler's CPU ratio)"))
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in volumes:
                problems.append(Problem(manifest.file, where, f"volumeMount {mount['name']!r} names no volume or volumeClaimTemplate"))
        problems += _check_env_refs(manifest, where, container, by_kind)
        if _is_agentsearch(container):
            problems += _check_agentsearch_container(manifest, where, container, by_kind)
    return problems


def _check_env_refs(manifest: Manifest, where: str, container: dict[str, Any], by_kind: dict[tuple[str, str], Manifest]) -> list[Problem]:
    problems = []
    for source in container.get("envFrom") or []:
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is not None and not ref.get("optional") and (kind, ref["name"]) not in by_kind:
                problems.append(Problem(manifest.file, where, f"envFrom {kind} {ref['name']!r} is not in these manifests"))
    for variable in container.get("env") or []:
        value_from = variable.get("valueFrom") or {}
        for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            ref = value_from.get(key)
            if ref is None or ref.get("optional"):
                continue
            target = by_kind.get((kind, ref["name"]))
            if target is None or ref["key"] not in _data_keys(target):
                problems.append(Problem(manifest.file, where, f"env {variable['name']}: {kind} {ref['name']!r} has no key {ref['key']!r}"))
    return problems


def _data_keys(manifest: Manifest) -> set[str]:
    return set((manifest.doc.get("data") or {}).keys()) | set((manifest.doc.get("stringData") or {}).keys())


def _container_env(container: dict[str, Any], by_kind: dict[tuple[str, str], Manifest]) -> dict[str, str]:
    """The environment a container gets from its ConfigMaps, Secrets and env (secret values, which
    are set at deploy time, stand as placeholders)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source and ("ConfigMap", source["configMapRef"]["name"]) in by_kind:
            env.update({k: str(v) for k, v in iter_mapping(by_kind[("ConfigMap", source["configMapRef"]["name"])].doc.get("data"))})
        if "secretRef" in source and ("Secret", source["secretRef"]["name"]) in by_kind:
            env.update(dict.fromkeys(_data_keys(by_kind[("Secret", source["secretRef"]["name"])]), SECRET_PLACEHOLDER))
    for variable in container.get("env") or []:
        value_from = variable.get("valueFrom") or {}
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        elif "secretKeyRef" in value_from:
            env[variable["name"]] = SECRET_PLACEHOLDER
        elif "configMapKeyRef" in value_from and ("ConfigMap", value_from["configMapKeyRef"]["name"]) in by_kind:
            data = dict(iter_mapping(by_kind[("ConfigMap", value_from["configMapKeyRef"]["name"])].doc.get("data")))
            if value_from["configMapKeyRef"]["key"] in data:
                env[variable["name"]] = str(data[value_from["configMapKeyRef"]["key"]])
    return env


def _check_agentsearch_container(manifest: Manifest, where: str, container: dict[str, Any], by_kind: dict[tuple[str, str], Manifest]) -> list[Problem]:
    env = _container_env(container, by_kind)
    problems = check_agentsearch_env(env, manifest.file, where)
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if _is_workspace_node(manifest, container, env):
        problems += _check_workspace_nodes(manifest, where, container, env)
    if command[:1] != ["worker"]:  # serve is the image's default command
        ports = {p.get("name") for p in container.get("ports") or []} | {p["containerPort"] for p in container.get("ports") or []}
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            http = (container.get(probe) or {}).get("httpGet") or {}
            if http.get("path") != path:
                problems.append(Problem(manifest.file, where, f"a front end's {probe} is an httpGet on {path}"))
            elif http.get("port") not in ports:
                problems.append(Problem(manifest.file, where, f"{probe} port {http.get('port')!r} is not a container port"))
    return problems


def _env_entry(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in container.get("env") or [] if v["name"] == name), None)


def _listed_nodes(env: dict[str, str]) -> list[str]:
    return [node.strip() for node in env.get("AGENTSEARCH_WORKSPACE_NODES", "").split(",") if node.strip()]


def _is_workspace_node(manifest: Manifest, container: dict[str, Any], env: dict[str, str]) -> bool:
    """A StatefulSet's agentsearch front end that names itself as a node or holds workspaces."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if manifest.kind != "StatefulSet" or command[:1] == ["worker"] or not _is_agentsearch(container):
        return False
    return _env_entry(container, "AGENTSEARCH_NODE_ID") is not None or "AGENTSEARCH_ALLOWED_ROOTS" in env


def _node_pods(manifest: Manifest) -> list[str]:
    """A StatefulSet's pod names: ``<name>-0`` .. ``<name>-<replicas-1>``."""
    return [f"{manifest.name}-{index}" for index in range(int(manifest.doc["spec"].get("replicas", 1)))]


def _check_workspace_nodes(manifest: Manifest, where: str, container: dict[str, Any], env: dict[str, str]) -> list[Problem]:
    """A StatefulSet of front ends holding workspaces names its pods as the workspace nodes: every
    pod takes its own name as its node id, and the list (in the shared ConfigMap) holds every
    replica, so each workspace job reaches the queue of a pod that runs it."""
    pods = _node_pods(manifest)
    listed = _listed_nodes(env)
    problems = []
    own = _env_entry(container, "AGENTSEARCH_WORKSPACE_NODES")
    if own is not None and "configMapKeyRef" not in (own.get("valueFrom") or {}):
        problems.append(
            Problem(
                manifest.file,
                where,
                "set AGENTSEARCH_WORKSPACE_NODES in the ConfigMap every agentsearch pod reads, not in this pod's env: "
                "every front end and worker enqueues workspace jobs by it",
            )
        )
    node_id = _env_entry(container, "AGENTSEARCH_NODE_ID")
    if not listed:
        if node_id is not None or len(pods) > 1:
            problems.append(Problem(manifest.file, where, f"front ends holding workspaces on {len(pods)} pods: set AGENTSEARCH_WORKSPACE_NODES={','.join(pods)} in the ConfigMap every agentsearch pod reads"))
        return problems
    if listed != pods:
        problems.append(Problem(manifest.file, where, f"AGENTSEARCH_WORKSPACE_NODES must list every replica, and only them: {','.join(pods)} (it says {','.join(listed)})"))
    if node_id is not None and ((node_id.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "metadata.name":
        problems.append(Problem(manifest.file, where, "AGENTSEARCH_NODE_ID comes from the pod's name (valueFrom.fieldRef.fieldPath: metadata.name)"))
    return problems


def _check_shared_workspace_nodes(workloads: list[tuple[Manifest, dict[str, Any]]], by_kind: dict[tuple[str, str], Manifest]) -> list[Problem]:
    """Every agentsearch pod gets the workspace nodes' list, the same one: a front end without it
    (the dashboard's warm action, a registration) or a worker (a sweep) would queue a workspace job
    on the shared fast queue, where no workspace node takes it. Only the workspace nodes set a node
    id: another pod with a node's name would run that node's queue without its files."""
    nodes: set[str] = set()
    node_workloads: set[str] = set()
    for manifest, template in workloads:
        for container in _containers(template):
            if _is_workspace_node(manifest, container, _container_env(container, by_kind)):
                nodes.update(_node_pods(manifest))
                node_workloads.add(manifest.where)
    if not nodes:
        return []
    problems = []
    for manifest, template in workloads:
        if manifest.where in node_workloads:
            continue  # _check_workspace_nodes compares its list with its replicas
        for container in _containers(template):
            if not _is_agentsearch(container):
                continue
            where = f"{manifest.where} container {container['name']}"
            listed = _listed_nodes(_container_env(container, by_kind))
            if set(listed) != nodes:
                problems.append(
                    Problem(
                        manifest.file,
                        where,
                        f"AGENTSEARCH_WORKSPACE_NODES must list the workspace nodes, {','.join(sorted(nodes))} (it says {','.join(listed) or 'nothing'}): "
                        "every agentsearch pod enqueues workspace jobs by it; set it in the ConfigMap they all read",
                    )
                )
            if _env_entry(container, "AGENTSEARCH_NODE_ID") is not None:
                problems.append(Problem(manifest.file, where, "only the workspace nodes' StatefulSet sets AGENTSEARCH_NODE_ID: this pod would run a node queue without the node's files"))
    return problems


def _check_service(manifest: Manifest, workloads: list[tuple[Manifest, dict[str, Any]]]) -> list[Problem]:
    selector = manifest.doc["spec"].get("selector") or {}
    if not selector:
        return []  # a Service without a selector is managed by hand (EndpointSlices)
    matched = [t for _, t in workloads if _labels_match(selector, (t.get("metadata") or {}).get("labels") or {})]
    if not matched:
        return [Problem(manifest.file, f"{manifest.where} spec.selector", "matches no pod template of these manifests")]
    port_names = {p.get("name") for t in matched for c in _containers(t) for p in c.get("ports") or []}
    problems = []
    for port in manifest.doc["spec"].get("ports") or []:
        target = port.get("targetPort")
        if isinstance(target, str) and target not in port_names:
            problems.append(Problem(manifest.file, f"{manifest.where} port {port.get('name')}", f"targetPort {target!r} is no container port name of the selected pods"))
    return problems


def _check_pdb(manifest: Manifest, workloads: list[tuple[Manifest, dict[str, Any]]]) -> list[Problem]:
    selector = (manifest.doc["spec"].get("selector") or {}).get("matchLabels") or {}
    matched = [w for w, t in workloads if _labels_match(selector, (t.get("metadata") or {}).get("labels") or {})]
    if not matched:
        return [Problem(manifest.file, f"{manifest.where} spec.selector", "matches no pod template of these manifests")]
    min_available = manifest.doc["spec"].get("minAvailable")
    replicas = sum(int(w.doc["spec"].get("replicas", 1)) for w in matched)
    if isinstance(min_available, int) and min_available >= replicas:
        return [Problem(manifest.file, manifest.where, f"minAvailable {min_available} with {replicas} replica(s) blocks every voluntary eviction (node drains)")]
    return []


def _check_hpa(manifest: Manifest, by_kind: dict[tuple[str, str], Manifest]) -> list[Problem]:
    ref = manifest.doc["spec"]["scaleTargetRef"]
    target = by_kind.get((ref["kind"], ref["name"]))
    if target is None:
        return [Problem(manifest.file, f"{manifest.where} spec.scaleTargetRef", f"{ref['kind']}/{ref['name']} is not in these manifests")]
    resources = {m["resource"]["name"] for m in manifest.doc["spec"].get("metrics") or [] if m.get("type") == "Resource"}
    template = pod_template(target) or {}
    problems = []
    for resource in sorted(resources):
        for container in _containers(template):
            if resource not in ((container.get("resources") or {}).get("requests") or {}):
                problems.append(Problem(manifest.file, manifest.where, f"scales on {resource} but container {container['name']} of {target.where} requests none"))
    return problems


def _check_topology(manifests: list[Manifest], workloads: list[tuple[Manifest, dict[str, Any]]]) -> list[Problem]:
    """The objects the deployment needs, checked only on a full set (a directory with a Namespace)."""
    if not any(m.kind == "Namespace" for m in manifests):
        return []
    file = manifests[0].file
    problems = []
    kinds_by_target = {(m.doc["spec"]["scaleTargetRef"]["kind"], m.doc["spec"]["scaleTargetRef"]["name"]) for m in manifests if m.kind == "HorizontalPodAutoscaler"}
    front_ends = [m for m, t in workloads if m.kind == "Deployment" and any(_is_agentsearch(c) and (c.get("args") or ["serve"])[0] == "serve" for c in _containers(t))]
    workers = [m for m, t in workloads if m.kind == "Deployment" and any(_is_agentsearch(c) and (c.get("args") or [""])[0] == "worker" for c in _containers(t))]
    if not front_ends:
        problems.append(Problem(file, "", "no Deployment runs the agentsearch front end (args: [serve])"))
    for front_end in front_ends:
        if ("Deployment", front_end.name) not in kinds_by_target:
            problems.append(Problem(front_end.file, front_end.where, "no HorizontalPodAutoscaler scales this front end"))
        if not any(m.kind == "PodDisruptionBudget" and _labels_match(m.doc["spec"]["selector"].get("matchLabels") or {}, front_end.doc["spec"]["template"]["metadata"].get("labels") or {}) for m in manifests):
            problems.append(Problem(front_end.file, front_end.where, "no PodDisruptionBudget covers this front end"))
    if not workers:
        problems.append(Problem(file, "", "no Deployment runs the agentsearch workers (args: [worker])"))
    qdrant = [(m, t) for m, t in workloads if m.kind == "StatefulSet" and any("qdrant/qdrant" in str(c.get("image")) for c in _containers(t))]
    if not qdrant:
        problems.append(Problem(file, "", "no Qdrant StatefulSet"))
    for manifest, template in qdrant:
        if int(manifest.doc["spec"].get("replicas", 1)) < 3:
            problems.append(Problem(manifest.file, manifest.where, "a Qdrant cluster that survives losing a node needs 3 replicas"))
        env = {e["name"]: e.get("value") for c in _containers(template) for e in c.get("env") or []}
        if str(env.get("QDRANT__CLUSTER__ENABLED", "")).lower() != "true":
            problems.append(Problem(manifest.file, manifest.where, "set QDRANT__CLUSTER__ENABLED=true (distributed mode)"))
    if not any(m.kind == "StatefulSet" and any("redis" in str(c.get("image")).split("/")[-1] for c in _containers(t)) for m, t in workloads):
        problems.append(Problem(file, "", "no Redis StatefulSet (the arq queues need persistence)"))
    return problems


def _check_kustomization(kustomization: Path, paths: list[Path]) -> list[Problem]:
    file = display_path(kustomization)
    documents, parse_problem = load_yaml_documents(kustomization)
    if parse_problem is not None:
        return [parse_problem]
    resources = [str(r) for r in (documents[0] if documents else {}).get("resources") or []]
    problems = [Problem(file, "resources", f"{r} does not exist") for r in resources if not (kustomization.parent / r).is_file()]
    listed = {(kustomization.parent / r).resolve() for r in resources}
    for path in paths:
        if path.resolve() not in listed and ".example." not in path.name:
            problems.append(Problem(file, "resources", f"{path.name} is not listed (kubectl apply -k would leave it out)"))
    return problems
