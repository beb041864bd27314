"""Loading ``Settings``: the YAML file (``AGENTSEARCH_CONFIG``), the environment, and the parser of each setting's text.

Precedence: explicit overrides (CLI flags) > environment > YAML file > defaults. A value that does
not parse raises ``SettingsError`` naming the setting and where it came from; the loaded settings
then pass ``service.settings.validate``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from service.errors import SettingsError
from service.settings import ENV_PREFIX, ProviderSettings, Settings, env_name, validate


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _parse_optional_bool(text: str) -> bool | None:
    return None if text.strip().lower() in {"", "auto"} else _parse_bool(text)


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.replace(os.pathsep, ",").split(",") if item.strip())


_PLANS = ("free", "standard", "pro", "max")


def _parse_plan_rate_limits(text: str) -> tuple[tuple[str, int, int], ...]:
    """``free=80/1000,pro=200/10000``: searches per minute / per day of each plan named (the plans
    not named keep catalog search's ceilings), as (plan, per minute, per day) in plan order."""
    rows: dict[str, tuple[int, int]] = {}
    for item in _parse_list(text):
        plan, equals, numbers = (part.strip() for part in item.partition("="))
        per_minute, slash, per_day = numbers.partition("/")
        if (
            plan not in _PLANS
            or not equals
            or not slash
            or not per_minute.strip().isdigit()
            or not per_day.strip().isdigit()
        ):
            raise ValueError(
                f"{item!r} is not plan=per_minute/per_day with plan one of {', '.join(_PLANS)} (e.g. free=80/1000)"
            )
        if plan in rows:
            raise ValueError(f"plan {plan} is named twice")
        if int(per_minute) < 1 or int(per_day) < 1:
            raise ValueError(f"{item!r}: each ceiling must be at least 1")
        rows[plan] = (int(per_minute), int(per_day))
    return tuple((plan, *rows[plan]) for plan in _PLANS if plan in rows)


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda text: None if text.strip().lower() in {"", "none", "off"} else parse(text)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "data_dir": Path,
    "port": int,
    "qdrant_url": _optional(str),
    "qdrant_api_key": _optional(str),
    "qdrant_path": _optional(Path),
    "qdrant_shard_number": int,
    "qdrant_replication_factor": int,
    "qdrant_write_consistency_factor": int,
    "jwt_secret": _optional(str),
    "jwt_audience": _optional(str),
    "jwt_issuer": _optional(str),
    "jwt_max_ttl_s": int,
    "embeddings_model": _optional(str),
    "embeddings_dimensions": _optional(int),
    "embeddings_timeout_s": float,
    "embeddings_batch_size": int,
    "query_cache_size": int,
    "embeddings_onnx": _parse_bool,
    "query_int8": _parse_bool,
    "model_artifact_dir": _optional(lambda text: Path(text).expanduser()),
    "allowed_roots": lambda text: tuple(Path(p) for p in _parse_list(text)),
    "single_tenant": _parse_optional_bool,
    "max_workspaces_per_user": int,
    "workspace_registrations_per_minute": int,
    "skip_dirs": _parse_list,
    "prewarm_embeddings": _parse_bool,
    "starter_data": _parse_bool,
    "index_dir": _optional(lambda text: Path(text).expanduser()),
    "max_file_bytes": int,
    "semantic_scope_limit": int,
    "revalidate_interval_s": float,
    "workspace_watch": _parse_bool,
    "workspace_idle_close_s": float,
    "index_processes": _optional(int),
    "request_deadline_s": float,
    "client_max_size": int,
    "rerank_enabled": _parse_bool,
    "rerank_url": _optional(str),
    "rerank_model_dir": _optional(Path),
    "rerank_budget_s": float,
    "worker_in_process": _parse_optional_bool,
    "job_timeout_s": float,
    "worker_health_check_s": float,
    "sweep_interval_s": int,
    "rate_limits_enabled": _parse_bool,
    "search_analytics": _parse_bool,
    "code_search_rate_limits": _parse_plan_rate_limits,
    "action_search_rate_limits": _parse_plan_rate_limits,
    "node_id": _optional(str),
    "workspace_nodes": _parse_list,
}


def _providers_from_env(environ: Mapping[str, str]) -> tuple[ProviderSettings, ...]:
    """``AGENTSEARCH_PROVIDER_<ID>_BASE_URL`` (and ``_API_KEY``) define OpenAI-compatible providers."""
    providers = []
    for key, value in environ.items():
        if key.startswith(ENV_PREFIX + "PROVIDER_") and key.endswith("_BASE_URL"):
            provider_id = key[len(ENV_PREFIX + "PROVIDER_") : -len("_BASE_URL")].lower()
            api_key = environ.get(f"{ENV_PREFIX}PROVIDER_{provider_id.upper()}_API_KEY")
            providers.append(ProviderSettings(id=provider_id, base_url=value, api_key=api_key))
    return tuple(providers)


def _providers_from_yaml(raw: Any) -> tuple[ProviderSettings, ...]:
    if not isinstance(raw, list):
        raise SettingsError("providers (YAML): expected a list of {id, base_url, api_key}")
    providers = []
    for item in raw:
        if not isinstance(item, dict) or not item.get("id") or not item.get("base_url"):
            raise SettingsError("providers (YAML): each provider needs an id and a base_url")
        providers.append(
            ProviderSettings(id=str(item["id"]), base_url=str(item["base_url"]), api_key=item.get("api_key"))
        )
    return tuple(providers)


def _coerce(name: str, value: Any, source: str) -> Any:
    parse = _PARSERS.get(name, str)
    try:
        return parse(value if isinstance(value, str) else _yaml_scalar(value))
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{name} ({source}): {exc}") from None


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the YAML file named by ``AGENTSEARCH_CONFIG``, the environment and ``overrides``."""
    environ = os.environ if environ is None else environ
    known = {f.name for f in fields(Settings)}
    values: dict[str, Any] = {}
    config_path = environ.get(ENV_PREFIX + "CONFIG")
    if config_path:
        values.update(_load_yaml(Path(config_path), known))
    for name in known - {"providers"}:
        if env_name(name) in environ:
            values[name] = _coerce(name, environ[env_name(name)], env_name(name))
    env_providers = _providers_from_env(environ)
    if env_providers:
        values["providers"] = tuple(values.get("providers", ())) + env_providers
    values.update({k: v for k, v in overrides.items() if v is not None})
    return validate(Settings(**values))


def _load_yaml(path: Path, known: set[str]) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"AGENTSEARCH_CONFIG: cannot read {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"AGENTSEARCH_CONFIG: {path} must hold a mapping of settings")
    raw = dict(raw)
    search = raw.pop("search", None)  # a `search:` block of settings is read as if its keys were at the top level
    if isinstance(search, dict):
        raw.update(search)
    unknown = sorted(set(raw) - known - {"version"})
    if unknown:
        raise SettingsError(f"AGENTSEARCH_CONFIG: unknown settings {', '.join(unknown)} in {path}")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if name == "providers":
            values[name] = _providers_from_yaml(value)
        elif name in known:
            values[name] = _coerce(name, value, f"{path}")
    return values


__all__ = ["load_settings"]
