"""Schema-driven fuzzing: every operation of ``service/openapi.yaml``, valid and invalid input, no 5xx and every answer as documented.

schemathesis reads the contract the service serves (``/openapi.json``), generates requests for each
operation (valid ones and ones that break the schema), sends them over real HTTP to the app on a
loopback port, and checks each answer: no server error, a documented status, the documented
content type and body schema, bad input refused with a 4xx, and no ``/v1`` or admin operation
answering without its token. On top, every JSON error body is ``{error: {code, message}}``.

The app runs with its real engine (embedded Qdrant, MiniLM, the in-process arq worker) and real
Redis, seeded with a workspace, catalog entities and an action catalog so that searches have
something to find. Requests carry a user's token, or an admin's for admin-only operations.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.engine.queue import deployment_key_patterns
from service.settings import Settings
from tests.callers import FUZZ_ADMIN, FUZZER, TEST_SECRET
from tests.helpers import REDIS_URL, ThreadedApp, app_in_thread

EXAMPLES_PER_OPERATION = 200
PARSER_LINE_LIMIT = 8190  # aiohttp's max_line_size and max_field_size
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]


@dataclass(frozen=True)
class Seeded:
    """The app on a real loopback port (its own thread: schemathesis' client is synchronous) and
    the data seeded into it."""

    server: ThreadedApp
    session: requests.Session
    workspace_id: str


WORKSPACE_FILES = {
    "auth.py": 'def hash_password(password, salt):\n    """Hash a password with a salt."""\n    return salt + password\n',
    "billing/invoice.py": "def compute_invoice_total(lines, tax_rate):\n    return sum(lines) * (1 + tax_rate)\n",
    "server.go": 'package main\n\n// handleLogin checks credentials.\nfunc handleLogin() {\n\tprintln("login")\n}\n',
    "docs/README.md": "# Billing\n\nInvoices and refunds.\n",
}
CATALOG_BUILTINS = [
    {"type": "domain", "id": "email", "description": "Send and read email.", "order": 1},
    {"type": "capability", "id": "emailSend", "domain": "email", "title": "emailSend", "summary": "Send an email.", "inputType": "{ to: string }"},
    {"type": "guide", "id": "package_authoring", "title": "Package authoring", "summary": "Write packages.", "markdown": "# Authoring\n\n## Exports\n\nText.\n"},
]
CATALOG_USER = [
    {"type": "package", "id": "home-controls", "name": "@fuzz/home-controls", "summary": "Lights and shades.", "exports": [{"subpath": "./lights", "purpose": "Turn lights on."}]},
    {"type": "mcp-server", "id": "home", "description": "Home automation.", "tools": [{"name": "set_pin", "description": "Set a PIN."}]},
    {"type": "secret", "id": "homeToken", "description": "Token for the home API."},
    {"type": "memory", "id": "m1", "text": "Keeps the thermostat at 21 degrees."},
]
TEMPLATES = [
    {"template": "gmail", "display_name": "Gmail", "auth": {"type": "oauth", "provider": "google"}, "actions": [{"action": "send_email", "description": "Send an email", "risk": "write"}]},
    {"template": "stripe", "display_name": "Stripe", "actions": [{"action": "list_charges", "description": "List charges", "risk": "read"}]},
]
INSTANCES = [
    {"name": "work-mail", "template": "gmail", "auth": {"type": "oauth", "provider": "google"}},
    {"name": "billing", "template": "stripe", "auth": {"type": "api_key", "secret_name": "STRIPE_KEY"}},
]


def _seed(session: requests.Session, url: str, root: Path) -> str:
    def call(method: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        response = session.request(method, url + path, json=body, headers=headers, timeout=60)
        assert response.status_code in (200, 201), response.text
        answer: dict[str, Any] = response.json()
        return answer

    call("PUT", "/v1/catalog/entities", {"entities": CATALOG_BUILTINS}, FUZZ_ADMIN)
    call("PUT", "/v1/catalog/entities", {"entities": CATALOG_USER}, FUZZER)
    call("PUT", "/v1/actions/templates", {"templates": TEMPLATES}, FUZZ_ADMIN)
    call("PUT", "/v1/actions/instances", {"instances": INSTANCES}, FUZZER)
    workspace_id = str(call("POST", "/v1/workspaces", {"root": str(root)}, FUZZER)["id"])
    for _ in range(600):
        indexed = call("GET", f"/v1/workspaces/{workspace_id}", {}, FUZZER)["state"] == "ready"
        # Ready once the model loaded: before, /readyz answers its documented 503, which the
        # server-error check would count.
        if indexed and session.get(f"{url}/readyz", timeout=10).status_code == 200:
            return workspace_id
        time.sleep(0.2)
    raise AssertionError("the seeded workspace did not finish indexing, or the model did not load")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    base = tmp_path_factory.mktemp("fuzz")
    workspaces = base / "workspaces"
    root = workspaces / "repo"
    for name, text in WORKSPACE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    prefix = f"agentsearch-test-{uuid.uuid4().hex[:12]}"
    app_settings = Settings(
        data_dir=base / "data",
        redis_url=REDIS_URL,
        queue_prefix=prefix,
        jwt_secret=TEST_SECRET,
        allowed_roots=(workspaces,),
        single_tenant=True,  # the fuzzing user registers under the plain base
        rate_limits_enabled=False,  # the fuzzer sends far more than a plan allows; limits have their own test
        job_timeout_s=60,
    )
    session = requests.Session()
    try:
        with app_in_thread(app_settings) as server:
            yield Seeded(server, session, _seed(session, server.url, root))
    finally:
        session.close()
        client = redis.Redis.from_url(REDIS_URL)
        for pattern in deployment_key_patterns(prefix):
            for key in client.scan_iter(match=pattern, count=1000):
                client.delete(key)
        client.close()


CONTRACT = Path(__file__).resolve().parents[2] / "service" / "openapi.yaml"
SCHEMA = schemathesis.openapi.from_path(CONTRACT)
# The test sends the tokens itself: a generated (or left out) Authorization header would be
# overridden, so a case "without a token" would not be the negative case it claims to be.
SCHEMA.config.generation.update(with_security_parameters=False)
OPERATIONS = sorted(result.ok().label for result in SCHEMA.get_all_operations())


def _can_be_broken(label: str) -> bool:
    """Whether a request of this operation can break its schema at all: it takes a body, or a
    parameter narrower than any string (an operation without either has no negative case)."""
    method, path = label.split(" ", 1)
    item = SCHEMA.raw_schema["paths"][path]
    operation = item[method.lower()]
    parameters = [*item.get("parameters", []), *operation.get("parameters", [])]
    return "requestBody" in operation or any(parameter.get("schema", {}) != {"type": "string"} for parameter in parameters)


CASES = [(label, mode) for label in OPERATIONS for mode in GenerationMode if mode is GenerationMode.POSITIVE or _can_be_broken(label)]


def test_the_served_contract_is_the_fuzzed_one(seeded: Seeded) -> None:
    served = seeded.session.get(f"{seeded.server.url}/openapi.json", timeout=30).json()
    assert served == SCHEMA.raw_schema
    assert len(OPERATIONS) >= 25


def _headers_for(case: Case) -> dict[str, str]:
    path: str = case.operation.path
    admin_only = path.startswith("/admin") or path.startswith("/v1/actions/templates")
    return dict(FUZZ_ADMIN if admin_only else FUZZER)


def _aim_at_the_seeded_workspace(case: Case, workspace_id: str) -> None:
    """Searches and reads of a workspace go to the seeded one (a random id is only ever a 404);
    a DELETE keeps its random id so the seeded workspace survives."""
    if case.operation.path.startswith("/v1/workspaces/{id}") and case.method.upper() in {"GET", "POST"}:
        case.path_parameters = {**(case.path_parameters or {}), "id": workspace_id}


def _refused_by_the_http_parser(response: requests.Response) -> bool:
    """aiohttp's parser answers a request line or header over 8190 bytes with a plain-text 400
    before any route or middleware runs (the contract's description says so): such an answer is
    checked here, not against an operation it never reached."""
    request = response.request
    request_line = len(f"{request.method} {request.path_url} HTTP/1.1".encode())
    longest_header = max((len(f"{name}: {value}".encode()) for name, value in request.headers.items()), default=0)
    return response.status_code == 400 and max(request_line, longest_header) > PARSER_LINE_LIMIT


def _content_type(response: requests.Response) -> str:
    """The response's Content-Type: the transport's headers may be keyed in any case, and each may be a
    list of values."""
    for name, value in response.headers.items():
        if name.lower() == "content-type":
            return value[0] if isinstance(value, list) else str(value)
    return ""


def _assert_error_shape(response: requests.Response) -> None:
    if response.status_code < 400:
        return
    content_type = _content_type(response)
    if not content_type.startswith("application/json"):
        # Only the dashboard's HTML pages answer errors as a page; every API error is a JSON error object.
        assert content_type.startswith("text/html") and not response.request.path_url.startswith(("/v1", "/admin/api")), (
            response.status_code,
            response.request.path_url,
            response.headers,
        )
        return
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    assert isinstance(body["error"].get("code"), str) and body["error"]["code"], body
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"], body


@pytest.mark.parametrize(("label", "mode"), CASES, ids=[f"{label}-{mode.value}" for label, mode in CASES])
def test_every_operation_keeps_its_contract(label: str, mode: GenerationMode, seeded: Seeded) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def one_request(case: Case) -> None:
        _aim_at_the_seeded_workspace(case, seeded.workspace_id)
        headers = _headers_for(case)
        response = case.call(base_url=seeded.server.url, session=seeded.session, headers=headers, timeout=60, allow_redirects=False)
        if _refused_by_the_http_parser(response):
            assert _content_type(response).startswith("text/plain"), response.headers
            return
        case.validate_response(response, checks=CHECKS, headers=headers)
        _assert_error_shape(response)

    one_request()


# What the fuzzer found, kept as fixed cases: each was a contract gap or a crash once.
FOUND = [
    # a failed entity ref is a row without a type: the contract now says so
    ("POST /v1/catalog/search", {"body": {"entity": ["a\nb", "package:nothing-here"]}, "media_type": "application/json"}, {400, 404}),
    # null for an optional field is the field left out, as the contract now says
    ("POST /v1/catalog/search", {"body": {"query": "email", "domain": None, "entity": None, "includeHiddenPackages": None}, "media_type": "application/json"}, {200}),
    ("POST /v1/workspaces/{id}/search", {"body": {"query": "login", "regex": None, "ignore_case": None, "mode": None, "limit": None}, "media_type": "application/json"}, {200}),
    # nested fixed repeats used to take gigabytes to compile (a 500 at best)
    ("POST /v1/workspaces/{id}/search", {"body": {"query": "(?:a{9999}){9999}", "regex": True}, "media_type": "application/json"}, {400}),
    # the login form answers 400/401 pages, which the contract did not list
    ("POST /admin/login", {"body": {"token": ""}, "media_type": "application/x-www-form-urlencoded"}, {400}),
    ("POST /admin/login", {"body": {"token": "not-a-token"}, "media_type": "application/x-www-form-urlencoded"}, {401}),
    # an unknown job's page is a 404 page; an id no route can hold is the JSON 404
    ("GET /admin/jobs/{job_id}", {"path_parameters": {"job_id": "0"}}, {404}),
    ("GET /admin/jobs/{job_id}", {"path_parameters": {"job_id": "a\nb"}}, {404}),
    # a plain form post of an admin action answers with a redirect back to the page
    ("POST /admin/api/warm", {"body": {"workspace": "ws_nothing"}, "media_type": "application/x-www-form-urlencoded"}, {303}),
    # an empty enum parameter of the jobs API was taken as "any"
    ("GET /admin/api/jobs", {"query": {"queue": ""}}, {400}),
    ("GET /admin/api/jobs", {"query": {"status": "", "limit": ""}}, {400}),
]


@pytest.mark.parametrize(("label", "overrides", "statuses"), FOUND, ids=[f"{label}-{i}" for i, (label, _, _) in enumerate(FOUND)])
def test_what_the_fuzzer_found_stays_fixed(label: str, overrides: dict[str, Any], statuses: set[int], seeded: Seeded) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    case = operation.Case(**overrides)
    _aim_at_the_seeded_workspace(case, seeded.workspace_id)
    headers = _headers_for(case)
    response = case.call(base_url=seeded.server.url, session=seeded.session, headers=headers, timeout=60, allow_redirects=False)
    assert response.status_code in statuses, (label, response.status_code, response.text[:500])
    case.validate_response(response, checks=CHECKS, headers=headers)
    _assert_error_shape(response)


# A workspace whose root was deleted after indexing, and roots and MCP paths through a symlink
# loop: each was a server error (or stale results) once; now a documented 4xx, a status that says
# so, or a JSON-RPC answer.
ON_A_GONE_WORKSPACE = [
    ("POST /v1/workspaces/{id}/search", {"body": {"query": "login"}, "media_type": "application/json"}, {409}),
    ("POST /v1/workspaces/{id}/search", {"body": {"query": "login", "path": "gone.py"}, "media_type": "application/json"}, {409}),
    ("POST /v1/workspaces/{id}/search", {"body": {"query": "log.n", "regex": True}, "media_type": "application/json"}, {409}),
    ("GET /v1/workspaces/{id}", {}, {200}),
    ("POST /v1/workspaces", {"body": {"root": "{gone}"}, "media_type": "application/json"}, {400}),
    ("POST /v1/workspaces", {"body": {"root": "{loop}/x"}, "media_type": "application/json"}, {400}),
    ("DELETE /v1/workspaces/{id}", {}, {200}),
]


@pytest.fixture(scope="module")
def gone_workspace(seeded: Seeded) -> dict[str, str]:
    """A second workspace of the fuzzing user, indexed, then its root deleted; and a symlink loop."""
    base = seeded.server.settings.allowed_roots[0]
    root = base / "gone"
    root.mkdir()
    (root / "gone.py").write_text("def login():\n    return 1\n")
    loop = base / "loop"
    loop.symlink_to(loop)
    url = seeded.server.url
    workspace_id = seeded.session.post(f"{url}/v1/workspaces", json={"root": str(root)}, headers=FUZZER, timeout=60).json()["id"]
    for _ in range(300):
        if seeded.session.get(f"{url}/v1/workspaces/{workspace_id}", headers=FUZZER, timeout=60).json()["state"] == "ready":
            break
        time.sleep(0.2)
    shutil.rmtree(root)
    return {"id": workspace_id, "gone": str(root), "loop": str(loop)}


@pytest.mark.parametrize(("label", "overrides", "statuses"), ON_A_GONE_WORKSPACE, ids=[f"{label}-{i}" for i, (label, _, _) in enumerate(ON_A_GONE_WORKSPACE)])
def test_a_gone_workspace_and_looping_paths_answer_as_documented(
    label: str, overrides: dict[str, Any], statuses: set[int], seeded: Seeded, gone_workspace: dict[str, str]
) -> None:
    operation = SCHEMA.find_operation_by_label(label)
    assert operation is not None
    if "body" in overrides and "root" in overrides["body"]:
        overrides = {**overrides, "body": {"root": overrides["body"]["root"].format(**gone_workspace)}}
    case = operation.Case(**overrides)
    if "{id}" in label:
        case.path_parameters = {"id": gone_workspace["id"]}
    response = case.call(base_url=seeded.server.url, session=seeded.session, headers=FUZZER, timeout=60, allow_redirects=False)
    assert response.status_code in statuses, (label, response.status_code, response.text[:500])
    case.validate_response(response, checks=CHECKS, headers=FUZZER)
    _assert_error_shape(response)
    if response.status_code == 409:
        assert response.json()["error"]["code"] == "workspace_missing"
    if label == "GET /v1/workspaces/{id}":
        assert response.json()["state"] == "missing"


def test_mcp_code_search_through_a_symlink_loop_is_a_json_rpc_answer(seeded: Seeded, gone_workspace: dict[str, str]) -> None:
    for workspace in (gone_workspace["loop"] + "/x", gone_workspace["loop"]):
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "code_search", "arguments": {"workspace": workspace, "query": "x"}}}
        response = seeded.session.post(f"{seeded.server.url}/mcp", json=call, headers={**FUZZER, "Accept": "application/json, text/event-stream"}, timeout=60)
        assert response.status_code == 200, response.text[:500]
        reply = response.json()
        assert reply["jsonrpc"] == "2.0" and reply["id"] == 7 and (reply.get("error") or reply["result"]["isError"] is True), reply


def test_an_over_long_request_line_is_the_parsers_plain_400(seeded: Seeded) -> None:
    response = seeded.session.get(f"{seeded.server.url}/admin/api/jobs", params={"kind": "k" * 9_000}, headers=FUZZ_ADMIN, timeout=30)
    assert _refused_by_the_http_parser(response) and response.headers["Content-Type"].startswith("text/plain")
