"""The engine runtime: one object holding the store, embedders, job queue and Redis of a process.

Opened by ``service.engine.startup.open_engine`` (the service's cleanup context, ``agentsearch
worker`` and the one-shot CLI commands); surfaces register their collections on it so the sweeper
and status pages find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from service.engine.embeddings import EmbedderRegistry
from service.engine.queue import JobQueue, deserialize, serialize
from service.engine.records import Collection, RecordIndex, RecordTexts
from service.engine.serving import SERVING_REFRESH_S, refresh_serving
from service.engine.store import CollectionSpec, Store, StoreError, VectorSpec
from service.ratelimit import RateLimiter
from service.settings import Settings

if TYPE_CHECKING:
    from service.engine.surface import SurfaceSearch

log = logging.getLogger(__name__)


@dataclass
class Engine:
    """Everything a request handler or a job needs; built once per process."""

    settings: Settings
    store: Store
    embedders: EmbedderRegistry
    redis: ArqRedis
    queue: JobQueue
    jwt_secret: str
    rate_limiter: RateLimiter
    surfaces: dict[str, RecordIndex] = field(default_factory=dict)
    """Surface name -> the record index of its collection."""
    searches: dict[str, SurfaceSearch] = field(default_factory=dict)
    """Surface name -> its search (``service.engine.surface.run_search`` runs it)."""
    state: dict[str, Any] = field(default_factory=dict)
    """Surface name -> what the surface keeps open on this engine, put there by its ``on_open``."""
    closers: list[Callable[[Engine], Awaitable[None]]] = field(default_factory=list)
    """The surfaces' ``on_close`` hooks, run first by ``close`` (last opened, first closed)."""
    other_tenant_collections: list[str] = field(default_factory=list)
    """Collections besides the surfaces' own whose points carry a tenant (``SurfaceDef.tenant_collections``)."""
    _vectors: set[tuple[str, str]] = field(default_factory=set)
    _serving_refresh: asyncio.Task[None] | None = None

    async def register(
        self, surface: str, spec: CollectionSpec, analyzed_fields: Sequence[str] = (), *, bulk: bool = False, texts: RecordTexts | None = None
    ) -> RecordIndex:
        """Create the surface's collection if missing and remember it (sweeper, index status);
        ``bulk``: its records' embed jobs go to the bulk queue; ``texts``: where the surface keeps
        its records' texts instead of the store's points."""
        await self.store.ensure_collection(spec)
        default = self.embedders.default
        if default is not None and default.dimensions:
            # Create the default model's vector up front so dense search works before the first embed.
            await self.ensure_vector(spec.name, VectorSpec(default.vector_name, default.dimensions))
        index = RecordIndex(self, surface, spec, analyzed_fields, bulk=bulk, texts=texts)
        self.surfaces[surface] = index
        return index

    async def open_collection(self, spec: CollectionSpec) -> Collection:
        """A collection besides a surface's own (plain payload points, not embedded), created if missing."""
        await self.store.ensure_collection(spec)
        return Collection(self, spec)

    async def ensure_vector(self, collection: str, vector: VectorSpec) -> None:
        """Add a named vector to a collection once per process (the store call takes its write lock)."""
        if (collection, vector.name) not in self._vectors:
            await self.store.ensure_vector(collection, vector)
            self._vectors.add((collection, vector.name))

    async def drop_vector(self, collection: str, name: str) -> None:
        """Drop a named vector from a collection (a retired model's); adding it again works."""
        await self.store.drop_vector(collection, name)
        self._vectors.discard((collection, name))

    def forget_vector(self, collection: str, name: str) -> None:
        """Another process may have dropped the vector: the next ``ensure_vector`` asks the store."""
        self._vectors.discard((collection, name))

    def records(self, surface: str) -> RecordIndex:
        return self.surfaces[surface]

    def state_of(self, surface: str) -> Any:
        """The state the ``surface`` opened on this engine."""
        try:
            return self.state[surface]
        except KeyError:
            raise RuntimeError(f"the {surface} surface was not opened on this engine (open_engine opens the surfaces handed to it)") from None

    def follow_serving_model(self) -> None:
        """Re-read the serving model marker every few seconds: a reindex elsewhere may switch it."""

        async def follow() -> None:
            while True:
                await asyncio.sleep(SERVING_REFRESH_S)
                try:
                    await refresh_serving(self.store, self.embedders)
                except StoreError as exc:
                    log.warning("could not read the serving model marker", extra={"error": str(exc)})

        self._serving_refresh = asyncio.create_task(follow())

    async def close(self) -> None:
        while self.closers:
            closer = self.closers.pop()
            try:
                await closer(self)
            except Exception:  # one surface failing to close must not keep the store open
                log.exception("a surface failed to close")
        if self._serving_refresh is not None:
            self._serving_refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving_refresh
        await self.embedders.close()
        await self.store.close()
        await self.redis.aclose(close_connection_pool=True)


def create_redis_client(url: str) -> ArqRedis:
    """An ArqRedis that connects lazily: the service starts (and answers searches) with Redis down."""
    pool = ConnectionPool.from_url(url, socket_connect_timeout=2, socket_timeout=5, retry_on_timeout=False)
    return ArqRedis(connection_pool=pool, job_serializer=serialize, job_deserializer=deserialize)
