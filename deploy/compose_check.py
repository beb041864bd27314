"""Static check of deploy/docker-compose.yml: the Compose specification's JSON schema, then the
references and the topology the deployment relies on.

No Docker engine (and no ``docker compose`` plugin) runs here, so the file is interpolated the way
Compose does it (``${VAR:-default}``, ``${VAR:?message}``, ``$$``) with an empty environment, and the
result is validated against the Compose specification schema that the ``check-jsonschema`` package
vendors. Then: every ``depends_on`` target exists (with a health check where the condition asks
for one), every named volume is declared, every service has a health check, the Qdrant services
form one cluster (one ``--uri`` seed, the rest ``--bootstrap`` from it), Redis persists (AOF), at
least two front ends (``serve``) and two workers (``worker``) run, each with a Qdrant URL and a Redis
URL that name services of this file, one shared JWT secret, and settings agentsearch accepts. Front
ends holding workspaces (``AGENTSEARCH_ALLOWED_ROOTS``), when more than one, are the workspace
nodes: each has its own ``AGENTSEARCH_NODE_ID``, no other service has one, and every agentsearch
service (front ends and workers: each enqueues workspace jobs) gets the same
``AGENTSEARCH_WORKSPACE_NODES``, listing them all.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from importlib import metadata, resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema

from service.redact import mask_url

from .common import Problem, check_agentsearch_env, display_path, load_yaml_documents, walk_strings

# The image built from deploy/Dockerfile carries a HEALTHCHECK (checked in dockerfile_check).
AGENTSEARCH_DOCKERFILE = "deploy/Dockerfile"
QDRANT_P2P_PORT = 6335
MIN_QDRANT_NODES = 3
MIN_FRONT_ENDS = 2
MIN_WORKERS = 2

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


def compose_schema() -> tuple[dict[str, Any], str]:
    """The Compose specification schema vendored by check-jsonschema, and where it came from."""
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    return json.loads(text), f"check-jsonschema {metadata.version('check-jsonschema')}"


def interpolate(value: str, environ: Mapping[str, str], required: set[str]) -> str:
    """Compose's variable interpolation of one string. A ``${VAR:?msg}`` that is unset is noted
    in ``required`` and stands as a placeholder value, so the rest of the file can be checked."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["named"]
        op, arg = match["op"], match["arg"] or ""
        current = environ.get(name)
        is_set = current is not None and (current != "" or op is None or not op.startswith(":"))
        if op in {":-", "-"}:
            return current if is_set and current is not None else arg
        if op in {":+", "+"}:
            return arg if is_set else ""
        if op in {":?", "?"} and not is_set:
            required.add(name)
            return f"placeholder-for-{name}"
        return current or ""

    return _VARIABLE.sub(replace, value)


def check_compose(path: Path, environ: Mapping[str, str] | None = None) -> tuple[list[Problem], str]:
    """Problems in the compose file at ``path``, and a one-line summary of what was checked."""
    file = display_path(path)
    documents, parse_problem = load_yaml_documents(path)
    if parse_problem is not None:
        return [parse_problem], "not parsed"
    if len(documents) != 1 or not isinstance(documents[0], dict):
        return [Problem(file, "", "expected one YAML mapping (a compose file)")], "not parsed"
    required: set[str] = set()
    model = walk_strings(documents[0], lambda text: interpolate(text, environ or {}, required))
    schema, source = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = [
        Problem(file, _json_path(error.absolute_path) or "(top)", error.message)
        for error in _useful_errors(list(validator.iter_errors(model)))
    ]
    if not problems:  # the references below assume the shapes the schema guarantees
        problems += _check_references(model, path, file)
        problems += _check_topology(model, file)
    services = len(model.get("services") or {})
    summary = f"{file}: {services} services, Compose specification schema ({source}), references and topology"
    if required:
        summary += f"; needs {', '.join(sorted(required))} at deploy time"
    return problems, summary


# ---- references ----------------------------------------------------------------------------------


def _check_references(model: dict[str, Any], path: Path, file: str) -> list[Problem]:
    problems: list[Problem] = []
    services: dict[str, Any] = model.get("services") or {}
    declared_volumes = set((model.get("volumes") or {}).keys())
    for name, service in services.items():
        where = f"services.{name}"
        if not service.get("image") and not service.get("build"):
            problems.append(Problem(file, where, "needs an image or a build"))
        problems += _check_build(service.get("build"), path, file, where)
        for target, condition in _depends_on(service).items():
            if target not in services:
                problems.append(Problem(file, f"{where}.depends_on", f"{target!r} is not a service of this file"))
            elif condition == "service_healthy" and not _has_healthcheck(services[target]):
                problems.append(Problem(file, f"{where}.depends_on", f"waits for {target!r} to be healthy, but it has no health check"))
        for volume in _named_volumes(service):
            if volume not in declared_volumes:
                problems.append(Problem(file, f"{where}.volumes", f"named volume {volume!r} is not declared under top-level volumes"))
        if not _has_healthcheck(service):
            problems.append(Problem(file, where, "has no health check (and its image has none)"))
    return problems


