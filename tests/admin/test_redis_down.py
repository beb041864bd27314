"""With Redis unreachable the dashboard answers 503 with a message that says so, never a 500."""

from __future__ import annotations

from dataclasses import replace

from service.settings import Settings
from tests.callers import ADMIN
from tests.helpers import running_app


async def test_dashboard_answers_503_while_redis_is_down(settings: Settings) -> None:
    # Nothing listens on port 1: a real refused connection, as when Redis is down.
    down = replace(settings, redis_url="redis://127.0.0.1:1/0", worker_in_process=False)
    async with running_app(down) as client:
        for path in ("/admin/api/overview", "/admin/api/jobs", "/admin/api/workers", "/admin/api/series"):
            response = await client.get(path, headers=ADMIN)
            body = await response.json()
            assert response.status == 503 and "Redis is unreachable" in body["error"]["message"], (path, body)
        response = await client.post("/admin/api/sweep", headers=ADMIN)
        assert response.status == 503
