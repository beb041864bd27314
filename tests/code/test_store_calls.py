"""A hybrid code search asks the store for its dense pass alone, and only for the payload field it
reads; a lexical one never searches the store (BM25 is the workspace's lexical index).

The store is the real embedded one; the test records the calls the search makes on it (a wrapper
that passes every call through), the only way to see how many calls an answer took.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.code.semantic import SEMANTIC_FIELDS
from service.engine.store import DenseQuery
from service.settings import Settings
from service.state import ENGINE
from tests.code.helpers import register, search, wait_indexed, wait_model_ready
from tests.code.trees import write_tree

pytestmark = pytest.mark.asyncio(loop_scope="module")

SEARCHES = ("search_batch", "search_dense", "search_text", "search_hybrid")


@contextmanager
def recorded(store: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every search call made on ``store`` while the block runs: (method, its queries)."""
    calls: list[tuple[str, Any]] = []
    originals: dict[str, Callable[..., Any]] = {name: getattr(store, name) for name in SEARCHES}

    def passing(name: str) -> Callable[..., Any]:
        async def call(collection: str, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[0] if name == "search_batch" else args))
            return await originals[name](collection, *args, **kwargs)

        return call

    for name in SEARCHES:
        setattr(store, name, passing(name))
    try:
        yield calls
    finally:
        for name in SEARCHES:
            delattr(store, name)  # the class's own methods again


async def test_a_hybrid_search_asks_the_store_only_for_dense_keys_and_a_lexical_one_not_at_all(shared_client: TestClient[Any, Any], module_settings: Settings) -> None:
    tree = write_tree(module_settings.allowed_roots[0] / f"calls-{uuid.uuid4().hex[:8]}")
    workspace = await register(shared_client, tree)
    await wait_indexed(shared_client, workspace["id"])
    await wait_model_ready(shared_client)
    store = shared_client.server.app[ENGINE].store
    with recorded(store) as calls:
        found = await search(shared_client, workspace["id"], query="give the customer their money back", path="src/pkg")
    assert found["meta"]["mode"] == "hybrid", found["notices"]
    assert found["results"] and {r["source"] for r in found["results"]} & {"semantic", "merged"}
    assert [name for name, _ in calls] == ["search_batch"]
    queries = calls[0][1]
    assert [type(q) for q in queries] == [DenseQuery]
    assert queries[0].fields == SEMANTIC_FIELDS == ("key",)
    assert {r["source"] for r in found["results"]} & {"lexical", "merged"}, "the lexical pass found nothing"

    with recorded(store) as calls:
        lexical = await search(shared_client, workspace["id"], query="give the customer their money back", path="src/pkg", mode="lexical")
    assert lexical["meta"]["mode"] == "lexical" and lexical["results"]
    assert calls == []