def _check_build(build: Any, path: Path, file: str, where: str) -> list[Problem]:
    if not build:
        return []
    context = path.parent / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    if not context.is_dir():
        return [Problem(file, f"{where}.build.context", f"{context} is not a directory")]
    if not (context / dockerfile).is_file():
        return [Problem(file, f"{where}.build.dockerfile", f"{dockerfile} does not exist in the build context {context}")]
    return []


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    depends = service.get("depends_on") or {}
    if isinstance(depends, list):
        return {name: "service_started" for name in depends}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in depends.items()}


def _named_volumes(service: dict[str, Any]) -> list[str]:
    names = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source = volume.split(":", 1)[0] if ":" in volume else ""
            if source and not source.startswith((".", "/", "~")):
                names.append(source)
        elif volume.get("type") == "volume" and volume.get("source"):
            names.append(volume["source"])
    return names


def _builds_agentsearch(service: dict[str, Any]) -> bool:
    build = service.get("build")
    return isinstance(build, dict) and str(build.get("dockerfile", "")).endswith(AGENTSEARCH_DOCKERFILE)


def _has_healthcheck(service: dict[str, Any]) -> bool:
    healthcheck = service.get("healthcheck")
    if healthcheck is not None:
        return not healthcheck.get("disable") and healthcheck.get("test") not in (None, ["NONE"], "NONE")
    return _builds_agentsearch(service)


# ---- topology ------------------------------------------------------------------------------------


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _flag(command: list[str], flag: str) -> str | None:
    for index, part in enumerate(command):
        if part == flag and index + 1 < len(command):
            return command[index + 1]
        if part.startswith(flag + "="):
            return part.split("=", 1)[1]
    return None


def _check_topology(model: dict[str, Any], file: str) -> list[Problem]:
    services: dict[str, Any] = model.get("services") or {}
    qdrant = {n: s for n, s in services.items() if "qdrant/qdrant" in str(s.get("image", ""))}
    redis = {n for n, s in services.items() if str(s.get("image", "")).split("/")[-1].startswith("redis")}
    problems = _check_qdrant_cluster(qdrant, file)
    for name in sorted(redis):
        command = _command(services[name])
        if _flag(command, "--appendonly") != "yes":
            problems.append(Problem(file, f"services.{name}.command", "Redis holds the job queues: run it with --appendonly yes"))
    if not redis:
        problems.append(Problem(file, "services", "no Redis service (the arq queues, rate limits and caches)"))
    agentsearch = {n: s for n, s in services.items() if _builds_agentsearch(s) or str(s.get("image", "")).startswith("agentsearch")}
    roles = {n: (_command(s) or ["serve"])[0] for n, s in agentsearch.items()}
    for role, least in (("serve", MIN_FRONT_ENDS), ("worker", MIN_WORKERS)):
        count = sum(1 for r in roles.values() if r == role)
        if count < least:
            problems.append(Problem(file, "services", f"{count} agentsearch {role} service(s); the deployment runs at least {least}"))
    secrets = set()
    for name, service in agentsearch.items():
        where = f"services.{name}.environment"
        env = _environment(service)
        secrets.add(env.get("AGENTSEARCH_JWT_SECRET"))
        problems += _check_urls(env, set(qdrant), redis, file, where)
        if roles[name] == "serve" and env.get("AGENTSEARCH_WORKER_IN_PROCESS", "").lower() in {"1", "true", "yes", "on"}:
            problems.append(Problem(file, where, "front ends run no in-process worker beside QDRANT_URL (the worker services do the jobs)"))
        problems += check_agentsearch_env(env, file, where)
    if len(secrets) > 1:
        problems.append(Problem(file, "services", "agentsearch services must share one AGENTSEARCH_JWT_SECRET (tokens of one front end must pass on another)"))
    envs = {n: _environment(s) for n, s in agentsearch.items()}
    return problems + _check_workspace_nodes(envs, roles, file)


