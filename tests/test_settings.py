"""Settings: environment and YAML parsing, and validation messages that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.errors import SettingsError
from service.settings import DEFAULT_MODEL, Settings
from service.settings_loader import load_settings


def test_defaults_are_the_embedded_default() -> None:
    settings = load_settings({})
    assert settings.store_kind == "edge"
    assert settings.runs_worker_in_process
    assert settings.embeddings_model == DEFAULT_MODEL
    assert settings.data_dir == Path("data")


def test_environment_overrides(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "AGENTSEARCH_DATA_DIR": str(tmp_path),
            "AGENTSEARCH_PORT": "9001",
            "AGENTSEARCH_SKIP_DIRS": "coverage,.next",
            "AGENTSEARCH_EMBEDDINGS_MODEL": "none",
            "REDIS_URL": "redis://127.0.0.1:6379/3",
        }
    )
    assert settings.data_dir == tmp_path
    assert settings.port == 9001
    assert settings.skip_dirs == ("coverage", ".next")
    assert settings.embeddings_model is None
    assert settings.redis_url.endswith("/3")


def test_prewarm_without_model_is_refused_with_the_reason() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"AGENTSEARCH_EMBEDDINGS_MODEL": "", "AGENTSEARCH_PREWARM_EMBEDDINGS": "true"})
    assert "prewarm_embeddings requires embeddings_model" in str(info.value)
    assert "AGENTSEARCH_PREWARM_EMBEDDINGS" in str(info.value)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AGENTSEARCH_PORT": "http"}, "AGENTSEARCH_PORT"),
        ({"AGENTSEARCH_PORT": "70000"}, "AGENTSEARCH_PORT"),
        ({"AGENTSEARCH_EMBEDDINGS_MODEL": "minilm"}, "embeddings_model"),
        ({"AGENTSEARCH_EMBEDDINGS_MODEL": "openai/text-embedding-3-small"}, "AGENTSEARCH_PROVIDER_OPENAI_BASE_URL"),
        ({"REDIS_URL": "localhost:6379"}, "REDIS_URL"),
        ({"QDRANT_URL": "http://q:6333"}, "AGENTSEARCH_JWT_SECRET"),
        ({"AGENTSEARCH_REQUEST_DEADLINE_S": "0"}, "AGENTSEARCH_REQUEST_DEADLINE_S"),
        ({"AGENTSEARCH_RERANK_ENABLED": "maybe"}, "AGENTSEARCH_RERANK_ENABLED"),
        ({"AGENTSEARCH_ALLOWED_ROOTS": "/definitely/not/here"}, "allowed_roots"),
        ({"AGENTSEARCH_ALLOWED_ROOTS": "/tmp/{usr}"}, "is not a placeholder"),
        ({"AGENTSEARCH_ALLOWED_ROOTS": "/tmp/u-{user}"}, "is not a placeholder"),
        ({"AGENTSEARCH_ALLOWED_ROOTS": "/tmp/{team}"}, "must name {org} before it"),
        ({"AGENTSEARCH_ALLOWED_ROOTS": "/definitely/not/here/{user}"}, "/definitely/not/here is not a directory"),
        ({"AGENTSEARCH_SINGLE_TENANT": "maybe"}, "AGENTSEARCH_SINGLE_TENANT"),
        ({"AGENTSEARCH_MAX_WORKSPACES_PER_USER": "0"}, "AGENTSEARCH_MAX_WORKSPACES_PER_USER"),
    ],
)
def test_bad_settings_fail_naming_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert named in str(info.value)


def test_templated_bases_and_the_tenancy_mode(tmp_path: Path) -> None:
    settings = load_settings({"AGENTSEARCH_ALLOWED_ROOTS": f"{tmp_path}/{{user}},{tmp_path}/{{org}}/{{team}}"})
    assert settings.allowed_roots == (tmp_path / "{user}", tmp_path / "{org}" / "{team}")
    assert settings.single_tenant is None and settings.is_single_tenant is False, "multi-tenant unless declared"
    assert load_settings({"AGENTSEARCH_SINGLE_TENANT": "true"}).is_single_tenant is True


def test_serve_allow_root_on_the_embedded_default_is_one_developers_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import _settings, build_parser

    args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path / "data"), "--allow-root", str(tmp_path)])
    assert _settings(args).is_single_tenant is True
    monkeypatch.setenv("AGENTSEARCH_SINGLE_TENANT", "false")
    assert _settings(args).is_single_tenant is False, "an explicit setting wins"
    monkeypatch.delenv("AGENTSEARCH_SINGLE_TENANT")
    without = build_parser().parse_args(["serve", "--data-dir", str(tmp_path / "data")])
    assert _settings(without).is_single_tenant is False


def test_openai_compatible_provider_from_environment() -> None:
    settings = load_settings(
        {
            "AGENTSEARCH_EMBEDDINGS_MODEL": "openai/text-embedding-3-small",
            "AGENTSEARCH_PROVIDER_OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "AGENTSEARCH_PROVIDER_OPENAI_API_KEY": "k",
        }
    )
    provider = settings.provider("openai")
    assert provider is not None and provider.base_url == "http://127.0.0.1:9/v1" and provider.api_key == "k"


def test_yaml_file_accepts_a_search_block(tmp_path: Path) -> None:
    config = tmp_path / "agentsearch.yaml"
    config.write_text(
        "version: 1\n"
        "providers:\n  - id: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "search:\n  skip_dirs: [coverage, dist]\n  embeddings_model: openai/text-embedding-3-small\n"
        "  embeddings_dimensions: 1536\n  prewarm_embeddings: true\n"
    )
    settings = load_settings({"AGENTSEARCH_CONFIG": str(config)})
    assert settings.skip_dirs == ("coverage", "dist")
    assert settings.embeddings_dimensions == 1536
    assert settings.prewarm_embeddings is True


def test_yaml_unknown_setting_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agentsearch.yaml"
    config.write_text("prot: 1\n")
    with pytest.raises(SettingsError, match="unknown settings prot"):
        load_settings({"AGENTSEARCH_CONFIG": str(config)})


def test_environment_beats_yaml(tmp_path: Path) -> None:
    config = tmp_path / "agentsearch.yaml"
    config.write_text("port: 9100\n")
    assert load_settings({"AGENTSEARCH_CONFIG": str(config), "AGENTSEARCH_PORT": "9200"}).port == 9200


def test_settings_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Settings().port = 1  # type: ignore[misc]
