"""The one-shot CLI commands as subprocesses: ``index PATH`` (progress bar on a terminal) and
``search PATH QUERY`` (colored ``path:line:snippet`` on a terminal, plain when piped, ``--json``),
on an embedded engine in a data directory, without a server."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import uuid
from pathlib import Path

import pytest

from tests.code.trees import write_tree
from tests.helpers import REDIS_URL, free_port

ROOT = Path(__file__).resolve().parents[2]
ANSI = "\x1b["


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        REDIS_URL=REDIS_URL,
        AGENTSEARCH_QUEUE_PREFIX=f"agentsearch-test-cli-{uuid.uuid4().hex[:8]}",
        # Lexical only: these tests are about the commands, and loading the model costs seconds a process.
        AGENTSEARCH_EMBEDDINGS_MODEL="none",
        # The one-shot commands' default data directory lives in the test's own cache, and no service
        # answers where `search` looks first (a port nothing listens on).
        XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache")),
        AGENTSEARCH_URL=f"http://127.0.0.1:{free_port()}",
    )
    for name in ("AGENTSEARCH_CONFIG", "AGENTSEARCH_TOKEN", "AGENTSEARCH_JWT_SECRET", "AGENTSEARCH_DATA_DIR"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """A tree indexed once by ``index`` through a pipe: (tree, data dir, the index run)."""
    base = tmp_path_factory.mktemp("cli")
    tree = write_tree(base / "repo")
    data = base / "data"
    result = cli("index", str(tree), "--data-dir", str(data), env=cli_env)
    return tree, data, result


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)


def cli_on_terminal(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal (80x24); returns (exit status, what it showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "service", *args], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env={**env, "TERM": "xterm"}, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return process.wait(timeout=180), b"".join(chunks).decode("utf-8", "replace")


def test_index_through_a_pipe_prints_a_summary_and_no_progress_bar(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    tree, data, result = indexed
    assert result.returncode == 0, result.stderr
    assert f"indexed {tree}: 9 files" in result.stdout and "skipped: binary 1" in result.stdout
    assert "%|" not in result.stderr, "no progress bar when stderr is not a terminal"
    assert (data / "workspaces").is_dir() and (data / "index").is_dir(), "the engine's data directory was used"


def test_index_dot_never_indexes_its_own_data_directory(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """``agentsearch index .`` in a project whose ``./data`` holds the dev JWT secret (the service's
    default data directory): the one-shot commands keep their data in the user's cache, and the walk
    skips ``./data``, so no search finds the secret."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text("def handler():\n    return 'ok'\n")

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True, env=cli_env, cwd=project, timeout=180)

    assert here("token", "--sub", "dev", "--new-secret").returncode == 0  # writes ./data/jwt-secret
    secret = (project / "data" / "jwt-secret").read_text().strip()
    indexed = here("index", ".", "--json")
    assert indexed.returncode == 0, indexed.stderr
    assert json.loads(indexed.stdout)["files"] == 1, "app.py alone: nothing under ./data"
    assert sorted(p.name for p in project.iterdir()) == ["app.py", "data"], "no data directory made in the tree"
    assert (Path(cli_env["XDG_CACHE_HOME"]) / "agentsearch" / "index").is_dir(), "the index lives in the user's cache"
    found = here("search", ".", "--mode", "lexical", "--json", "--", "jwt")
    assert found.returncode == 1 and json.loads(found.stdout)["results"] == [], found.stdout
    # The secret's words may meet app.py's ("Ok", "def": one random secret in a hundred does): the
    # secret itself, and any file under ./data, are what must never be found.
    found = here("search", ".", "--mode", "lexical", "--json", "--", secret)  # "--": a secret may start with "-"
    assert secret not in found.stdout and all(r["path"] == "app.py" for r in json.loads(found.stdout)["results"]), found.stdout
    refused = here("index", "./data")
    assert refused.returncode == 2 and "never searchable" in refused.stderr, refused.stderr


def test_search_piped_is_plain_path_line_snippet(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]], cli_env: dict[str, str]) -> None:
    tree, data, _ = indexed
    result = cli("search", str(tree), "hash_password", "--mode", "lexical", "--data-dir", str(data), env=cli_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "src/pkg/auth.py:6:def hash_password(password: str, salt: str) -> str:"
    assert ANSI not in result.stdout


def test_hybrid_without_a_model_says_so_and_answers_lexically(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]], cli_env: dict[str, str]) -> None:
    tree, data, _ = indexed
    result = cli("search", str(tree), "refund_payment", "--data-dir", str(data), env=cli_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("src/pkg/billing.py:10:def refund_payment")
    assert result.stdout.splitlines()[-1] == "notice: embeddings are not configured; lexical results only"


def test_search_json_answers_the_whole_result(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]], cli_env: dict[str, str]) -> None:
    tree, data, _ = indexed
    result = cli("search", str(tree), r"def \w+_session", "--regex", "--json", "--data-dir", str(data), env=cli_env)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert [(r["path"], r["line"]) for r in answer["results"]] == [("src/pkg/auth.py", 17), ("src/pkg/auth.py", 22)]
    assert answer["meta"]["mode"] == "lexical" and set(answer) == {"output", "results", "notices", "meta"}


