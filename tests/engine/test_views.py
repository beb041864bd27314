"""Document views on the real engine and model: a named record's vector is its text's embedding composed
with its name's, an unnamed record's is its text's alone, and the name is part of what re-embeds a record."""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator, Sequence

import pytest

from service.catalog.model import McpServer, Package
from service.catalog.parsing import parse_entity
from service.catalog.records import export_record, mcp_server_records
from service.engine.analyzer import terms_text
from service.engine.records import DONE, PENDING, IndexRecord, RecordIndex, collection_spec, content_hash, payload_hash
from service.engine.refresh import embed_records
from service.engine.runtime import Engine
from service.engine.views import NAME_WEIGHT, Document, compose, embed_views

SPEC = collection_spec("viewdocs")
TEXT = "Look up the open issues of a repository, filtered by label and state"
NAME = "search issues"


def named(key: str, name: str = NAME, text: str = TEXT) -> IndexRecord:
    return IndexRecord(key=key, tenant="user:alice", kind="doc", embed_text=text, terms=terms_text(text), embed_name=name)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture
async def docs(engine: Engine) -> AsyncIterator[RecordIndex]:
    yield await engine.register("viewdocs", SPEC)


async def stored_vector(engine: Engine, index: RecordIndex, key: str) -> list[float]:
    [point] = await engine.store.retrieve(index.collection, [index.point_id(key)], with_vectors=True)
    return list(point.vectors[engine.embedders.default.vector_name])


def test_compose_is_the_unit_weighted_sum() -> None:
    text, name = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    vector = compose(text, name)
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-6)
    assert math.isclose(vector[1] / vector[0], NAME_WEIGHT, rel_tol=1e-6), "the name counts NAME_WEIGHT of the text"
    assert vector[2] == 0.0


async def test_a_named_record_is_stored_as_text_and_name_composed(engine: Engine, docs: RecordIndex) -> None:
    plain = IndexRecord(key="plain", tenant="user:alice", kind="doc", embed_text=TEXT, terms=terms_text(TEXT))
    await docs.write([named("named"), plain])
    outcome = await embed_records(engine, docs.collection, [("named", named("named").content_hash), ("plain", plain.content_hash)])
    assert outcome.embedded == 2
    embedder = engine.embedders.default
    text_vector, name_vector = await embedder.embed_documents([TEXT, NAME])
    expected = compose(text_vector, name_vector)
    assert cosine(await stored_vector(engine, docs, "named"), expected) > 0.9999
    assert cosine(await stored_vector(engine, docs, "plain"), text_vector) > 0.9999, "no name: the text's embedding alone"
    assert cosine(expected, text_vector) < 0.999, "the name moved the vector"
    # One batch of documents, named and not, is composed per document, in order.
    batch = await embed_views(embedder, [Document(TEXT), Document(TEXT, NAME)])
    assert cosine(batch[0], text_vector) > 0.9999 and cosine(batch[1], expected) > 0.9999


async def test_the_name_is_part_of_the_content_hash(engine: Engine, docs: RecordIndex) -> None:
    # A record without a name hashes exactly as before names existed: no existing vector goes stale.
    legacy = hashlib.sha256(f"\x00{TEXT}".encode()).hexdigest()[:32]
    assert content_hash(TEXT, None) == legacy
    assert named("a").content_hash != legacy
    await docs.write([named("a")])
    await embed_records(engine, docs.collection, [("a", named("a").content_hash)])
    stored = await docs.get("a")
    assert stored is not None and stored["embed_state"] == DONE and stored["embed_name"] == NAME
    assert payload_hash(stored) == stored["content_hash"], "a reindex derives the same hash from the stored fields"
    assert (await docs.write([named("a")])).to_embed == 0, "same text and name: the vector is kept"
    renamed = await docs.write([named("a", name="list issues")])
    assert renamed.to_embed == 1
    assert (await docs.get("a") or {})["embed_state"] == PENDING


def test_catalog_records_carry_their_names_as_words() -> None:
    server = parse_entity(
        {
            "type": "mcp-server",
            "id": "github",
            "description": "Work with GitHub repositories",
            "tools": [{"name": "search_issues", "description": "Search the issues of a repository"}],
        },
        "entities[0]",
    )
    assert isinstance(server, McpServer)
    card, tool = mcp_server_records(server, "user:alice")
    assert card.embed_name == "github"
    assert tool.embed_name == "search issues"
    package = parse_entity(
        {
            "type": "package",
            "id": "slack-kit",
            "name": "@acme/slack-kit",
            "exports": [{"subpath": "./chat/postMessage", "purpose": "Post a message to a channel", "signature": "postMessage(channel, text)"}],
        },
        "entities[1]",
    )
    assert isinstance(package, Package)
    export = export_record(package, package.exports[0], "user:alice")
    assert export.embed_name == "chat post Message", "path parts and callables, each word once"
