"""HTTP helpers for the workspace tests: register, status, search, and waiting for the index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from tests.callers import ALICE
from tests.helpers import wait_until


async def register(client: TestClient[Any, Any], root: Path, headers: dict[str, str] = ALICE, **search: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"root": str(root)}
    if search:
        body["search"] = search
    response = await client.post("/v1/workspaces", json=body, headers=headers)
    data: dict[str, Any] = await response.json()
    assert response.status in (200, 201), data
    return data


async def status(client: TestClient[Any, Any], workspace_id: str, headers: dict[str, str] = ALICE) -> dict[str, Any]:
    response = await client.get(f"/v1/workspaces/{workspace_id}", headers=headers)
    data: dict[str, Any] = await response.json()
    assert response.status == 200, data
    return data


async def wait_indexed(client: TestClient[Any, Any], workspace_id: str, headers: dict[str, str] = ALICE) -> dict[str, Any]:
    async def ready() -> bool:
        return (await status(client, workspace_id, headers))["state"] == "ready"

    await wait_until(ready, timeout_s=60)
    return await status(client, workspace_id, headers)


async def wait_embedded(client: TestClient[Any, Any], workspace_id: str, headers: dict[str, str] = ALICE) -> dict[str, Any]:
    async def embedded() -> bool:
        state = await status(client, workspace_id, headers)
        return state["chunks"] > 0 and state["embedded"] == state["chunks"] and state["pending"] == 0

    await wait_until(embedded, timeout_s=90)
    return await status(client, workspace_id, headers)


async def search(client: TestClient[Any, Any], workspace_id: str, headers: dict[str, str] = ALICE, expect: int = 200, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/workspaces/{workspace_id}/search", json=body, headers=headers)
    data: dict[str, Any] = await response.json()
    assert response.status == expect, data
    return data


async def wait_model_ready(client: TestClient[Any, Any]) -> None:
    """Wait for the default model (loading in the background since start-up): a search that finds it
    still loading answers lexically, by design, which is not what a hybrid test wants to see."""

    async def ready() -> bool:
        response = await client.get("/readyz")
        return response.status == 200

    await wait_until(ready, timeout_s=120)
