"""What the deploy checks share: the ``Problem`` they report, YAML loading, and the check of an
agentsearch process's environment against the service's own settings code.

The environment check is the strongest one here: it runs ``service.settings_loader.load_settings`` on the
variables a compose service or a Kubernetes container would get, so a value the service would
refuse at start (``AGENTSEARCH_QDRANT_SHARD_NUMBER: "six"``, a ``QDRANT_URL`` without a scheme, no
JWT secret beside ``QDRANT_URL``) fails here, and so does a misspelt ``AGENTSEARCH_*`` name, which
the service itself would silently ignore.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from service.errors import SettingsError
from service.settings import ENV_PREFIX, Settings, env_name
from service.settings_loader import load_settings

REPO_ROOT = Path(__file__).resolve().parents[1]

# Settings that name paths on the target machine: they cannot exist here, so they are not
# validated (the service checks them at start there).
_TARGET_PATH_VARIABLES = frozenset({env_name("allowed_roots"), env_name("rerank_model_dir"), ENV_PREFIX + "CONFIG"})
_PROVIDER_VARIABLE = re.compile(rf"^{ENV_PREFIX}PROVIDER_[A-Z0-9_]+_(BASE_URL|API_KEY)$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a deploy file: where it is and what to fix."""

    file: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}" if self.where else f"{self.file}: {self.message}"


def display_path(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (shorter messages)."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def load_yaml_documents(path: Path) -> tuple[list[Any], Problem | None]:
    """Every YAML document of ``path`` (empty ones dropped), or the parse error as a Problem."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except (OSError, yaml.YAMLError) as exc:
        return [], Problem(display_path(path), "", f"cannot parse YAML: {exc}")
    return documents, None


def known_variables() -> frozenset[str]:
    """Every environment variable the service reads a setting from."""
    return frozenset(env_name(field.name) for field in fields(Settings) if field.name != "providers")


def check_agentsearch_env(env: Mapping[str, str], file: str, where: str) -> list[Problem]:
    """Problems with the environment of one agentsearch process (see the module docstring)."""
    problems: list[Problem] = []
    known = known_variables()
    for name in sorted(env):
        if name.startswith(ENV_PREFIX) and name not in known | _TARGET_PATH_VARIABLES and not _PROVIDER_VARIABLE.match(name):
            problems.append(Problem(file, where, f"{name} is not a setting of agentsearch (README's settings table)"))
    checked = {name: value for name, value in env.items() if name not in _TARGET_PATH_VARIABLES}
    try:
        load_settings(environ=checked)
    except SettingsError as exc:
        problems.append(Problem(file, where, f"agentsearch would refuse these settings: {exc}"))
    return problems


def walk_strings(value: Any, transform: Any) -> Any:
    """A copy of a YAML tree with ``transform`` applied to every string value (keys untouched)."""
    if isinstance(value, str):
        return transform(value)
    if isinstance(value, list):
        return [walk_strings(item, transform) for item in value]
    if isinstance(value, dict):
        return {key: walk_strings(item, transform) for key, item in value.items()}
    return value


def iter_mapping(value: Any) -> Iterator[tuple[str, Any]]:
    """Items of a mapping, or nothing when ``value`` is not one (a malformed file)."""
    if isinstance(value, dict):
        yield from ((str(key), item) for key, item in value.items())
