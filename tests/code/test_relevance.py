"""What makes code search rank well: a chunk is embedded with its context (path words, enclosing
class, symbol) before its code, within what the model reads; its names and docstring weigh more
than its code in the lexical terms, so a docstring match outranks a body-only match; and a
workspace indexed with an older record format is indexed and embedded again, never mixed. (How
the lexical and dense lists weigh per query: ``test_ranking.py``.)"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.code.cache import CachedChunk
from service.code.chunker import MAX_UNIT_LINES, chunk_file
from service.code.context import DOC_WEIGHT, NAME_WEIGHT, RECORD_FORMAT, chunk_terms, docstring, embed_text_of
from service.code.ingest import chunk_record, lexical_documents
from service.code.model import COLLECTION, SURFACE_NAME, workspace_filter
from service.code.state import close_workspaces, workspaces_of
from service.code.workspace import SearchConfig, new_workspace
from service.engine.embeddings import load_sentence_transformer, local_model_path
from service.engine.records import DONE
from service.settings import Settings
from service.state import ENGINE
from tests.code.conftest import variant
from tests.code.helpers import register, search, wait_embedded, wait_indexed
from tests.helpers import running_app

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
MODEL = "local/all-MiniLM-L6-v2"
MODEL_WINDOW = 256  # word pieces the model reads, [CLS] and [SEP] included


@pytest.fixture
def client(shared_client: TestClient[Any, Any]) -> TestClient[Any, Any]:
    return shared_client


def big_class() -> str:
    """A class long enough to be cut into its members, one of them a long documented method."""
    filler = "".join(f"\n    def helper_{i}(self):\n        return {i}\n" for i in range(MAX_UNIT_LINES // 3))
    body = "".join(f"        total += self.values[{i}] * weight_{i}\n" for i in range(90))
    return (
        "class WorkspaceIndex:\n"
        '    """Every chunk of a workspace."""\n'
        f"{filler}\n"
        "    def parse_searchBody(self, body):\n"
        '        """Read the search body a caller posted.\n\n        Raises on a missing query.\n        """\n'
        "        total = 0\n"
        f"{body}"
        "        return total\n"
    )


def cached(chunk: Any) -> CachedChunk:
    return CachedChunk(f"ws|{chunk.path}|{chunk.content_hash}", chunk.path, chunk.start_line, chunk.end_line, chunk.kind.value, chunk.symbol, chunk.content_hash, "h", chunk.text)


def test_a_chunk_record_leads_with_its_context_and_weighs_names_and_docstrings(tmp_path: Path) -> None:
    chunks = chunk_file("service/code/search.py", big_class())
    method = next(c for c in chunks if c.symbol == "WorkspaceIndex.parse_searchBody")
    embedded = embed_text_of(method.path, method.symbol, method.text)  # what embedding reads from the cache (texts.py)

    assert embedded == f"service code search: workspace index parse search body\n{method.text}", "context first, then the code"

    # The method is longer than the model reads: what it reads starts with the context.
    tokenizer = load_sentence_transformer(local_model_path("all-MiniLM-L6-v2")).tokenizer
    pieces = tokenizer.tokenize(embedded)
    assert len(pieces) > MODEL_WINDOW
    read = tokenizer.convert_tokens_to_string(pieces[: MODEL_WINDOW - 2])
    for words in ("service code search", "workspace index parse search body", "read the search body a caller posted"):
        assert words in read

    record = chunk_record(new_workspace("user:alice", tmp_path, SearchConfig()), cached(method).key, method.path, "h")
    assert record.terms == record.embed_text == "" and record.content_hash == "h", "the store holds no text of a chunk: the cache and the lexical index do"
    terms = next(lexical_documents([cached(method)]))[3].split()
    assert terms.count("searchbody") == NAME_WEIGHT and terms.count("posted") == DOC_WEIGHT > 1, "names and docstrings weigh more"
    assert terms.count("workspace") == NAME_WEIGHT - 1, "the enclosing class weighs as a name, though not in the code"
    assert terms.count("total") == chunk_terms("x.py", None, method.text).split().count("total"), "the code counts once"


def test_a_comment_above_a_declaration_is_its_docstring() -> None:
    source = "// Opens the spool directory\n// and locks it.\n//\n// Details.\nfunc OpenSpool(dir string) error {\n\treturn nil\n}\n"
    chunk = chunk_file("internal/spool/open.go", source)[0]
    assert docstring(chunk.text) == "Opens the spool directory and locks it.", "the first paragraph, markers dropped"
    assert embed_text_of(chunk.path, chunk.symbol, chunk.text).startswith("internal spool open: open spool\n// Opens the spool directory")
    terms = next(lexical_documents([cached(chunk)]))[3].split()
    assert terms.count("lock") == DOC_WEIGHT and terms.count("detail") == 1


LOG_ROTATION = '''
def roll_over(handler):
    """Rotate the log files once they grow too large."""
    handler.stream.close()
    handler.count += 1
'''
# The query's words once each, as in the docstring above, but only in the code, in a chunk as short.
BODY_ONLY = '''
def sweep(handler):
    handler.log_files.rotate()
    handler.stream = None
    handler.count = 0
'''


@IN_MODULE_LOOP
async def test_a_docstring_match_outranks_a_body_only_match(client: TestClient[Any, Any], module_settings: Settings) -> None:
    root = module_settings.allowed_roots[0] / f"docs-{uuid.uuid4().hex[:8]}"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "handlers.py").write_text(textwrap.dedent(LOG_ROTATION))
    (root / "pkg" / "cleanup.py").write_text(textwrap.dedent(BODY_ONLY))
    workspace = await register(client, root)
    await wait_indexed(client, workspace["id"])
    found = await search(client, workspace["id"], query="rotate log files", mode="lexical")
    paths = list(dict.fromkeys(r["path"] for r in found["results"]))
    assert paths == ["pkg/handlers.py", "pkg/cleanup.py"]


@IN_MODULE_LOOP
async def test_a_workspace_of_an_older_record_format_is_indexed_and_embedded_again(module_settings: Settings) -> None:
    settings = variant(module_settings, "format")
    root = module_settings.allowed_roots[0] / f"format-{uuid.uuid4().hex[:8]}"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "handlers.py").write_text(textwrap.dedent(LOG_ROTATION))
    async with running_app(settings) as client:
        workspace = await register(client, root, embeddings_model=MODEL, prewarm_embeddings=True)
        wid = workspace["id"]
        before = await wait_embedded(client, wid)
        engine = client.server.app[ENGINE]
        registered = workspaces_of(engine).registry.get(wid)
        assert registered is not None
        runtime = await workspaces_of(engine).runtime(registered)
        records = engine.records(SURFACE_NAME)
        embedder = engine.embedders.get(MODEL)

        # What an older release left: other texts and terms, vectors of them, no format mark.
        old = [point async for point in records.scroll_all(workspace_filter(registered))]
        stale = [1.0] + [0.0] * (embedder.dimensions - 1)
        for point in old:
            key = str(point.payload["key"])
            await records.set_payload([key], {"embed_text": f"{point.payload['path']}\n(old)", "terms": "old"})
            await records.update_vectors([(key, {embedder.vector_name: stale})])
        runtime.cache.set_meta("record_format", RECORD_FORMAT - 1)
        close_workspaces(engine)  # as a restart would: the next use opens the cache again

        await search(client, wid, query="rotate", mode="lexical")
        after = await wait_embedded(client, wid)
        assert after["chunks"] == before["chunks"]
        fresh = await engine.store.retrieve(COLLECTION, [point.id for point in old], with_vectors=True)
        assert sorted(p.payload["key"] for p in fresh) == sorted(p.payload["key"] for p in old), "same chunks, same keys"
        cached = (await workspaces_of(engine).runtime(registered)).cache.by_keys([str(p.payload["key"]) for p in fresh])
        texts = [embed_text_of(c.path, c.symbol, c.text) for c in (cached[str(p.payload["key"])] for p in fresh)]
        vectors = await embedder.embed_documents(texts)
        for point, text, expected in zip(fresh, texts, vectors, strict=True):
            assert text.startswith("pkg handlers: roll over\ndef roll_over(handler):")
            assert not point.payload.get("embed_text"), "the old text is gone from the point; the cache holds the new one"
            assert point.payload["embed_state"] == DONE and point.payload["embedded_hash"] == point.payload["content_hash"]
            assert sum(a * b for a, b in zip(point.vectors[embedder.vector_name], expected, strict=True)) > 0.99, "embedded anew"
        found = await search(client, wid, query="rotate log files", mode="lexical")
        assert found["results"][0]["path"] == "pkg/handlers.py"
