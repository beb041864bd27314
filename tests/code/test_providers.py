"""A workspace configured with an OpenAI-compatible embeddings model uses that endpoint and its
dimensions (a real local HTTP server the test starts); when the endpoint fails, search answers
lexically with a notice instead of failing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from service.settings import ProviderSettings, Settings
from tests.code.conftest import variant
from tests.code.helpers import register, running, search, status, wait_embedded

pytestmark = pytest.mark.asyncio(loop_scope="module")

DIMENSIONS = 32
CALLS = web.AppKey("calls", list)
FAILING = web.AppKey("failing", dict)


def bag_of_words_vector(text: str) -> list[float]:
    """A deterministic embedding in which texts sharing words are close: hashed word counts."""
    vector = [0.0] * DIMENSIONS
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.strip(".,:()\"'").encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def embeddings_app() -> web.Application:
    app = web.Application()
    app[CALLS] = []
    app[FAILING] = {"on": False}

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        request.app[CALLS].append(body)
        if request.app[FAILING]["on"]:
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        data = [{"object": "embedding", "index": i, "embedding": bag_of_words_vector(t)} for i, t in enumerate(body["input"])]
        return web.json_response({"object": "list", "data": data, "model": body["model"]})

    app.router.add_post("/v1/embeddings", handler)
    return app


async def test_openai_compatible_model_and_its_failures(module_settings: Settings, tree: Path) -> None:
    server = TestServer(embeddings_app())
    await server.start_server()
    try:
        provider = ProviderSettings(id="acme", base_url=str(server.make_url("/v1")), api_key="sk-test")
        async with running(variant(module_settings, "provider", providers=(provider,), embeddings_timeout_s=2.0)) as client:
            workspace = await register(client, tree, embeddings_model="acme/code-embed", embeddings_dimensions=DIMENSIONS)
            wid = workspace["id"]
            found = await search(client, wid, query="refund payment money back customer", path="src/pkg")
            assert found["meta"]["mode"] == "hybrid", found["notices"]
            assert found["meta"]["embedded_now"] == found["meta"]["scope"]["chunks"] > 0
            assert found["results"][0]["symbol"] == "refund_payment"
            calls = server.app[CALLS]
            assert calls and all(call["model"] == "code-embed" and call["dimensions"] == DIMENSIONS for call in calls)
            assert (await status(client, wid))["embedded"] == found["meta"]["scope"]["chunks"]

            # Warm the whole workspace through the background embed jobs, on the same endpoint.
            registered = await register(client, tree, embeddings_model="acme/code-embed", embeddings_dimensions=DIMENSIONS, prewarm_embeddings=True)
            assert registered["id"] == wid
            warmed = await wait_embedded(client, wid)
            assert warmed["warm"] is True

            server.app[FAILING]["on"] = True
            failed = await search(client, wid, query="a query the endpoint never saw", path="src/pkg")
            assert failed["meta"]["mode"] == "lexical" and failed["meta"]["fallback"] == "embeddings_unavailable"
            assert "HTTP 500" in failed["notices"][0] and failed["notices"][0].endswith("lexical results only")
            assert failed["output"].splitlines()[-1].startswith("notice: embeddings unavailable")
    finally:
        await server.close()
