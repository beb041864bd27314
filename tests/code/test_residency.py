"""Memory that follows use: a workspace is opened by a search or an index run, closed after
``workspace_idle_close_s`` without one, opened again by the next search with the same answers, and
after a restart stays closed until it is searched; the status says which, and reading it opens nothing."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from service.admin.indexstate import open_workspaces
from service.code.state import workspaces_of
from service.settings import Settings
from service.state import ENGINE
from tests.code.conftest import variant
from tests.code.helpers import register, search, status, wait_indexed
from tests.helpers import running_app, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

IDLE_S = 0.5


def answer_of(found: dict[str, Any]) -> list[tuple[str, int]]:
    return [(result["path"], result["line"]) for result in found["results"]]


async def wait_closed(client: TestClient[Any, Any], wid: str) -> dict[str, Any]:
    async def closed() -> bool:
        return (await status(client, wid))["resident"]["open"] is False

    await wait_until(closed, timeout_s=10)
    return await status(client, wid)


async def test_an_idle_workspace_closes_and_the_next_search_reopens_it(module_settings: Settings, tree: Path) -> None:
    settings = variant(module_settings, "idle", embeddings_model=None, workspace_watch=True, workspace_idle_close_s=IDLE_S)
    async with running_app(settings) as client:
        wid = (await register(client, tree))["id"]
        await wait_indexed(client, wid)
        first = await search(client, wid, query="hash_password", mode="lexical")
        assert answer_of(first), first
        opened = await status(client, wid)
        assert opened["resident"]["closes_after_s"] == IDLE_S and opened["resident"]["last_used"] is not None
        shown = {row["id"]: row for row in open_workspaces(client.app[ENGINE])}
        assert shown[wid]["freshness"] == "watch" and shown[wid]["last_used_ms"] is not None, "the dashboard lists it as open"

        closed = await wait_closed(client, wid)
        assert workspaces_of(client.app[ENGINE]).opened(wid) is None
        assert wid not in {row["id"] for row in open_workspaces(client.app[ENGINE])}

        async def unwatched() -> bool:
            return not any(thread.name == f"watch {tree.resolve()}" for thread in threading.enumerate())

        await wait_until(unwatched, timeout_s=10)
        assert closed["state"] == "ready" and closed["files"] == opened["files"] and closed["chunks"] == opened["chunks"]
        assert closed["freshness"] == "watch", "a closed workspace is watched again when it opens"

        again = await search(client, wid, query="hash_password", mode="lexical")
        assert answer_of(again) == answer_of(first)
        reopened = await status(client, wid)
        assert reopened["resident"]["open"] is True and reopened["resident"]["last_used"] >= opened["resident"]["last_used"]


async def test_searches_racing_the_close_all_answer_the_same(module_settings: Settings, tree: Path) -> None:
    """The idle period is shorter than the pauses between searches: the workspace closes between
    most of them and some searches arrive while it closes; none fails and none answers otherwise."""
    settings = variant(module_settings, "race", embeddings_model=None, workspace_watch=True, workspace_idle_close_s=0.05)
    async with running_app(settings) as client:
        wid = (await register(client, tree))["id"]
        await wait_indexed(client, wid)
        expected = answer_of(await search(client, wid, query="refund_payment", mode="lexical"))
        assert expected
        closes = 0
        for round_ in range(12):
            answers = await asyncio.gather(*(search(client, wid, query="refund_payment", mode="lexical") for _ in range(3)))
            assert all(answer_of(answer) == expected for answer in answers), round_
            # Pauses from none to three idle periods: some searches land as it closes, and the longest
            # pauses leave the closing task (ticking every idle period) a whole tick to close it in.
            await asyncio.sleep(0.05 * (round_ % 4))
            closes += (await status(client, wid))["resident"]["open"] is False
        assert closes > 0, "the workspace never closed between searches"


async def test_after_a_restart_no_workspace_is_open_until_searched(module_settings: Settings, tree: Path) -> None:
    settings = variant(module_settings, "restart", embeddings_model=None, workspace_watch=True)
    other = shutil.copytree(tree, tree.parent / f"{tree.name}-other")
    async with running_app(settings) as client:
        wids = [(await register(client, root))["id"] for root in (tree, other)]
        for wid in wids:
            await wait_indexed(client, wid)
        before = answer_of(await search(client, wids[0], query="hash_password", mode="lexical"))
    async with running_app(settings) as client:
        workspaces = workspaces_of(client.app[ENGINE])
        for wid in wids:
            state = await status(client, wid)
            assert state["resident"] == {"open": False, "last_used": None, "closes_after_s": settings.workspace_idle_close_s}
            assert state["state"] == "ready" and state["files"] > 0
            assert workspaces.opened(wid) is None, "reading the status opened nothing"
        after = answer_of(await search(client, wids[0], query="hash_password", mode="lexical"))
        assert after == before
        assert (await status(client, wids[0]))["resident"]["open"] is True
        assert workspaces.opened(wids[1]) is None


async def test_an_open_a_caller_gives_up_on_goes_on_for_the_next(module_settings: Settings, tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Healing a workspace on open (its trigram index rebuilt from the chunk cache) can outlast one
    request's deadline: the caller that gives up leaves the open running, and the next caller gets
    that open's result instead of starting the rebuild over."""
    settings = variant(module_settings, "giveup", embeddings_model=None, workspace_watch=False)
    async with running_app(settings) as client:
        wid = (await register(client, tree))["id"]
        await wait_indexed(client, wid)
        before = answer_of(await search(client, wid, query="hash_password", mode="lexical"))
        workspace = workspaces_of(client.app[ENGINE]).registry.get(wid)
        assert workspace is not None
        cache_dir = workspace.cache_dir(settings)
    shutil.rmtree(cache_dir / "trigram")  # what a crash between the two writes leaves apart
    async with running_app(settings) as client:
        workspaces = workspaces_of(client.app[ENGINE])
        caplog.clear()
        first = asyncio.create_task(workspaces.runtime(workspace))

        def rebuilding() -> int:
            return sum("lexical index and chunk cache disagree" in record.getMessage() for record in caplog.records)

        for _ in range(2000):
            if rebuilding() or first.done():
                break
            await asyncio.sleep(0)
        assert rebuilding() == 1 and not first.done(), "the rebuild had not started, or ended before the caller gave up"
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        runtime = await workspaces.runtime(workspace)
        assert rebuilding() == 1, "the second caller started the rebuild over"
        assert runtime.trigram.num_docs == runtime.cache.chunk_count() > 0
        assert answer_of(await search(client, wid, query="hash_password", mode="lexical")) == before


