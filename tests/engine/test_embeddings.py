"""Embedders: the packaged local model, an OpenAI-compatible endpoint (a real local HTTP server), failures."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from service.engine.embeddings import EmbedderRegistry, OpenAIEmbedder, vector_name
from service.errors import EmbeddingUnavailable
from service.settings import ProviderSettings, Settings


def fake_vector(text: str, dims: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i % len(digest)] / 255.0 for i in range(dims)]


CALLS = web.AppKey("calls", list)


def embeddings_app(mode: str, dims: int = 8) -> web.Application:
    """An OpenAI-compatible /v1/embeddings server: `ok`, `error` (HTTP 500) or `hang` (never answers in time)."""
    calls: list[dict[str, object]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        calls.append(body)
        if mode == "error":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if mode == "hang":
            await asyncio.sleep(30)
        inputs = body["input"]
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, dims)} for i, t in enumerate(inputs)]
        return web.json_response({"object": "list", "data": list(reversed(data)), "model": body["model"]})

    app = web.Application()
    app[CALLS] = calls
    app.router.add_post("/v1/embeddings", handler)
    return app


@pytest.fixture
async def endpoint(request: pytest.FixtureRequest) -> AsyncIterator[TestServer]:
    server = TestServer(embeddings_app(request.param))
    await server.start_server()
    yield server
    await server.close()


def registry_for(server: TestServer, *, timeout_s: float = 1.0) -> EmbedderRegistry:
    settings = Settings(
        embeddings_model="test/embed-small",
        providers=(ProviderSettings(id="test", base_url=str(server.make_url("/v1")), api_key="sk-test"),),
        embeddings_timeout_s=timeout_s,
    )
    return EmbedderRegistry(settings)


@pytest.mark.parametrize("endpoint", ["ok"], indirect=True)
async def test_openai_compatible_endpoint_embeds_in_input_order(endpoint: TestServer) -> None:
    registry = registry_for(endpoint)
    embedder = registry.get()
    vectors = await embedder.embed_documents(["alpha", "beta"])
    assert vectors == [fake_vector("alpha", 8), fake_vector("beta", 8)]
    assert embedder.dimensions == 8 and embedder.vector_name == vector_name("test/embed-small", 8)
    first = await embedder.embed_query("gamma")
    again = await embedder.embed_query("gamma")
    assert first == again
    calls = endpoint.app[CALLS]
    assert [c["input"] for c in calls] == [["alpha", "beta"], ["gamma"]], "the second query came from the cache"
    assert calls[0]["model"] == "embed-small"
    await registry.close()


@pytest.mark.parametrize("endpoint", ["error"], indirect=True)
async def test_endpoint_error_becomes_embedding_unavailable(endpoint: TestServer) -> None:
    registry = registry_for(endpoint)
    with pytest.raises(EmbeddingUnavailable, match="HTTP 500"):
        await registry.get().embed_query("anything")
    await registry.close()


@pytest.mark.parametrize("endpoint", ["hang"], indirect=True)
async def test_endpoint_timeout_becomes_embedding_unavailable(endpoint: TestServer) -> None:
    registry = registry_for(endpoint, timeout_s=0.3)
    started = asyncio.get_running_loop().time()
    with pytest.raises(EmbeddingUnavailable, match="timed out"):
        await registry.get().embed_query("anything")
    assert asyncio.get_running_loop().time() - started < 5
    await registry.close()


async def test_unreachable_endpoint_becomes_embedding_unavailable() -> None:
    embedder = OpenAIEmbedder("x/y", "http://127.0.0.1:9/v1", api_key=None, dimensions=None, timeout_s=1)
    with pytest.raises(EmbeddingUnavailable):
        await embedder.embed_query("q")
    await embedder.close()


async def test_local_minilm_embeds_normalized_384d_and_ranks_by_meaning() -> None:
    embedder = EmbedderRegistry(Settings()).default
    assert embedder is not None
    docs = await embedder.embed_documents(["send an email to a colleague", "compute the square root of a number"])
    query = np.array(await embedder.embed_query("write a mail message"))
    matrix = np.array(docs)
    assert matrix.shape == (2, 384)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-3)
    scores = matrix @ query
    assert scores[0] > scores[1]
    assert embedder.state == "ready"


def test_unknown_models_are_unavailable_not_crashes() -> None:
    registry = EmbedderRegistry(Settings())
    with pytest.raises(EmbeddingUnavailable, match="unknown local model"):
        registry.get("local/no-such-model")
    with pytest.raises(EmbeddingUnavailable, match="not configured"):
        registry.get("nobody/model")
