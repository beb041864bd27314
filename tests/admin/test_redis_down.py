"""With Redis unreachable the dashboard answers 503 with a message that says so, never a 500."""

from __future__ import annotations

from dataclasses import replace

from aiohttp.test_utils import TestClient, TestServer

from service.app import create_app
from service.settings import Settings
from tests.admin.helpers import ADMIN


async def test_dashboard_answers_503_while_redis_is_down(settings: Settings) -> None:
    # Nothing listens on port 1: a real refused connection, as when Redis is down.
    down = replace(settings, redis_url="redis://127.0.0.1:1/0", worker_in_process=False)
    client = TestClient(TestServer(create_app(down)))
    await client.start_server()
    try:
        for path in ("/admin/api/overview", "/admin/api/jobs", "/admin/api/workers", "/admin/api/series"):
            response = await client.get(path, headers=ADMIN)
            body = await response.json()
            assert response.status == 503 and "Redis is unreachable" in body["error"]["message"], (path, body)
        response = await client.post("/admin/api/sweep", headers=ADMIN)
        assert response.status == 503
    finally:
        await client.close()
