"""Calls and data of the fault tests against a served child (``tests.helpers.ServiceProcess``):
one JSON call as a caller, and small packages that one query finds."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.callers import auth


async def call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None, caller: dict[str, str] | None = None) -> tuple[int, Any]:
    """One JSON call as ``caller`` (a plain ``alice`` by default); (status, decoded body)."""
    async with session.request(method, url, json=body, headers=caller or auth("alice")) as response:
        return response.status, await response.json()


def packages(prefix: str, count: int, topic: str) -> list[dict[str, Any]]:
    """``count`` small packages whose summaries share ``topic`` (so one query finds them all)."""
    return [
        {"type": "package", "id": f"{prefix}-{i}", "name": f"@alice/{prefix}-{i}", "summary": f"{topic} helper number {i} ({prefix})."}
        for i in range(count)
    ]
