"""The tests' OpenAI-compatible embeddings model: a deterministic hashed bag of words, served by a real HTTP app.

No second sentence-transformers model exists offline, so tests that need a remote provider (a
workspace's own model, a second default model, a failing endpoint) start ``embeddings_app`` on a
local port. Texts that share words get close vectors, so rankings stay meaningful.
"""

from __future__ import annotations

import hashlib

from aiohttp import web

DIMENSIONS = 32
CALLS = web.AppKey("calls", list)
FAILING = web.AppKey("failing", dict)


def bag_of_words_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """A deterministic unit vector in which texts sharing words lie close: hashed word counts."""
    vector = [0.0] * dimensions
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.strip(".,:;()\"'").encode()).hexdigest(), 16) % dimensions] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def embedding_data(texts: list[str], dimensions: int = DIMENSIONS) -> list[dict[str, object]]:
    """The ``data`` list of a ``/v1/embeddings`` answer for ``texts``."""
    return [{"object": "embedding", "index": i, "embedding": bag_of_words_vector(text, dimensions)} for i, text in enumerate(texts)]


def embeddings_app() -> web.Application:
    """``POST /v1/embeddings``; vectors of the requested ``dimensions`` (default ``DIMENSIONS``); logs
    each request body in ``app[CALLS]``; answers 500 while ``app[FAILING]["on"]``."""
    app = web.Application()
    app[CALLS] = []
    app[FAILING] = {"on": False}

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        request.app[CALLS].append(body)
        if request.app[FAILING]["on"]:
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        # As OpenAI's text-embedding-3 models do: "dimensions" asks for vectors of that size.
        dimensions = body.get("dimensions", DIMENSIONS)
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 1 <= dimensions <= 4096:
            return web.json_response({"error": {"message": "dimensions must be an integer from 1 to 4096"}}, status=400)
        return web.json_response({"object": "list", "data": embedding_data(body["input"], dimensions), "model": body["model"]})

    app.router.add_post("/v1/embeddings", handler)
    return app
