"""Code search facts no other test pinned: its numbers (800 chunks, 10 s, 40-line windows), the scope
limit's boundary ("at most 800"), the model default dimensions when ``embeddings_dimensions`` is
omitted, ``index_dir`` as the cache location, and the service-wide ``skip_dirs`` and
``prewarm_embeddings`` as every workspace's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from service.code.chunker import chunk_file
from service.code.languages import ChunkKind
from service.code.semantic import SCOPE_TOO_LARGE
from service.errors import SettingsError
from service.settings import ProviderSettings, Settings
from service.settings_loader import load_settings
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_embedded, wait_indexed
from tests.code.trees import AUTH_PY, write_tree
from tests.embedding_server import CALLS
from tests.helpers import running_app


def test_documented_numbers_are_the_defaults(settings: Settings) -> None:
    assert settings.semantic_scope_limit == 800
    assert settings.revalidate_interval_s == 10.0
    assert SCOPE_TOO_LARGE == "semantic search scope is too large; narrow path or glob"


def test_a_file_without_boundaries_is_cut_into_40_line_windows() -> None:
    text = "\n".join(f"entry {i} = value {i}" for i in range(1, 101)) + "\n"
    chunks = chunk_file("settings.conf", text)
    assert [(c.kind, c.start_line, c.end_line) for c in chunks] == [
        (ChunkKind.WINDOW, 1, 40),
        (ChunkKind.WINDOW, 41, 80),
        (ChunkKind.WINDOW, 81, 100),
    ]


async def test_the_scope_limit_is_at_most_that_many_chunks(settings: Settings, embedding_endpoint: TestServer) -> None:
    tree = write_tree(settings.allowed_roots[0] / "repo")
    limit = len(chunk_file("src/pkg/auth.py", AUTH_PY))  # src/pkg holds more: auth.py and billing.py
    provider = ProviderSettings(id="acme", base_url=str(embedding_endpoint.make_url("/v1")))
    app_settings = variant(settings, "limit", embeddings_model=None, providers=(provider,), semantic_scope_limit=limit, revalidate_interval_s=0.0)
    async with running_app(app_settings) as client:
        workspace = await register(client, tree, embeddings_model="acme/code-embed")
        wid = workspace["id"]
        await wait_indexed(client, wid)
        over = await search(client, wid, query="refund the payment", path="src/pkg")
        assert over["meta"]["scope"]["chunks"] > limit
        assert over["meta"]["mode"] == "lexical" and over["meta"]["fallback"] == "scope_too_large"
        assert over["notices"][0] == SCOPE_TOO_LARGE and f"notice: {SCOPE_TOO_LARGE}" in over["output"].splitlines()
        exactly = await search(client, wid, query="hash a password with a salt", path="src/pkg/auth.py")
        assert exactly["meta"]["scope"]["chunks"] == limit
        assert exactly["meta"]["mode"] == "hybrid" and exactly["meta"]["fallback"] is None, exactly["notices"]
        first = exactly["results"][0]
        assert exactly["output"].splitlines()[0] == f"{first['path']}:{first['line']}:{first['snippet']}", "path:line:snippet, the source in results"
        # embeddings_dimensions omitted: the endpoint is never asked for a size, so the model's default applies.
        calls = embedding_endpoint.app[CALLS]
        assert calls and all("dimensions" not in call for call in calls)
        assert (await status(client, wid))["search"]["embeddings_dimensions"] is None


async def test_index_dir_holds_the_cache(settings: Settings) -> None:
    base = settings.allowed_roots[0]
    service_dir = base / "service-cache"
    app_settings = variant(settings, "index-dir", embeddings_model=None, revalidate_interval_s=0.0, index_dir=service_dir)
    own_dir = app_settings.data_dir / "search-cache"  # a workspace's own index_dir lies under the data directory or index_dir
    async with running_app(app_settings) as client:
        own = await register(client, write_tree(base / "own"), index_dir=str(own_dir))
        default = await register(client, write_tree(base / "default"))
        assert own["search"]["index_dir"] == str(own_dir) and default["search"]["index_dir"] is None
        for workspace, cache_root in ((own, own_dir), (default, service_dir)):
            wid = workspace["id"]
            await wait_indexed(client, wid)
            found = await search(client, wid, query="hash_password", mode="lexical")
            assert found["results"][0]["path"] == "src/pkg/auth.py"
            regex = await search(client, wid, query=r"def \w+_session\(", regex=True)
            assert [r["line"] for r in regex["results"]] == [17, 22]
            assert (cache_root / wid / "chunks.sqlite").is_file() and (cache_root / wid / "trigram").is_dir()
            held = sorted(p.name for p in (app_settings.data_dir / "workspaces" / wid).iterdir())
            assert held == ["workspace.json"], "the chunk cache and trigram index live under index_dir, not the data directory"
        assert not (service_dir / own["id"]).exists(), "a workspace's own index_dir wins over the service's"


def test_the_complete_config_example_sets_the_service_index_dir(tmp_path: Path) -> None:
    config = tmp_path / "agentsearch.yaml"
    config.write_text(
        "version: 1\n"
        "providers:\n  - id: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "search:\n  index_dir: ~/.local/state/kodacode/search\n  skip_dirs:\n    - coverage\n    - dist\n    - .next\n"
        "  embeddings_model: openai/text-embedding-3-small\n  embeddings_dimensions: 1536\n  prewarm_embeddings: true\n"
    )
    settings = load_settings({"AGENTSEARCH_CONFIG": str(config)})
    assert settings.index_dir == Path.home() / ".local/state/kodacode/search"
    assert settings.skip_dirs == ("coverage", "dist", ".next") and settings.prewarm_embeddings is True


def test_service_skip_dirs_must_be_directory_names() -> None:
    for bad in ("src/pkg", "*.tmp", ".."):
        with pytest.raises(SettingsError) as info:
            load_settings({"AGENTSEARCH_EMBEDDINGS_MODEL": "none", "AGENTSEARCH_SKIP_DIRS": f"coverage,{bad}"})
        assert "AGENTSEARCH_SKIP_DIRS" in str(info.value) and "not a directory name" in str(info.value), bad


async def test_service_skip_dirs_and_prewarm_apply_to_every_workspace(settings: Settings, embedding_endpoint: TestServer) -> None:
    """The service's own skip_dirs and prewarm_embeddings are the defaults of every workspace (README)."""
    base = settings.allowed_roots[0]
    provider = ProviderSettings(id="acme", base_url=str(embedding_endpoint.make_url("/v1")))
    app_settings = variant(
        settings, "defaults", embeddings_model="acme/code-embed", providers=(provider,), skip_dirs=("docs",), prewarm_embeddings=True, revalidate_interval_s=0.0
    )
    async with running_app(app_settings) as client:
        plain = await register(client, write_tree(base / "plain"))
        assert plain["search"]["prewarm_embeddings"] is True and plain["search"]["skip_dirs"] == []
        warmed = await wait_embedded(client, plain["id"])
        assert warmed["warm"] is True and warmed["embedded"] == warmed["chunks"] > 0
        # 9 searchable files in the tree; docs/guide.md goes with the service's skip_dirs.
        assert warmed["files"] == 8 and warmed["skipped"]["pruned_dirs"] == 4
        found = await search(client, plain["id"], query="create a session for a user", mode="lexical")
        assert found["results"] and not any(r["path"].startswith("docs/") for r in found["results"])

        own = await register(client, write_tree(base / "own"), skip_dirs=["coverage"], prewarm_embeddings=False)
        assert own["search"]["prewarm_embeddings"] is False
        state = await wait_indexed(client, own["id"])
        assert state["files"] == 7 and state["skipped"]["pruned_dirs"] == 5, "the service's and the workspace's skip_dirs both apply"
        assert state["embedded"] == 0 and state["warm"] is False, "an explicit prewarm_embeddings: false wins"