def test_every_command_that_prints_a_result_speaks_json(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]], cli_env: dict[str, str]) -> None:
    tree, data, _ = indexed
    index = cli("index", str(tree), "--json", "--data-dir", str(data), env=cli_env)
    assert index.returncode == 0, index.stderr
    state = json.loads(index.stdout)
    assert state["root"] == str(tree) and state["files"] == 9 and state["chunks"] > 0
    token = cli("token", "--sub", "alice", "--org", "acme", "--plan", "pro", "--json", "--data-dir", str(data), env=cli_env)
    assert token.returncode == 0, token.stderr
    minted = json.loads(token.stdout)
    assert minted["claims"]["sub"] == "alice" and minted["claims"]["plan"] == "pro" and minted["token"].count(".") == 2
    reindex = cli("reindex", "--json", "--data-dir", str(data), env=cli_env)
    assert reindex.returncode == 0, reindex.stderr
    report = json.loads(reindex.stdout)
    assert report["by_collection"]["code"]["records"] == 0 and report["repaired"] == 0, "a cold workspace's chunks have no points to re-embed"
    assert report["serving_model"] is None and report["switched"] is False


def test_exit_status_like_grep(indexed: tuple[Path, Path, subprocess.CompletedProcess[str]], cli_env: dict[str, str]) -> None:
    tree, data, _ = indexed
    nothing = cli("search", str(tree), "zzqqxx_nowhere", "--mode", "lexical", "--data-dir", str(data), env=cli_env)
    assert nothing.returncode == 1 and nothing.stdout.strip() == "no matches"
    broken = cli("search", str(tree), "def (", "--regex", "--data-dir", str(data), env=cli_env)
    assert broken.returncode == 2 and "invalid regex at position 4" in broken.stderr
    escape = cli("search", str(tree), "x", "--scope", "../..", "--data-dir", str(data), env=cli_env)
    assert escape.returncode == 2 and "leaves the workspace" in escape.stderr


def test_on_a_terminal_output_is_colored_and_indexing_shows_progress(tmp_path: Path, cli_env: dict[str, str]) -> None:
    tree = write_tree(tmp_path / "repo")
    data = tmp_path / "data"
    status, shown = cli_on_terminal("index", str(tree), "--data-dir", str(data), env=cli_env)
    assert status == 0, shown
    assert "indexing: 100%|" in shown and "9/9" in shown, shown
    status, shown = cli_on_terminal("search", str(tree), "hash_password", "--mode", "lexical", "--data-dir", str(data), env=cli_env)
    assert status == 0, shown
    assert "\x1b[35msrc/pkg/auth.py\x1b[0m" in shown and "\x1b[1;31mhash_password\x1b[0m" in shown
    assert "indexing" not in shown, "an unchanged workspace is searched without a progress bar"
    (tree / "src" / "pkg" / "extra.py").write_text("def hash_password_again() -> None:\n    pass\n")
    status, shown = cli_on_terminal("search", str(tree), "hash_password_again", "--mode", "lexical", "--data-dir", str(data), env=cli_env)
    assert status == 0, shown
    assert "indexing: 100%|" in shown and "\x1b[35msrc/pkg/extra.py\x1b[0m" in shown, shown


def test_a_large_index_chunks_in_worker_processes_started_from_the_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """``python -m service index`` on a tree large enough for the chunking pool: the spawned worker
    starts from the command (it imports the service's modules, not the command's arguments) and
    chunks; a worker that cannot start or dies leaves a warning on stderr and the build to one
    process."""
    tree = tmp_path / "many"
    files = 450
    for i in range(files):
        (tree / f"pkg{i % 9}").mkdir(parents=True, exist_ok=True)
        (tree / f"pkg{i % 9}" / f"mod_{i}.py").write_text(f"def handler_{i}(event):\n    return event['id'] + {i}\n")
    result = cli("index", str(tree), "--data-dir", str(tmp_path / "data"), env={**cli_env, "AGENTSEARCH_INDEX_PROCESSES": "1"})
    assert result.returncode == 0, result.stderr
    assert f"indexed {tree}: {files} files" in result.stdout
    assert "chunking worker died" not in result.stderr and "no worker pool" not in result.stderr, result.stderr
