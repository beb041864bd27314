"""A workspace configured with an OpenAI-compatible embeddings model uses that endpoint and its
dimensions (a real local HTTP server the test starts); when the endpoint fails, search answers
lexically with a notice instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from service.settings import ProviderSettings, Settings
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_embedded
from tests.embedding_server import CALLS, DIMENSIONS, FAILING, embeddings_app
from tests.helpers import running_app

pytestmark = pytest.mark.asyncio(loop_scope="module")

async def test_openai_compatible_model_and_its_failures(module_settings: Settings, tree: Path) -> None:
    server = TestServer(embeddings_app())
    await server.start_server()
    try:
        provider = ProviderSettings(id="acme", base_url=str(server.make_url("/v1")), api_key="sk-test")
        async with running_app(variant(module_settings, "provider", providers=(provider,), embeddings_timeout_s=2.0)) as client:
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
