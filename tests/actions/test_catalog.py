"""The catalog as stored and as each process holds it: restarts, other front ends' writes, file loading."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from service.actions.ingest import delete_template, write_instances, write_templates
from service.actions.loader import http_batches, load_catalog_file, read_catalog_file
from service.actions.parsing import parse_instances_body, parse_template
from service.actions.state import ActionCatalog, catalog_for
from service.actions.visibility import visible_instances
from service.engine.runtime import Engine
from service.engine.startup import open_engine
from service.settings import Settings
from service.surfaces import surfaces
from tests.actions.helpers import GITHUB, GMAIL, catalog_file, data_templates
from tests.callers import ALICE, caller_of


async def test_catalog_and_instances_survive_a_restart(settings: Settings) -> None:
    engine = await open_engine(settings, surfaces())
    try:
        await write_templates(engine, [parse_template(GMAIL), parse_template(GITHUB)])
        await write_instances(engine, parse_instances_body({"instances": [{"name": "mail", "template": "gmail", "auth": {"type": "oauth", "provider": "google"}}]}, caller_of(ALICE)))
        before = await catalog_for(engine).current()
        names_before = list(before.name_norm)
    finally:
        await engine.close()
    engine = await open_engine(settings, surfaces())
    try:
        after = await catalog_for(engine).current()
        assert list(after.template_pos) == ["github", "gmail"] and after.name_norm == names_before
        assert after.blocks[after.template_pos["gmail"]].auth.provider == "google"
        assert [i.name for i in await visible_instances(engine, caller_of(ALICE))] == ["mail"]
    finally:
        await engine.close()


async def test_another_front_end_reloads_only_what_changed(engine: Engine) -> None:
    await write_templates(engine, [parse_template(GMAIL), parse_template(GITHUB)])
    other = ActionCatalog(engine, catalog_for(engine).meta)  # a second process's copy: same store, same Redis
    first = await other.current()
    assert set(first.template_pos) == {"gmail", "github"}
    github_block = other.blocks["github"]

    longer = dict(GMAIL, actions=[*GMAIL["actions"], {"action": "archive_thread", "description": "Archive a thread", "risk": "write"}])
    await write_templates(engine, [parse_template(longer)])
    await other.sync(force=True)
    index = await other.current()
    assert index.locate("gmail", "archive_thread") is not None
    assert other.blocks["github"] is github_block  # unchanged revision: not rebuilt

    await delete_template(engine, "github")
    await other.sync(force=True)
    assert "github" not in (await other.current()).template_pos


async def test_loading_a_catalog_file_is_idempotent(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "subset.jsonl.gz"
    templates = data_templates(12)
    with gzip.open(path, "wb") as out:
        out.write(b"\n".join(orjson.dumps(t) for t in templates) + b"\n")
    first = await load_catalog_file(engine, path)
    assert (first.templates, first.actions, first.written) == (12, sum(len(t["actions"]) for t in templates), first.actions)
    again = await load_catalog_file(engine, path)
    assert (again.written, again.to_embed, again.removed) == (0, 0, 0)
    counts = await engine.records("actions").counts()
    assert counts["records"] == first.actions
    keys = {templates[0]["template"], templates[1]["template"]}
    assert [t["template"] for t in read_catalog_file(path, keys=keys)] == [t["template"] for t in templates[:2]]


def test_http_batches_stay_under_the_body_limit() -> None:
    raw = list(read_catalog_file(catalog_file(), limit=300))
    bodies = list(http_batches(raw, max_bytes=200_000))
    parsed = [orjson.loads(b)["templates"] for b in bodies]
    assert len(bodies) > 1 and all(len(body) <= 200_000 or len(items) == 1 for body, items in zip(bodies, parsed, strict=True))
    assert [t["template"] for items in parsed for t in items] == [t["template"] for t in raw]
