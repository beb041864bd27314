"""Service settings: the frozen ``Settings`` dataclass, each setting's environment variable, and the checks on the values.

Only the entry points (CLI, worker) read the environment and the YAML file
(``service.settings_loader.load_settings``); everything else receives ``Settings``. Every invalid
value raises ``SettingsError`` naming the setting and its env variable.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from service.errors import SettingsError
from service.redact import mask_url

LOCAL_PROVIDER = "local"
"""The provider id of the models that run in this process (``local/<model>``)."""
DEFAULT_MODEL = f"{LOCAL_PROVIDER}/all-MiniLM-L6-v2"
# The prefix of a cluster (``QDRANT_URL``) unless set; the embedded store derives its own from it.
DEFAULT_QUEUE_PREFIX = "agentsearch"


@dataclass(frozen=True)
class ProviderSettings:
    """An OpenAI-compatible embeddings provider (``provider_id/model_id`` names its models)."""

    id: str
    base_url: str
    api_key: str | None = None


@dataclass(frozen=True)
class Settings:
    """Everything the service and its workers are configured with. See README's settings table."""

    data_dir: Path = Path("data")
    host: str = "127.0.0.1"
    port: int = 8080
    redis_url: str = "redis://127.0.0.1:6379/0"
    queue_prefix: str = ""
    """Empty: derived per deployment at open (``service.engine.deployment.resolve_deployment``)."""
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_path: Path | None = None
    qdrant_shard_number: int = 2
    qdrant_replication_factor: int = 2
    qdrant_write_consistency_factor: int = 1
    jwt_secret: str | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_max_ttl_s: int = 30 * 24 * 3600
    embeddings_model: str | None = DEFAULT_MODEL
    embeddings_dimensions: int | None = None
    embeddings_timeout_s: float = 5.0
    embeddings_batch_size: int = 512
    query_cache_size: int = 2048
    embeddings_onnx: bool = True
    """Serve the local model through its checked ONNX export (torch until it is ready, and whenever it cannot serve)."""
    query_int8: bool = True
    """Encode the local model's queries through the export's checked int8 twin (documents stay fp32)."""
    model_artifact_dir: Path | None = None
    """Where model files derived at run time (the ONNX export) live; None: ``data_dir/models`` (``models_dir``)."""
    providers: tuple[ProviderSettings, ...] = ()
    allowed_roots: tuple[Path, ...] = ()
    single_tenant: bool | None = None
    max_workspaces_per_user: int = 100
    workspace_registrations_per_minute: int = 30
    skip_dirs: tuple[str, ...] = ()
    prewarm_embeddings: bool = False
    starter_data: bool = True
    """``agentsearch serve`` on the embedded default loads the starter data set on a new data directory
    (``service.starter``), and allows its demo workspace's base; never with ``QDRANT_URL`` or ``qdrant_path``."""
    index_dir: Path | None = None
    max_file_bytes: int = 1_000_000
    semantic_scope_limit: int = 800
    revalidate_interval_s: float = 10.0
    workspace_watch: bool = True
    """Watch open workspaces' roots and re-index changed files at once (off: revalidate by mtime on search)."""
    workspace_idle_close_s: float = 600.0
    """A workspace's chunk cache, trigram index and watcher close after this long without a search or index."""
    index_processes: int | None = None
    """Worker processes that chunk files while a large workspace build writes; None: as many as the CPUs (at most 4); 0: none."""
    request_deadline_s: float = 20.0
    client_max_size: int = 8 * 1024 * 1024
    rerank_enabled: bool = False
    rerank_url: str | None = None
    rerank_model_dir: Path | None = None
    rerank_budget_s: float = 4.0
    worker_in_process: bool | None = None
    job_timeout_s: float = 120.0
    worker_health_check_s: float = 30.0
    sweep_interval_s: int = 60
    rate_limits_enabled: bool = True
    search_analytics: bool = True
    """Record each search (surface, tenant, normalized query, result count, latency) in Redis for the dashboard's analytics page."""
    code_search_rate_limits: tuple[tuple[str, int, int], ...] = ()
    action_search_rate_limits: tuple[tuple[str, int, int], ...] = ()
    runtime_name: str = "kody"
    log_level: str = "INFO"
    node_id: str | None = None
    workspace_nodes: tuple[str, ...] = ()

    @property
    def store_kind(self) -> str:
        """``qdrant`` when a server URL is configured, ``qdrant-local`` for qdrant-client's local mode
        on ``qdrant_path``, else the embedded ``edge`` default."""
        if self.qdrant_url:
            return "qdrant"
        return "qdrant-local" if self.qdrant_path else "edge"

    @property
    def loads_starter_data(self) -> bool:
        """Whether ``agentsearch serve`` loads the starter data set: on, and on the embedded default only."""
        return self.starter_data and self.store_kind == "edge"

    @property
    def models_dir(self) -> Path:
        """The model-artifact directory: ``model_artifact_dir``, else ``data_dir/models``."""
        return self.model_artifact_dir or self.data_dir / "models"

    @property
    def is_single_tenant(self) -> bool:
        """Whether every caller may register under a plain allowed base (one team's deployment);
        unset is multi-tenant: plain bases are for admins, callers use ``{user}``/``{org}``/``{team}`` bases."""
        return bool(self.single_tenant)

    @property
    def runs_worker_in_process(self) -> bool:
        """The embedded stores run the arq worker inside the service (they admit one process)."""
        if self.worker_in_process is not None:
            return self.worker_in_process
        return self.store_kind != "qdrant"

    @property
    def node_name(self) -> str:
        """This node's name among ``workspace_nodes``: ``node_id``, else the host name (a pod's name)."""
        return self.node_id or socket.gethostname()

    @property
    def routes_workspace_jobs_to_nodes(self) -> bool:
        """With ``workspace_nodes`` set, workspace jobs go to the queue of the node holding the files."""
        return bool(self.workspace_nodes)

    @property
    def runs_node_worker_in_process(self) -> bool:
        """A workspace node's front end without the in-process workers still runs its node queue's
        worker itself: no other process may open the workspace caches (the trigram index admits one
        writer) beside it."""
        return not self.runs_worker_in_process and self.node_name in self.workspace_nodes

    def provider(self, provider_id: str) -> ProviderSettings | None:
        return next((p for p in self.providers if p.id == provider_id), None)

    def with_overrides(self, **overrides: Any) -> Settings:
        """A validated copy with some fields replaced (CLI flags)."""
        return validate(replace(self, **{k: v for k, v in overrides.items() if v is not None}))