def _check_workspace_nodes(envs: dict[str, dict[str, str]], roles: dict[str, str], file: str) -> list[Problem]:
    """Front ends holding workspaces are the workspace nodes: each names itself, no other service
    takes a node's name, and every agentsearch service lists them all (any of them may enqueue a
    workspace job: a front end's registration or warm action, a worker's sweep), so each workspace
    job reaches the queue of the front end that runs it."""
    holders = {name: env for name, env in envs.items() if roles[name] == "serve" and env.get("AGENTSEARCH_ALLOWED_ROOTS")}
    if len(holders) < 2:
        return []
    problems = []
    node_ids = {name: env.get("AGENTSEARCH_NODE_ID", "") for name, env in holders.items()}
    expected = sorted(filter(None, node_ids.values()))
    for name, env in sorted(envs.items()):
        where = f"services.{name}.environment"
        listed = sorted(node.strip() for node in env.get("AGENTSEARCH_WORKSPACE_NODES", "").split(",") if node.strip())
        if name in holders and not node_ids[name]:
            problems.append(Problem(file, where, "a front end holding workspaces names itself: set AGENTSEARCH_NODE_ID"))
        if name not in holders and env.get("AGENTSEARCH_NODE_ID"):
            problems.append(Problem(file, where, "only a front end holding workspaces sets AGENTSEARCH_NODE_ID: this service would run a node queue without the node's files"))
        if listed != expected:
            problems.append(
                Problem(
                    file,
                    where,
                    f"AGENTSEARCH_WORKSPACE_NODES must list every front end holding workspaces, by its AGENTSEARCH_NODE_ID: {','.join(expected)} "
                    "(every front end and worker enqueues workspace jobs by it: set it in the environment they share)",
                )
            )
    named = [node_id for node_id in node_ids.values() if node_id]
    if len(set(named)) < len(named):
        problems.append(Problem(file, "services", "front ends holding workspaces need distinct AGENTSEARCH_NODE_ID values"))
    return problems


def _check_qdrant_cluster(qdrant: dict[str, Any], file: str) -> list[Problem]:
    problems: list[Problem] = []
    if len(qdrant) < MIN_QDRANT_NODES:
        problems.append(Problem(file, "services", f"{len(qdrant)} Qdrant service(s); a cluster that survives losing a node needs {MIN_QDRANT_NODES}"))
    uris: dict[str, str] = {}
    seeds = []
    for name, service in qdrant.items():
        where = f"services.{name}"
        if _environment(service).get("QDRANT__CLUSTER__ENABLED", "").lower() != "true":
            problems.append(Problem(file, f"{where}.environment", "set QDRANT__CLUSTER__ENABLED=true (distributed mode)"))
        command = _command(service)
        uri = _flag(command, "--uri")
        expected = f"http://{name}:{QDRANT_P2P_PORT}"
        if uri != expected:
            problems.append(Problem(file, f"{where}.command", f"--uri must be this node's peer address {expected}, got {uri!r}"))
        uris[name] = expected
        if _flag(command, "--bootstrap") is None:
            seeds.append(name)
    if qdrant and len(seeds) != 1:
        problems.append(Problem(file, "services", f"exactly one Qdrant node starts the cluster (no --bootstrap); found {sorted(seeds)}"))
    for name, service in qdrant.items():
        bootstrap = _flag(_command(service), "--bootstrap")
        if bootstrap is not None and bootstrap not in {uri for other, uri in uris.items() if other != name}:
            problems.append(Problem(file, f"services.{name}.command", f"--bootstrap {bootstrap!r} is not another Qdrant node's peer address"))
    return problems


def _check_urls(env: dict[str, str], qdrant: set[str], redis: set[str], file: str, where: str) -> list[Problem]:
    problems = []
    qdrant_host = urlsplit(env.get("QDRANT_URL", "")).hostname
    if qdrant_host not in qdrant:
        problems.append(Problem(file, where, f"QDRANT_URL must point at a Qdrant service of this file, got {mask_url(env.get('QDRANT_URL', ''))!r}"))
    redis_host = urlsplit(env.get("REDIS_URL", "")).hostname
    if redis_host not in redis:
        problems.append(Problem(file, where, f"REDIS_URL must point at the Redis service of this file, got {mask_url(env.get('REDIS_URL', ''))!r}"))
    if not env.get("AGENTSEARCH_JWT_SECRET"):
        problems.append(Problem(file, where, "AGENTSEARCH_JWT_SECRET is required beside QDRANT_URL"))
    return problems


def _useful_errors(errors: list[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
    """Drop an "Unevaluated properties" error of an object that has a deeper error: once one of its
    properties fails, JSON Schema 2020-12 reports every property of it as unevaluated, which hides
    the real message."""
    paths = [tuple(map(str, error.absolute_path)) for error in errors]

    def shadowed(index: int) -> bool:
        own = paths[index]
        return errors[index].validator == "unevaluatedProperties" and any(
            len(other) > len(own) and other[: len(own)] == own for other in paths
        )

    kept = [error for index, error in enumerate(errors) if not shadowed(index)]
    return sorted(kept, key=lambda error: list(map(str, error.absolute_path)))


def _json_path(parts: Any) -> str:
    return ".".join(str(part) for part in parts)
