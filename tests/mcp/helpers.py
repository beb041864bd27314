"""Shared data and clients of the MCP tests: the official ``mcp`` SDK's client on our transports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from aiohttp.test_utils import TestClient
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.actions.helpers import GITHUB, GMAIL, STRIPE, api_key, oauth, put_instances, put_templates
from tests.callers import ADMIN, ALICE_PRO, BOB_PRO
from tests.catalog.fixtures import CAPABILITIES, DOMAINS, GUIDES, home_package, put
from tests.code.helpers import register, wait_indexed

WORKSPACE_FILES = {
    "auth/passwords.py": 'def hash_password(password: str, salt: str) -> str:\n    """Hash a password with a salt before storing it."""\n    return salt + password\n',
    "billing/invoice.py": "def compute_invoice_total(lines, tax_rate):\n    return sum(lines) * (1 + tax_rate)\n",
    "docs/README.md": "# Billing\n\nInvoices and refunds are computed in billing/.\n",
}
BOB_PACKAGE = {"type": "package", "id": "bob-weather", "name": "@bob/weather-station", "summary": "Read the rooftop weather station of bob."}


@asynccontextmanager
async def http_mcp(client: TestClient[Any, Any], token: str | None, *, mode: str = "legacy") -> AsyncIterator[Client]:
    """The SDK's client over Streamable HTTP to the app's ``/mcp``, with ``token`` as bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client(str(client.make_url("/mcp")), http_client=http), mode=mode) as mcp:
        yield mcp


async def seed_catalog(client: TestClient[Any, Any]) -> None:
    await put(client, DOMAINS + CAPABILITIES + GUIDES, caller=ADMIN)
    await put(client, [home_package()], caller=ALICE_PRO)
    await put(client, [BOB_PACKAGE], caller=BOB_PRO)


async def seed_actions(client: TestClient[Any, Any]) -> None:
    await put_templates(client, [GMAIL, GITHUB, STRIPE])
    await put_instances(client, ALICE_PRO, oauth("gmail_work", "gmail", "google", account_email="alice@example.com"), api_key("stripe_live", "stripe"))
    await put_instances(client, BOB_PRO, oauth("bob_github", "github", "github"))


async def seed_workspace(client: TestClient[Any, Any], base: Path, owner: dict[str, str] = ALICE_PRO, name: str = "repo") -> tuple[str, Path]:
    """A small code tree under the allowed base, registered for ``owner`` and indexed: (id, root)."""
    root = base / name
    for path, text in WORKSPACE_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    headers = owner
    workspace_id = str((await register(client, root, headers))["id"])
    await wait_indexed(client, workspace_id, headers)
    return workspace_id, root


async def connect_error(client: TestClient[Any, Any], token: str | None) -> MCPError:
    """The error the SDK's client raises when it cannot connect (anyio wraps it in exception groups)."""
    try:
        async with http_mcp(client, token):
            pass
    except BaseException as exc:
        found = _first_mcp_error(exc)
        if found is None:
            raise
        return found
    raise AssertionError("the client connected")


def _first_mcp_error(exc: BaseException) -> MCPError | None:
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_mcp_error(inner)
            if found is not None:
                return found
    return None


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")