# ---- environment -------------------------------------------------------------------------------

ENV_PREFIX = "AGENTSEARCH_"
# Settings whose env name is not AGENTSEARCH_<FIELD>: the conventional names of their ecosystems.
_ENV_NAMES = {"redis_url": "REDIS_URL", "qdrant_url": "QDRANT_URL", "qdrant_api_key": "QDRANT_API_KEY"}


def env_name(name: str) -> str:
    """The environment variable of setting ``name``."""
    return _ENV_NAMES.get(name, ENV_PREFIX + name.upper())


# ---- validation ----------------------------------------------------------------------------------


def validate_model_id(model: str, setting: str) -> None:
    provider, sep, model_id = model.partition("/")
    if not sep or not provider or not model_id:
        raise SettingsError(f"{setting}: {model!r} must have the form provider_id/model_id (e.g. {DEFAULT_MODEL})")


_NOT_IN_A_DIRECTORY_NAME = frozenset("/\\\0*?[]{}")


def is_directory_name(name: str) -> bool:
    """skip_dirs entries are exact directory names, not globs or relative paths."""
    return name not in {"", ".", ".."} and not _NOT_IN_A_DIRECTORY_NAME & set(name)


def validate(settings: Settings) -> Settings:
    """Refuse settings that cannot work, naming the setting; returns ``settings`` unchanged."""

    def fail(name: str, message: str) -> None:
        raise SettingsError(f"{name} ({env_name(name)}): {message}")

    if not 0 < settings.port < 65536:
        fail("port", f"{settings.port} is not a TCP port (1-65535)")
    if settings.prewarm_embeddings and not settings.embeddings_model:
        fail("prewarm_embeddings", "prewarm_embeddings requires embeddings_model to be set")
    for name in settings.skip_dirs:
        if not is_directory_name(name):
            fail("skip_dirs", f"{name!r} is not a directory name; entries are exact names like 'coverage', not globs or relative paths")
    if settings.embeddings_model:
        validate_model_id(settings.embeddings_model, f"embeddings_model ({env_name('embeddings_model')})")
        provider = settings.embeddings_model.split("/", 1)[0]
        if provider != LOCAL_PROVIDER and settings.provider(provider) is None:
            fail(
                "embeddings_model",
                f"provider {provider!r} is not configured; set {ENV_PREFIX}PROVIDER_{provider.upper()}_BASE_URL",
            )
    if settings.embeddings_dimensions is not None and not 1 <= settings.embeddings_dimensions <= 8192:
        fail("embeddings_dimensions", "must be between 1 and 8192")
    positive = {
        "embeddings_timeout_s": settings.embeddings_timeout_s,
        "embeddings_batch_size": settings.embeddings_batch_size,
        "query_cache_size": settings.query_cache_size,
        "max_file_bytes": settings.max_file_bytes,
        "semantic_scope_limit": settings.semantic_scope_limit,
        "request_deadline_s": settings.request_deadline_s,
        "client_max_size": settings.client_max_size,
        "rerank_budget_s": settings.rerank_budget_s,
        "job_timeout_s": settings.job_timeout_s,
        "jwt_max_ttl_s": settings.jwt_max_ttl_s,
        "worker_health_check_s": settings.worker_health_check_s,
        "sweep_interval_s": settings.sweep_interval_s,
        "qdrant_shard_number": settings.qdrant_shard_number,
        "qdrant_replication_factor": settings.qdrant_replication_factor,
        "qdrant_write_consistency_factor": settings.qdrant_write_consistency_factor,
        "max_workspaces_per_user": settings.max_workspaces_per_user,
        "workspace_registrations_per_minute": settings.workspace_registrations_per_minute,
        "workspace_idle_close_s": settings.workspace_idle_close_s,
    }
    for name, value in positive.items():
        if value <= 0:
            fail(name, f"must be greater than 0, got {value}")
    if settings.revalidate_interval_s < 0:
        fail("revalidate_interval_s", "must not be negative")
    if settings.index_processes is not None and not 0 <= settings.index_processes <= 64:
        fail("index_processes", f"must be between 0 and 64, got {settings.index_processes}")
    if not settings.redis_url.startswith(("redis://", "rediss://", "unix://")):
        fail("redis_url", f"{mask_url(settings.redis_url)!r} is not a redis:// URL")
    if settings.qdrant_url and not settings.qdrant_url.startswith(("http://", "https://")):
        fail("qdrant_url", f"{mask_url(settings.qdrant_url)!r} is not an http(s):// URL")
    if settings.qdrant_url and settings.qdrant_path:
        fail("qdrant_path", "set either QDRANT_URL (a server) or AGENTSEARCH_QDRANT_PATH (local mode), not both")
    if settings.qdrant_url and not settings.jwt_secret:
        fail("jwt_secret", "is required with QDRANT_URL: every front end must verify tokens with the same secret")
    if settings.rerank_enabled and not (settings.rerank_url or settings.rerank_model_dir):
        fail("rerank_enabled", "needs rerank_url or rerank_model_dir")
    if settings.rerank_model_dir is not None and not settings.rerank_model_dir.is_dir():
        fail("rerank_model_dir", f"{settings.rerank_model_dir} is not a directory")
    if not re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]{0,63}", settings.runtime_name):
        fail("runtime_name", f"{settings.runtime_name!r} must be a JavaScript identifier (letters, digits, '_' or '$', 1-64)")
    if settings.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        fail("log_level", "must be DEBUG, INFO, WARNING or ERROR")
    if settings.node_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,126}", settings.node_id):
        fail("node_id", f"{settings.node_id!r} must be 1-127 letters, digits, '.', '_' or '-'")
    for node in settings.workspace_nodes:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,126}", node):
            fail("workspace_nodes", f"{node!r} must be 1-127 letters, digits, '.', '_' or '-'")
    if settings.node_id is not None and settings.node_id not in settings.workspace_nodes:
        # A node id names a workspace node: one outside the list would hold workspaces whose jobs
        # go to other queues (or, with no list, to the shared fast queue, where no node takes them).
        listed = ",".join(settings.workspace_nodes) or "unset"
        fail(
            "node_id",
            f"{settings.node_id!r} is not among workspace_nodes ({env_name('workspace_nodes')}: {listed}); "
            "list it there, or unset the node id on a process that holds no workspaces",
        )
    for root in settings.allowed_roots:
        problem = allowed_root_problem(root)
        if problem:
            fail("allowed_roots", problem)
    return settings


# A path segment of an allowed base that names its owner, expanded per caller (service.code.roots).
ROOT_PLACEHOLDERS = ("{user}", "{org}", "{team}")


def allowed_root_problem(base: Path) -> str | None:
    """Why an allowed base cannot work (None: it can). A placeholder is a whole path segment, a
    ``{team}`` base names its ``{org}`` first (a team belongs to its org), and the part before the
    first placeholder must be an existing directory."""
    parts = base.parts
    templated = [i for i, part in enumerate(parts) if "{" in part or "}" in part]
    for i in templated:
        if parts[i] not in ROOT_PLACEHOLDERS:
            return f"{base}: {parts[i]!r} is not a placeholder; a segment is exactly one of {', '.join(ROOT_PLACEHOLDERS)}"
    names = [parts[i] for i in templated]
    if len(set(names)) != len(names):
        return f"{base}: a placeholder appears twice"
    if "{team}" in names and ("{org}" not in names or names.index("{org}") > names.index("{team}")):
        return f"{base}: a {{team}} base must name {{org}} before it (a team belongs to its org), e.g. /srv/ws/{{org}}/{{team}}"
    static = Path(*parts[: templated[0]]) if templated else base
    if not static.is_dir():
        return f"{static} is not a directory"
    return None