async def test_a_trigram_write_the_cache_never_got_is_put_back_on_open(module_settings: Settings, tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A process killed between a change's trigram commit and its cache write leaves the trigram
    index ahead of the cache. The state is built here as that kill leaves it (the intent noted, the
    trigram index given a file's new chunk, the cache not), since the kill cannot be aimed between
    the two writes: the next open puts that file back as the cache has it, and rebuilds nothing."""
    from service.code.cache import ChunkCache
    from service.code.trigram import TrigramIndex

    settings = variant(module_settings, "intent", embeddings_model=None, workspace_watch=False)
    async with running_app(settings) as client:
        wid = (await register(client, tree))["id"]
        await wait_indexed(client, wid)
        before = answer_of(await search(client, wid, query="hash_password", mode="lexical"))
        workspace = workspaces_of(client.app[ENGINE]).registry.get(wid)
        assert workspace is not None and before
        cache_dir = workspace.cache_dir(settings)
    cache = ChunkCache(cache_dir)
    try:
        path = sorted(cache.paths())[0]
        cache.note_trigram_pending([path])
        cached = cache.chunk_count()
    finally:
        cache.close()
    with TrigramIndex.open(cache_dir / "trigram") as index:
        index.delete_paths([path])
        index.add([("never-cached", path, "zebra_quagga_unicorn = 1", "zebra quagga unicorn", 1, None), ("never-cached-2", path, "okapi_narwhal = 2", "okapi narwhal", 2, None)])
        index.commit()
        assert index.num_docs != cached
    caplog.clear()
    async with running_app(settings) as client:
        assert answer_of(await search(client, wid, query="hash_password", mode="lexical")) == before
        assert not answer_of(await search(client, wid, query="zebra_quagga_unicorn", mode="lexical"))
        runtime = workspaces_of(client.app[ENGINE]).opened(wid)
        assert runtime is not None and runtime.trigram.num_docs == runtime.cache.chunk_count() == cached
        assert runtime.cache.trigram_pending() == []
    messages = [record.getMessage() for record in caplog.records]
    assert any("put back its files" in message for message in messages), messages
    assert not any("rebuilding it" in message for message in messages), messages


async def test_points_an_earlier_release_left_lose_their_texts_and_cold_ones_go_on_open(module_settings: Settings, tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A workspace indexed by a release that kept a point for every chunk, embedded or not, with its
    embedded text and BM25 terms (the state is made here as that release left it: a scope embedded
    by a hybrid search, the other chunks given cold points, texts written back into every point, the
    cache's notes removed): the next open deletes the cold points, empties the embedded ones (their
    vectors kept), keeps the answers, and does it only once."""
    from service.code.cache import CACHE_FILE
    from service.code.ingest import write_points
    from service.code.model import workspace_filter
    from service.code.state import COLD_POINTS, STORE_TEXTS
    from service.engine.records import DONE
    from tests.code.helpers import wait_model_ready

    settings = variant(module_settings, "oldterms", workspace_watch=False)
    async with running_app(settings) as client:
        engine = client.app[ENGINE]
        wid = (await register(client, tree))["id"]
        await wait_indexed(client, wid)
        await wait_model_ready(client)
        embedded = (await search(client, wid, query="give the customer their money back", path="src/pkg"))["meta"]["embedded_now"]
        before = answer_of(await search(client, wid, query="hash_password", mode="lexical"))
        workspaces = workspaces_of(engine)
        workspace = workspaces.registry.get(wid)
        assert workspace is not None
        chunks = (await status(client, wid))["chunks"]
        assert 0 < embedded < chunks
        records = workspaces.records
        points = [point async for point in records.scroll_all(workspace_filter(workspace))]
        assert len(points) == embedded and not any(point.payload.get("terms") or point.payload.get("embed_text") for point in points), "embedded chunks alone have points, and no text"
        runtime = await workspaces.runtime(workspace)
        assert await write_points(engine, workspace, runtime.cache, queue=False) == chunks - embedded
        keys = [str(point.payload["key"]) async for point in records.scroll_all(workspace_filter(workspace))]
        await records.set_payload(keys, {"terms": "hash password old terms", "embed_text": "def hash_password(): ..."})
    with sqlite3.connect(workspace.cache_dir(settings) / CACHE_FILE) as db:
        db.execute("DELETE FROM meta WHERE name IN (?, ?)", (STORE_TEXTS, COLD_POINTS))
    async with running_app(settings) as client:
        caplog.clear()
        assert answer_of(await search(client, wid, query="hash_password", mode="lexical")) == before
        records = workspaces_of(client.app[ENGINE]).records
        points = [point async for point in records.scroll_all(workspace_filter(workspace))]
        assert len(points) == embedded and all(point.payload["embed_state"] == DONE for point in points), "the cold points are gone"
        assert not any(point.payload.get("terms") or point.payload.get("embed_text") for point in points)
        assert (await status(client, wid))["embedded"] == embedded, "the vectors stay"
        assert sum("BM25 terms out of the store" in r.getMessage() for r in caplog.records) == 1, "emptied once"
        assert sum("unembedded chunks" in r.getMessage() for r in caplog.records) == 1, "dropped once"
    async with running_app(settings) as client:
        caplog.clear()
        assert answer_of(await search(client, wid, query="hash_password", mode="lexical")) == before
        assert not any("BM25 terms out of the store" in r.getMessage() or "unembedded chunks" in r.getMessage() for r in caplog.records), "only once"


async def test_counting_a_workspace_without_a_cache_here_creates_none(module_settings: Settings, tree: Path) -> None:
    """A registered workspace this process never indexed (another node's, or not built yet): its
    counts come from the store, and counting leaves no cache behind."""
    from service.code.cache import CACHE_FILE
    from service.code.workspace import SearchConfig

    settings = variant(module_settings, "nocache", embeddings_model=None, workspace_watch=False)
    async with running_app(settings) as client:
        workspaces = workspaces_of(client.app[ENGINE])
        workspace, created = await workspaces.register("user:alice", tree, SearchConfig())
        assert created
        assert await workspaces.counts(workspace) == {"chunks": 0, "embedded": 0, "pending": 0, "cold": 0}
        assert not (workspace.cache_dir(settings) / CACHE_FILE).exists(), "a count opened no cache"
