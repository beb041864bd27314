"""Small catalog fixtures and HTTP helpers shared by the catalog tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from service.catalog.state import catalog_state
from service.settings import Settings
from service.state import ENGINE
from tests.callers import ADMIN, auth
from tests.helpers import running_app, wait_until

DOMAINS = [
    {"type": "domain", "id": "email", "description": "Send and read email.", "order": 1},
    {"type": "domain", "id": "jobs", "description": "Schedule and inspect background jobs.", "order": 2},
    {"type": "domain", "id": "packages", "description": "Create, update and list saved packages.", "order": 3},
]

CAPABILITIES = [
    {
        "type": "capability",
        "id": "emailSend",
        "domain": "email",
        "title": "emailSend",
        "summary": "Send an email message to one or more recipients.",
        "description": "Sends a plain-text or HTML email from the user's connected address.",
        "inputType": "{\n  to: string[];\n  subject: string;\n  body: string\n}",
        "outputType": "{ messageId: string }",
        "order": 1,
    },
    {
        "type": "capability",
        "id": "emailList",
        "domain": "email",
        "title": "emailList",
        "summary": "List recent emails in the inbox.",
        "inputType": "{ limit?: number }",
        "order": 2,
    },
    {
        "type": "capability",
        "id": "emailRead",
        "domain": "email",
        "title": "emailRead",
        "summary": "Read the full body of one email.",
        "inputType": "{ messageId: string }",
        "order": 3,
    },
    {
        "type": "capability",
        "id": "jobSchedule",
        "domain": "jobs",
        "title": "jobSchedule",
        "summary": "Schedule a recurring background job with a cron expression.",
        "inputType": "{ cron: string; packageId: string; job: string }",
        "order": 1,
    },
    {
        "type": "capability",
        "id": "jobList",
        "domain": "jobs",
        "title": "jobList",
        "summary": "List scheduled jobs and their last run.",
        "order": 2,
    },
    {
        "type": "capability",
        "id": "packageCreate",
        "domain": "packages",
        "title": "packageCreate",
        "summary": "Create a new saved package from source files.",
        "order": 1,
    },
]

LONG_GUIDE = "# Package authoring\n\nHow to write packages.\n\n" + "\n".join(
    f"## Step {i}\n\n" + "\n".join(f"Line {i}.{j} of the authoring guide explains exports and jobs." for j in range(12)) for i in range(1, 40)
)

GUIDES = [
    {
        "type": "guide",
        "id": "package_subscriptions",
        "title": "Package subscriptions",
        "summary": "Subscribe packages to repository events.",
        "markdown": "# Package subscriptions\n\nSubscribe to events.\n\n## repo.pushed\n\nFires when a repository is pushed.\n\n## repo.tagged\n\nFires on tags.\n",
    },
    {"type": "guide", "id": "package_authoring", "title": "Package authoring", "summary": "Write and publish packages.", "markdown": LONG_GUIDE},
]

HOME_README = """# Home controls

Controls lights and shades at home.

## Intent

Wrap the home MCP server so shades and lights can be scheduled.

## Export JSDoc

