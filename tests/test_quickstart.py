"""README's quickstart runs as written: its blocks, verbatim as bash, against `agentsearch serve` on a
new data directory with the starter data on, and the start log's lines say where to look and what to try."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from service.starter.banner import FIRST_QUERY
from tests.callers import TEST_SECRET, token_for
from tests.helpers import ROOT, serving, wait_until

QUICKSTART = "### Quickstart"


def quickstart_blocks() -> list[str]:
    """The ``sh`` blocks of README's quickstart section, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split(QUICKSTART, 1)[1]
    section = re.split(r"\n#{1,3} ", section, maxsplit=1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)


def answers(output: str) -> list[Any]:
    """Every JSON document a block printed (curl prints them back to back)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while True:
        while at < len(output) and output[at].isspace():
            at += 1
        if at >= len(output):
            return found
        doc, at = decoder.raw_decode(output, at)
        found.append(doc)


async def bash(script: str, env: dict[str, str]) -> str:
    """``script`` run by bash from the repository root (as the README's reader runs it); its stdout."""
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, f"{script}\nexited {process.returncode}: {err.decode()}"
    return out.decode()


def test_readme_quickstart_follows_the_two_commands_and_sets_its_variables() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = readme.index("make test   #")
    assert commands < readme.index(QUICKSTART) < readme.index("## Configuration")
    setup, *blocks = quickstart_blocks()
    assert "AGENTSEARCH=http://127.0.0.1:8080" in setup
    assert "TOKEN=$(.venv/bin/agentsearch token --data-dir ./data --sub demo --org demo)" in setup
    assert len(blocks) == 3, "one block each for catalog, actions and code"


async def test_readme_quickstart_runs_verbatim_against_the_starter_data(tmp_path: Path, redis_prefix: str) -> None:
    _setup, catalog, actions, code = quickstart_blocks()  # the setup block's two variables are set below, as it sets them
    log_path = tmp_path / "serve.log"
    env = {
        **os.environ,
        "AGENTSEARCH_STARTER_DATA": "true",
        "AGENTSEARCH_DATA_DIR": str(tmp_path / "data"),
        "AGENTSEARCH_JWT_SECRET": TEST_SECRET,
        "AGENTSEARCH_QUEUE_PREFIX": redis_prefix,
        "AGENTSEARCH_LOG_LEVEL": "INFO",
        "AGENTSEARCH_JOB_TIMEOUT_S": "10",  # shutdown waits at most this for a running embed job
    }
    async with serving(env, log_path=log_path, stop_timeout_s=90) as served:
        await wait_until(lambda: "starter data loaded" in log_path.read_text(), timeout_s=60, interval_s=0.3)
        log = log_path.read_text()
        assert f"agentsearch listening on {served.base}\n" in log
        assert f"admin dashboard: {served.base}/admin (log in with the token of: .venv/bin/agentsearch token --data-dir {tmp_path / 'data'} --sub ops --admin)" in log
        # The logged first search, pasted as it is: it mints demo's token and answers from the starter set.
        first = log.split("try a search of the starter data: ", 1)[1].splitlines()[0]
        assert "--sub demo --org demo" in first and FIRST_QUERY in first
        first_answer = answers(await bash(first, env))[-1]
        assert "capability:WeatherTool" in [r["entity"] for r in first_answer["structuredContent"]["results"]]

        reader = {**env, "AGENTSEARCH": served.base, "TOKEN": token_for("demo", org="demo")}
        put, found = answers(await bash(catalog, reader))
        assert put["written"] == 1
        entities = [r["entity"] for r in found["structuredContent"]["results"]]
        assert entities, found
        assert "mcp-server:garden" in entities and "capability:WeatherTool" in entities, entities

        put, found = answers(await bash(actions, reader))
        assert put == {"instances": 1}
        rows = found["results"]
        assert rows and rows[0]["service"] == "giphy", rows

        (found,) = answers(await bash(code, reader))
        paths = [r["path"] for r in found["results"]]
        assert paths and paths[0] == "ratelimit.py", found["output"]
