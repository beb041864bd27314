"""A real HTTP server standing in for the remote model endpoints, which the fault tests make fail.

It answers OpenAI-compatible ``POST /v1/embeddings`` and TEI-style ``POST /rerank``. ``mode`` picks
its behaviour for both: ``ok`` answers, ``error`` answers HTTP 500, ``hang`` never answers (until
the client gives up; the server counts the requests it saw cancelled).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.embedding_server import embedding_data
from tests.helpers import stand_in

DIMENSIONS = 24


@dataclass
class FaultyEndpoint:
    mode: str = "ok"
    calls: int = 0
    cancelled: int = 0
    url: str = ""
    _served: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/rerank", self._rerank)
        # A client that gives up cancels the handler (``stand_in``), so hangs are counted.
        self.url = await self._served.enter_async_context(stand_in(app))

    async def close(self) -> None:
        await self._served.aclose()

    async def _fault(self) -> web.Response | None:
        self.calls += 1
        if self.mode == "error":
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        if self.mode == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return None

    async def _embeddings(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        fault = await self._fault()
        if fault is not None:
            return fault
        data = embedding_data(body["input"], DIMENSIONS)
        return web.json_response({"object": "list", "data": data, "model": body["model"]})

    async def _rerank(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        fault = await self._fault()
        if fault is not None:
            return fault
        return web.json_response([{"index": i, "score": 0.5} for i in range(len(body["texts"]))])