Each export documents its purpose with JSDoc.
"""


def home_package(**changes: Any) -> dict[str, Any]:
    package = {
        "type": "package",
        "id": "home-controls",
        "name": "@alice/home-controls",
        "summary": "Control lights and shades in the house.",
        "readme": HOME_README,
        "tags": ["home", "automation"],
        "exports": [
            {
                "subpath": "./bond-area-shades",
                "purpose": "Open or close the bond area shades to a position.",
                "signature": "function setBondAreaShades(params: { position: number }): Promise<void>",
                "typeDefinition": "type Params = { position: number }",
                "example": "await setBondAreaShades({ position: 50 })",
            },
            {
                "subpath": "./porch-lights",
                "purpose": "Turn the porch lights on or off.",
                "signature": "function setPorchLights(params: { on: boolean }): Promise<void>",
            },
        ],
        "jobs": ["nightly-shades"],
        "retrievers": [{"name": "room-state", "description": "Current room state"}],
        "files": {"src/index.ts": "\n".join(f"// line {i}" for i in range(1, 201))},
    }
    package.update(changes)
    return package


HIDDEN_PACKAGE = {
    "type": "package",
    "id": "secret-garden",
    "name": "@alice/secret-garden",
    "summary": "Water the garden plants on a schedule.",
    "hidden": True,
}

MCP_HOME = {
    "type": "mcp-server",
    "id": "home",
    "description": "Home automation server for locks and thermostats.",
    "instructions": "Always confirm before unlocking doors.",
    "tools": [
        {
            "name": "set_pin",
            "description": "Set the door lock PIN code.",
            "inputSchema": {"type": "object", "properties": {"pin": {"type": "string"}, "door": {"type": "string", "enum": ["front", "back"]}}, "required": ["pin"]},
        },
        {"name": "get_temperature", "description": "Read the thermostat temperature.", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "set_temperature", "description": "Set the thermostat target temperature.", "inputSchema": {"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]}},
    ],
}

INTEGRATIONS = [
    {
        "type": "integration",
        "id": "github",
        "name": "GitHub",
        "provider": "github",
        "description": "GitHub API access for repositories and issues.",
        "authType": "oauth",
        "tokenUrl": "https://github.com/login/oauth/access_token",
        "apiBaseUrl": "https://api.github.com",
        "clientId": "gh-client-123",
        "requiredHosts": ["api.github.com"],
    },
    {
        "type": "integration",
        "id": "spotify",
        "name": "Spotify",
        "provider": "spotify",
        "description": "Spotify playlists and playback.",
        "lastRefresh": {"status": "reconnectable", "at": "2024-05-01T00:00:00Z", "message": "refresh token revoked"},
    },
]

# Platform capabilities that answers name when this catalog has them (an outdated fork's absorb step).
ABSORB_CAPABILITIES = [
    {"type": "capability", "id": "communityGet", "domain": "packages", "summary": "Read one public community package listing.", "inputType": "{ name: string }"},
    {"type": "capability", "id": "repoPublishSession", "domain": "packages", "summary": "Publish a repo session as the package's new version.", "inputType": "{ sessionId: string; absorbed_upstream_commit?: string }"},
]

GITHUB_PACKAGE = {"type": "package", "id": "github-helpers", "name": "@alice/github-helpers", "summary": "Helpers to open pull requests.", "tags": ["github"]}

SECRETS = [
    {"type": "secret", "id": "githubPat", "description": "GitHub personal access token for the API.", "provider": "github", "hosts": ["api.github.com"]},
    {"type": "secret", "id": "deployKey", "description": "GitHub deploy key used by the package.", "packageId": "home-controls"},
]


async def put(client: Any, entities: list[dict[str, Any]], *, status: int = 200, owner: str | None = None, caller: dict[str, str] | None = None) -> dict[str, Any]:
    """PUT the entities as ``caller`` (a plain ``alice`` by default); the answer, its status checked."""
    body: dict[str, Any] = {"entities": entities}
    if owner:
        body["owner"] = owner
    response = await client.put("/v1/catalog/entities", json=body, headers=caller or auth("alice"))
    payload = await response.json()
    assert response.status == status, payload
    return dict(payload)


async def search(client: Any, body: dict[str, Any], *, status: int = 200, caller: dict[str, str] | None = None) -> dict[str, Any]:
    """The catalog search as ``caller`` (a plain ``alice`` by default); the answer, its status checked."""
    response = await client.post("/v1/catalog/search", json=body, headers=caller or auth("alice"))
    payload = await response.json()
    assert response.status == status, payload
    return dict(payload)


async def seed_builtins(client: Any) -> None:
    await put(client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)


async def wait_embedded(client: Any, caller: dict[str, str] = ADMIN) -> None:
    """Wait until every catalog record the caller sees has its embedding."""

    async def done() -> bool:
        response = await client.get("/v1/index/status", headers=caller)
        counts = (await response.json())["surfaces"]["catalog"]
        return bool(counts["records"] and counts["pending"] == 0)

    await wait_until(done, timeout_s=240)


def refs(answer: dict[str, Any]) -> list[str]:
    return [r["entity"] for r in answer["structuredContent"]["results"]]


@asynccontextmanager
async def reranking_app(settings: Settings, setup: Callable[[web.Application], object] | None = None) -> AsyncIterator[TestClient[Any, Any]]:
    """``running_app`` whose rerank scorer's own HTTP session is closed too (the engine does not own it)."""
    async with running_app(settings, setup=setup) as client:
        try:
            yield client
        finally:
            scorer = catalog_state(client.server.app[ENGINE]).scorer
            if scorer is not None:
                await scorer.aclose()  # type: ignore[attr-defined]
