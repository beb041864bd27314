"""Credentials never printed: a ``REDIS_URL`` with a password shows nowhere (logs, ``/readyz``, the
reindex command, the settings error, the container health check), and ``/readyz`` says only which
dependency is down with a short fixed cause.

The Redis URL points at a closed local port, so Redis is really down and every path that reports
it runs for real.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import replace

import orjson
import pytest

from deploy import healthcheck
from service.errors import SettingsError
from service.redact import CredentialFilter, mask_url
from service.settings import Settings
from service.settings_loader import load_settings
from tests.callers import auth
from tests.helpers import reindex_in_process, running_app

PASSWORD = "s3cret-pass"



def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _everything_logged(records: list[logging.LogRecord]) -> str:
    """Each record as an operator's handler would print it, with every ``extra`` field and traceback."""
    formatter = logging.Formatter("%(name)s %(message)s")
    return "\n".join(f"{formatter.format(r)} {r.__dict__!r}" for r in records)


def test_the_settings_error_for_a_bad_url_masks_its_password() -> None:
    for env in ({"REDIS_URL": f"http://:{PASSWORD}@cache:6379/0"}, {"QDRANT_URL": f"ftp://admin:{PASSWORD}@qdrant:6333", "AGENTSEARCH_JWT_SECRET": "x" * 40}):
        with pytest.raises(SettingsError) as refused:
            load_settings(env)
        assert PASSWORD not in str(refused.value) and "***" in str(refused.value), str(refused.value)


def test_mask_url_and_the_log_filter_mask_every_form_of_credential() -> None:
    assert mask_url(f"redis://:{PASSWORD}@h:6379/0") == "redis://:***@h:6379/0"
    assert mask_url(f"rediss://default:{PASSWORD}@h:6380") == "rediss://default:***@h:6380"
    assert mask_url(f"unix:///run/redis.sock?db=0&password={PASSWORD}") == "unix:///run/redis.sock?db=0&password=***"
    assert mask_url(f"https://api.example/v1?api_key={PASSWORD}&x=1") == "https://api.example/v1?api_key=***&x=1"
    assert mask_url("redis://cache:6379/0") == "redis://cache:6379/0"
    url = f"redis://:{PASSWORD}@cache:6379/0"
    try:
        raise ConnectionError(f"cannot reach {url}")
    except ConnectionError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "connecting to %s failed: " + url, (url,), exc_info=__import__("sys").exc_info())
    record.target = url
    assert CredentialFilter().filter(record)
    printed = logging.Formatter("%(message)s %(target)s").format(record)
    assert PASSWORD not in printed and printed.count("redis://:***@cache") >= 3, printed


async def test_a_redis_password_shows_in_no_log_line_no_readyz_and_no_reindex_output(
    settings: Settings, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _closed_port()
    down = replace(settings, redis_url=f"redis://:{PASSWORD}@127.0.0.1:{port}/0", embeddings_model=None)
    caplog.set_level(logging.DEBUG)
    async with running_app(down) as client:
        ready = await client.get("/readyz")
        body = await ready.json()
        assert ready.status == 503 and body["checks"]["redis"] == "down: unreachable", body
        assert body["checks"]["store"] == "ok (qdrant-edge)"
        text = orjson.dumps(body).decode()
        assert PASSWORD not in text and "127.0.0.1" not in text and str(port) not in text and "Error" not in text
        # Calls that reach Redis (the rate limiter, the embed queue) log its failure.
        user = auth("ursula")
        put = await client.put("/v1/catalog/entities", json={"entities": [{"type": "package", "id": "p1", "summary": "a package"}]}, headers=user)
        assert put.status < 500, await put.text()
        assert (await client.post("/v1/catalog/search", json={"query": "package"}, headers=user)).status < 500
        # The command finds the data directory held by this service and tries to queue the job in Redis.
        code = await asyncio.to_thread(reindex_in_process, down)
        printed = capsys.readouterr()
        assert code == 2 and "redis://:***@127.0.0.1" in printed.err, printed
        assert PASSWORD not in printed.out + printed.err

    # Run where it can open the store: the reindex itself runs, and its embed jobs fail to queue.
    code = await asyncio.to_thread(reindex_in_process, down)
    printed = capsys.readouterr()
    assert code == 0 and "reindexed" in printed.out, printed
    assert PASSWORD not in printed.out + printed.err
    logged = _everything_logged(caplog.records)
    assert "readiness: redis is down (unreachable)" in logged and "Connect" in logged, "the log keeps the detail"
    assert PASSWORD not in logged


def test_the_worker_health_check_masks_the_redis_password() -> None:
    problem = healthcheck.check_worker({"REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{_closed_port()}/0", "AGENTSEARCH_QUEUE_PREFIX": "p"})
    assert problem is not None and "redis://:***@127.0.0.1" in problem and PASSWORD not in problem, problem
