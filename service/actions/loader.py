"""Loading a template catalog file (JSON lines, optionally gzipped) such as the APIs.guru OpenAPI catalog.

Each line is one template as ``PUT /v1/actions/templates`` takes it: ``{template, display_name,
description, categories, actions: [{action, description, method, path, risk}]}``. The APIs.guru
catalog as one such file (``openapi-actions.jsonl.gz``) holds 2,628 templates and 124,730 actions.

``load_catalog_file`` writes through the engine (no HTTP); ``http_batches`` cuts the same templates
into request bodies under the service's body limit for a client that loads over HTTP.
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from service.actions.ingest import write_templates
from service.actions.model import TemplateDef
from service.actions.parsing import parse_template

if TYPE_CHECKING:
    from service.engine.runtime import Engine

# Actions per write_templates call: bounds memory and how long one write holds the catalog lock.
LOAD_BATCH_ACTIONS = 5_000
# Request bodies stay well under the default client_max_size (8 MiB).
HTTP_BATCH_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class LoadResult:
    templates: int
    actions: int
    written: int
    removed: int
    to_embed: int


def read_catalog_file(path: Path | str, *, keys: Collection[str] | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The raw template objects of a catalog file, optionally only ``keys`` and at most ``limit`` of them."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    count = 0
    with opener(path, "rb") as lines:
        for line in lines:
            if not line.strip():
                continue
            raw = orjson.loads(line)
            if keys is not None and raw.get("template") not in keys:
                continue
            yield raw
            count += 1
            if limit is not None and count >= limit:
                return


async def load_catalog_file(
    engine: Engine, path: Path | str, *, keys: Collection[str] | None = None, limit: int | None = None
) -> LoadResult:
    """Validate and write every template of the file (or the chosen ones); embedding follows in the background."""
    totals = {"templates": 0, "actions": 0, "written": 0, "removed": 0, "to_embed": 0}
    for batch in _batches(parse_template(raw, f"line {n}") for n, raw in enumerate(read_catalog_file(path, keys=keys, limit=limit), 1)):
        result = await write_templates(engine, batch)
        for name in totals:
            totals[name] += getattr(result, name)
    return LoadResult(**totals)


def _batches(templates: Iterable[TemplateDef]) -> Iterator[list[TemplateDef]]:
    batch: list[TemplateDef] = []
    size = 0
    for template in templates:
        batch.append(template)
        size += len(template.actions)
        if size >= LOAD_BATCH_ACTIONS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def http_batches(raw_templates: Iterable[dict[str, Any]], max_bytes: int = HTTP_BATCH_BYTES) -> Iterator[bytes]:
    """``{"templates": [...]}`` bodies of at most ``max_bytes`` each (a bigger template goes alone)."""
    parts: list[bytes] = []
    size = 0
    for raw in raw_templates:
        encoded = orjson.dumps(raw)
        if parts and size + len(encoded) > max_bytes:
            yield _body(parts)
            parts, size = [], 0
        parts.append(encoded)
        size += len(encoded) + 1
    if parts:
        yield _body(parts)


def _body(parts: list[bytes]) -> bytes:
    return b'{"templates":[' + b",".join(parts) + b"]}"
