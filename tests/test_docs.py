"""The docs say what the code does: every setting is in README's table, the contract parses and lists its paths."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from service.health import load_contract
from service.settings import Settings, env_name

ROOT = Path(__file__).resolve().parents[1]


def test_readme_settings_table_lists_every_setting_with_its_variable() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines() if line.startswith("| ") and line.count("|") >= 5}
    for field in fields(Settings):
        assert field.name in rows, f"README's settings table lacks {field.name}"
        if field.name != "providers":
            assert f"`{env_name(field.name)}`" in rows[field.name], f"README names the wrong variable for {field.name}"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh", 1)[1].split("```", 1)[0]
    assert "make run" in first_block and "make test" in first_block


def test_ci_runs_readmes_test_command() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_contract_parses_and_every_error_uses_the_error_schema() -> None:
    contract = load_contract()
    assert contract["components"]["schemas"]["Error"]["required"] == ["error"]
    for path, operations in contract["paths"].items():
        if path == "/readyz":
            continue  # a probe: 503 carries the readiness checks, not an error
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "delete", "patch"}:
                continue  # path-level parameters
            for status, response in operation.get("responses", {}).items():
                if str(status).startswith(("4", "5")):
                    if set(response.get("content", {})) == {"text/html"}:
                        # The dashboard's browser pages (login form, forbidden page) answer in HTML;
                        # everything a program calls, the admin JSON API included, answers JSON.
                        assert path.startswith("/admin") and not path.startswith("/admin/api"), (path, method, status)
                        continue
                    ref = response.get("$ref") or response["content"]["application/json"]["schema"].get("$ref", "")
                    if ref.startswith("#/components/responses/"):
                        continue
                    schema = contract["components"]["schemas"][ref.rsplit("/", 1)[1]]
                    # The common error shape, possibly with answer fields beside it (catalog search).
                    assert "error" in schema["required"], (path, method, status)
                    assert schema["properties"]["error"]["required"] == ["code", "message"], (path, method, status)
