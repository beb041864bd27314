"""Every request body of ``service/openapi.yaml`` shows an example, and each example is valid for its schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CONTRACT = yaml.safe_load((Path(__file__).resolve().parents[1] / "service" / "openapi.yaml").read_text())
METHODS = {"get", "put", "post", "patch", "delete"}


def request_bodies() -> list[tuple[str, str, dict[str, Any]]]:
    """(operation label, media type, media object) of every request body (components' ones resolved)."""
    found = []
    for path, item in CONTRACT["paths"].items():
        for method, operation in item.items():
            if method not in METHODS or "requestBody" not in operation:
                continue
            body = operation["requestBody"]
            if "$ref" in body:
                body = CONTRACT["components"]["requestBodies"][body["$ref"].rsplit("/", 1)[1]]
            for media_type, media in body["content"].items():
                found.append((f"{method.upper()} {path}", media_type, media))
    return found


def as_json_schema(schema: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable: true`` admits null (in an enum too)."""
    if isinstance(schema, list):
        return [as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: as_json_schema(value) for key, value in schema.items() if key not in {"nullable", "example"}}
    if schema.get("nullable") is True:
        if isinstance(converted.get("enum"), list) and None not in converted["enum"]:
            converted["enum"] = [*converted["enum"], None]
        if isinstance(converted.get("type"), str):
            converted["type"] = [converted["type"], "null"]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def examples_of(media: dict[str, Any]) -> list[Any]:
    if "example" in media:
        return [media["example"]]
    return [example["value"] for example in (media.get("examples") or {}).values()]


BODIES = request_bodies()
COMPONENTS = as_json_schema(CONTRACT["components"])


def test_the_contract_has_request_bodies_to_check() -> None:
    labels = {label for label, _, _ in BODIES}
    assert {"POST /v1/workspaces/{id}/search", "PUT /v1/catalog/entities", "POST /admin/login"} <= labels
    assert len(BODIES) >= 10


@pytest.mark.parametrize(("label", "media_type", "media"), BODIES, ids=[f"{label} {media_type}" for label, media_type, _ in BODIES])
def test_every_request_body_has_an_example_valid_for_its_schema(label: str, media_type: str, media: dict[str, Any]) -> None:
    examples = examples_of(media)
    assert examples, f"{label} ({media_type}) has no example"
    schema = {**as_json_schema(media["schema"]), "components": COMPONENTS}  # '#/components/...' resolves here
    validator = jsonschema.Draft7Validator(schema)
    for example in examples:
        errors = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(example)]
        assert not errors, f"{label} ({media_type}) example is invalid: {errors}"


def test_an_invalid_example_would_be_caught() -> None:
    """The check itself refuses what the schema refuses (an unknown field, a wrong type)."""
    _, _, media = next(body for body in BODIES if body[0] == "POST /v1/workspaces/{id}/search")
    validator = jsonschema.Draft7Validator({**as_json_schema(media["schema"]), "components": COMPONENTS})
    assert list(validator.iter_errors({"query": "x", "limt": 3}))
    assert list(validator.iter_errors({"query": 7}))
    assert not list(validator.iter_errors({"query": "x", "mode": None})), "nullable fields admit null"
