"""A real OpenAI-compatible ``/v1/embeddings`` server for the migration tests: the second model.

No second sentence-transformers model exists offline, so the new default model is this HTTP
endpoint (an OpenAI-compatible provider, the second kind of model the service accepts). It embeds with the hashed bag of words of
``tests/embedding_server.py``, logs every request, and can hold document batches at a gate so
that a test can act while a fill is half done.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from service.settings import ProviderSettings, Settings
from tests.embedding_server import DIMENSIONS, embedding_data

__all__ = ["DIMENSIONS", "MODEL_B", "ModelServer", "settings_b"]

MODEL_B = "acme/embed-b"  # the model this server is configured as


def settings_b(settings: Settings, server: ModelServer) -> Settings:
    """``settings`` with ``MODEL_B`` (served by ``server``) as the configured default model."""
    return replace(settings, embeddings_model=MODEL_B, providers=(ProviderSettings(id="acme", base_url=server.base_url),))


@dataclass
class ModelServer:
    """The server's state: requests seen, and the gate (``hold_after`` requests pass, later ones wait)."""

    requests: list[list[str]] = field(default_factory=list)
    hold_after: int | None = None
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    server: TestServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/v1"))

    def document_batches(self) -> list[list[str]]:
        """Every request but the migration's dimension probe (the tests send queries only after the gate)."""
        return [inputs for inputs in self.requests if inputs != ["dimension probe"]]

    def embedded_texts(self) -> list[str]:
        return [text for inputs in self.requests for text in inputs]

    async def handle(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        inputs = list(body["input"])
        self.requests.append(inputs)
        if self.hold_after is not None and inputs != ["dimension probe"] and len(self.document_batches()) > self.hold_after:
            self.held.set()
            await self.release.wait()
        return web.json_response({"object": "list", "data": embedding_data(inputs), "model": body["model"]})

    async def start(self) -> ModelServer:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.handle)
        self.server = TestServer(app)
        await self.server.start_server()
        return self

    async def close(self) -> None:
        self.release.set()
        if self.server is not None:
            await self.server.close()
