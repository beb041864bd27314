"""Shared data and HTTP helpers of the action-search tests: a small hand-made catalog."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from bench.datasets import ACTIONS_CATALOG, dataset
from service.actions.loader import read_catalog_file
from tests.callers import ADMIN


def _action(name: str, description: str, risk: str = "read") -> dict[str, str]:
    return {"action": name, "description": description, "risk": risk}


GMAIL = {
    "template": "gmail",
    "display_name": "Google Gmail",
    "description": "Email by Google",
    "auth": {"type": "oauth", "provider": "google"},
    "actions": [
        _action("send_email", "Send an email message", "write"),
        _action("list_messages", "List messages in the mailbox"),
        _action("delete_message", "Permanently delete a message", "delete"),
    ],
}
GITHUB = {
    "template": "github",
    "display_name": "GitHub",
    "auth": {"type": "oauth", "provider": "github"},
    "actions": [
        _action("list_repos", "List repositories for the authenticated user"),
        _action("list_repos_for_org", "List repositories of an organization"),
        _action("create_issue", "Open a new issue in a repository", "write"),
        _action("delete_repo", "Delete a repository", "delete"),
    ],
}
STRIPE = {
    "template": "stripe",
    "display_name": "Stripe",
    "actions": [
        _action("create_payment_intent", "Create a PaymentIntent to collect a payment from a customer", "write"),
        _action("list_charges", "List the charges made to customers"),
        _action("refund_charge", "Refund a charge", "write"),
    ],
}
SLACK = {
    "template": "slack",
    "display_name": "Slack",
    "auth": {"type": "oauth", "provider": "slack"},
    "actions": [_action("post_message", "Post a message to a channel", "write"), _action("list_channels", "List the workspace's channels")],
}
WEATHER = {"template": "openweather", "display_name": "OpenWeather", "actions": [_action("current_weather", "Current weather for a city")]}
CRM = {
    "template": "hubspot",
    "display_name": "HubSpot CRM",
    "actions": [_action("create_contact", "Create a contact", "write"), _action("search_contacts", "Search contacts by name or email")],
}
HAND_MADE = [GMAIL, GITHUB, STRIPE, SLACK, WEATHER, CRM]


def catalog_file() -> Path:
    """The APIs.guru action catalog data set; a test that needs it fails saying where to put it when absent."""
    return dataset(ACTIONS_CATALOG)


def data_templates(count: int, max_actions: int = 12) -> list[dict[str, Any]]:
    """The first ``count`` templates of the APIs.guru catalog with at most ``max_actions`` actions."""
    chosen = []
    for raw in read_catalog_file(catalog_file()):
        if len(raw["actions"]) <= max_actions:
            chosen.append(raw)
            if len(chosen) == count:
                break
    return chosen


def api_key(name: str, template: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "template": template, "auth": {"type": "api_key", "secret_name": f"{name.upper()}_KEY"}, **extra}


def oauth(name: str, template: str, provider: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "template": template, "auth": {"type": "oauth", "provider": provider}, **extra}


async def put_templates(client: TestClient[Any, Any], templates: Sequence[dict[str, Any]], headers: dict[str, str] = ADMIN) -> dict[str, Any]:
    response = await client.put("/v1/actions/templates", json={"templates": list(templates)}, headers=headers)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def put_instances(client: TestClient[Any, Any], headers: dict[str, str], *instances: dict[str, Any]) -> None:
    response = await client.put("/v1/actions/instances", json={"instances": list(instances)}, headers=headers)
    assert response.status == 200, await response.text()


async def search(client: TestClient[Any, Any], headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/actions/search", json=body, headers=headers)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


def services(answer: dict[str, Any]) -> list[str | None]:
    return [row.get("service") for row in answer["results"]]


def pairs(answer: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(row.get("service"), row["action"]) for row in answer["results"]]


async def action_counts(client: TestClient[Any, Any]) -> dict[str, int]:
    response = await client.get("/v1/index/status", headers=ADMIN)
    counts: dict[str, int] = (await response.json())["surfaces"]["actions"]
    return counts
