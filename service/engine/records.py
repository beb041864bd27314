"""Indexed records: write the record first (searchable lexically at once), then embed it in the background.

Every surface stores its records as points of one collection with these payload fields, besides
its own: ``tenant``, ``kind``, ``key`` (unique in the collection), ``terms`` (analyzer output),
``embed_text`` (what the model embeds), ``embed_name`` (the record's name as words, where it has
one: a second view composed into the same vector, ``service.engine.views``), ``embed_model``
(``provider/model`` or absent for the service default), ``content_hash`` (of ``embed_text``,
``embed_name`` and the model), ``embedded_hash`` (what the vector was computed from),
``vector_name`` (the named vector ``embedded_hash`` refers to) and ``embed_state`` (``pending`` |
``done``); while a new default model is filled in (``service.engine.reindex``), ``fill_vector``
and ``fill_hash`` say what its vector was computed from. An embed job re-reads the record and
skips it when its hash moved on, so a stale job never overwrites a newer record; the sweeper
re-enqueues every ``pending`` record, so a lost enqueue only delays embedding.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from service.engine.analyzer import ANALYZER_VERSION
from service.engine.store import CollectionSpec, Filter, Hit, Match, MatchAny, PointRecord, Query, point_id
from service.engine.views import Document, document

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

PENDING = "pending"
DONE = "done"
BASE_KEYWORD_FIELDS = ("tenant", "kind", "key", "embed_state", "embed_model")
# What the engine itself filters every surface's records on (the sweeper, the counts).
ENGINE_KEYWORD_FIELDS = ("tenant", "embed_state")
BASE_INTEGER_FIELDS = ("pending_since",)
# Payload fields that describe the stored vectors: a rewrite keeps them (the vectors stay too).
VECTOR_FIELDS = ("vector_name", "fill_vector", "fill_hash")
# Records upserted per store call: bounds memory and keeps the event loop responsive.
WRITE_BATCH = 512


def collection_spec(
    name: str,
    keyword_fields: Sequence[str] = (),
    integer_fields: Sequence[str] = (),
    bool_fields: Sequence[str] = (),
    *,
    record_keywords: Sequence[str] = BASE_KEYWORD_FIELDS,
    text_index: bool = True,
) -> CollectionSpec:
    """A surface collection: the record fields it filters on (``record_keywords``, the engine's own
    always among them) plus its own indexed fields. ``text_index=False``: no BM25 index in the
    store, for a surface whose records are searched lexically elsewhere (an index costs memory for
    every point, used or not)."""
    keywords = tuple(dict.fromkeys((*ENGINE_KEYWORD_FIELDS, *record_keywords, *keyword_fields)))
    integers = tuple(dict.fromkeys((*BASE_INTEGER_FIELDS, *integer_fields)))
    return CollectionSpec(
        name=name, text_field="terms" if text_index else None, keyword_fields=keywords, integer_fields=integers, bool_fields=tuple(bool_fields)
    )


def content_hash(embed_text: str, embed_model: str | None, embed_name: str = "") -> str:
    """What a record's vector is computed from, as a digest; a record without a name hashes as before names existed."""
    named = f"\x00{embed_name}" if embed_name else ""
    return hashlib.sha256(f"{embed_model or ''}\x00{embed_text}{named}".encode()).hexdigest()[:32]


def payload_hash(payload: Mapping[str, Any]) -> str:
    """The content hash a stored record's payload calls for (``content_hash`` of its embed fields)."""
    return content_hash(str(payload.get("embed_text", "")), payload.get("embed_model") or None, str(payload.get("embed_name") or ""))


class RecordTexts(Protocol):
    """Where a surface keeps what its records embed, when the store's points do not hold it (code:
    each workspace's chunk cache, on the node that holds the workspace). Such a collection's points
    carry no ``embed_text``/``embed_name``; embedding reads the texts here, in a job that runs
    where they are: ``job`` is a node-local job taking (owner, collection, items)."""

    job: str

    def owner(self, key: str) -> str:
        """The workspace a record belongs to (the node-local job's first argument)."""
        ...

    async def documents(self, engine: Engine, items: Sequence[tuple[str, str]]) -> dict[str, Document]:
        """The document of each (key, content hash) whose text is here and still has that hash."""
        ...


@dataclass(frozen=True)
class IndexRecord:
    """One record to index. ``payload`` holds the surface's own fields."""

    key: str
    tenant: str
    kind: str
    embed_text: str
    terms: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    embed_model: str | None = None
    embed_name: str = ""
    """The record's name as words, embedded too and composed into its vector (``service.engine.views``)."""
    known_hash: str | None = None
    """The record's ``content_hash`` when its surface derived it already (its texts live elsewhere, ``RecordTexts``)."""

    @property
    def content_hash(self) -> str:
        return self.known_hash or content_hash(self.embed_text, self.embed_model, self.embed_name)


@dataclass(frozen=True)
class WriteResult:
    written: int
    to_embed: int
    enqueued: bool


class Collection:
    """The door to one collection of the store: its points by key, pages, counts and searches.

    Surfaces reach the store through a ``Collection`` (plain payload points, e.g. the actions'
    templates and instances) or its subclass ``RecordIndex`` (records that are also embedded)."""

    def __init__(self, engine: Engine, spec: CollectionSpec) -> None:
        self.engine = engine
        self.spec = spec

    @property
    def collection(self) -> str:
        return self.spec.name

    def point_id(self, key: str) -> str:
        return point_id(self.collection, key)

    async def upsert(self, points: Sequence[PointRecord]) -> None:
        """Write whole points (their payload replaced, no embedding)."""
        await self.engine.store.upsert(self.collection, points)

    async def delete(self, keys: Sequence[str]) -> None:
        await self.engine.store.delete(self.collection, [self.point_id(k) for k in keys])

    async def delete_where(self, filter: Filter) -> None:
        await self.engine.store.delete_by_filter(self.collection, filter)

    async def exists(self, key: str) -> bool:
        return bool(await self.engine.store.retrieve(self.collection, [self.point_id(key)]))

    async def get(self, key: str) -> Mapping[str, Any] | None:
        points = await self.engine.store.retrieve(self.collection, [self.point_id(key)])
        return points[0].payload if points else None

    async def get_many(self, keys: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """Key -> payload of the records that exist among ``keys`` (each payload carries its ``key``)."""
        points = await self.engine.store.retrieve(self.collection, [self.point_id(k) for k in keys])
        return {str(p.payload.get("key")): p.payload for p in points}

    async def retrieve(self, point_ids: Sequence[str]) -> list[PointRecord]:
        """The existing points among ``point_ids`` (order not guaranteed)."""
        return await self.engine.store.retrieve(self.collection, point_ids)

    async def set_payload(self, keys: Sequence[str], payload: Mapping[str, Any]) -> None:
        """Merge ``payload`` into the records of ``keys`` (their vectors and other fields stay)."""
        await self.engine.store.set_payload(self.collection, [self.point_id(k) for k in keys], payload)

    async def update_vectors(self, vectors: Sequence[tuple[str, Mapping[str, Sequence[float]]]]) -> None:
        """Set named vectors of the records of these keys (key, {vector name: values}); payloads stay."""
        await self.engine.store.update_vectors(self.collection, [(self.point_id(k), named) for k, named in vectors])

    async def scroll(self, filter: Filter | None = None, *, limit: int = 256, offset: str | None = None) -> tuple[list[PointRecord], str | None]:
        """One page of the records matching ``filter`` and the offset of the next page (None at the end)."""
        return await self.engine.store.scroll(self.collection, filter, limit=limit, offset=offset)

    async def scroll_all(self, filter: Filter | None = None, *, page: int = 512) -> AsyncIterator[PointRecord]:
        """Every record matching ``filter``, a page at a time."""
        offset: str | None = None
        while True:
            points, offset = await self.scroll(filter, limit=page, offset=offset)
            for point in points:
                yield point
            if offset is None:
                return

    async def count(self, filter: Filter | None = None) -> int:
        return await self.engine.store.count(self.collection, filter)

    @property
    def counts_remembered(self) -> bool:
        """Whether a count costs no store work until the next write (``Store.counts_remembered``)."""
        return self.engine.store.counts_remembered

    async def search_dense(self, vector_name: str, vector: Sequence[float], filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        """Nearest records by cosine on ``vector_name`` (records without that vector are skipped)."""
        return await self.engine.store.search_dense(self.collection, vector_name, vector, filter, limit=limit)

    async def search_text(self, query_terms: str, filter: Filter | None = None, *, limit: int = 10) -> list[Hit]:
        """BM25 over the records' ``terms``; ``query_terms`` is analyzer output."""
        return await self.engine.store.search_text(self.collection, query_terms, filter, limit=limit)

    async def search_batch(self, queries: Sequence[Query]) -> list[list[Hit]]:
        """Several dense and BM25 queries in one store call, each answered as alone, in order."""
        return await self.engine.store.search_batch(self.collection, queries)

    async def flush(self) -> None:
        """Make every acknowledged write durable."""
        await self.engine.store.flush()


class RecordIndex(Collection):
    """The records of one surface collection: written first (searchable lexically at once), embedded after."""

    def __init__(
        self, engine: Engine, surface: str, spec: CollectionSpec, analyzed_fields: Sequence[str] = (), *, bulk: bool = False, texts: RecordTexts | None = None
    ) -> None:
        super().__init__(engine, spec)
        self.surface = surface
        self.texts = texts
        """Where the records' texts are kept when the store's points do not hold them (None: in the points)."""
        self.analyzed_fields = (*([spec.text_field] if spec.text_field else []), *analyzed_fields)
        """Payload fields holding analyzer output (a string of terms or a list of terms)."""
        self.bulk = bulk
        """Its embed jobs go to the bulk queue: bulk warming must not delay interactive writes' embedding."""

    async def write(self, records: Iterable[IndexRecord], *, embed: bool = True, hold_as: str | None = None, unembedded: set[str] | None = None) -> WriteResult:
        """Write records; keep vectors whose content did not change; enqueue embedding of the rest.

        ``unembedded``: filled with the keys of the written records whose vector is not of their
        text (embedded later, or once a model serves).

        ``hold_as``: records needing a vector are written in this embed state of the surface's own
        instead of ``pending`` and not queued (the sweeper re-enqueues only ``pending``): the surface
        embeds them on its own terms (code's ``cold`` chunks)."""
        written, to_embed = 0, []
        batch: list[IndexRecord] = []
        for record in records:
            batch.append(record)
            if len(batch) >= WRITE_BATCH:
                to_embed.extend(await self._write_batch(batch, hold_as, unembedded))
                written += len(batch)
                batch = []
        if batch:
            to_embed.extend(await self._write_batch(batch, hold_as, unembedded))
            written += len(batch)
        enqueued = await self.enqueue_embedding(to_embed) if embed else False
        return WriteResult(written=written, to_embed=len(to_embed), enqueued=enqueued)

    async def _write_batch(self, records: Sequence[IndexRecord], hold_as: str | None = None, unembedded: set[str] | None = None) -> list[tuple[str, str]]:
        ids = [self.point_id(r.key) for r in records]
        existing = {p.id: p for p in await self.engine.store.retrieve(self.collection, ids)}
        fresh: list[PointRecord] = []
        changed: list[tuple[str, str]] = []
        for pid, record in zip(ids, records, strict=True):
            old = existing.get(pid)
            payload = self._payload(record, old.payload if old else None, hold_as, keep_text=self.texts is None)
            if old is None:
                fresh.append(PointRecord(id=pid, payload=payload))
            else:
                # overwrite_payload keeps the stored vector: an unchanged text keeps its embedding.
                await self.engine.store.overwrite_payload(self.collection, pid, payload)
            if unembedded is not None and payload["embed_state"] != DONE:
                unembedded.add(record.key)
            # A record no model can embed stays pending, searched lexically; the sweeper queues it once one serves.
            if payload["embed_state"] == PENDING and can_embed(self.engine, record.embed_model):
                changed.append((record.key, record.content_hash))
        if fresh:
            await self.engine.store.upsert(self.collection, fresh)
        return changed

    @staticmethod
    def _payload(record: IndexRecord, old: Mapping[str, Any] | None, hold_as: str | None = None, *, keep_text: bool = True) -> dict[str, Any]:
        new_hash = record.content_hash
        embedded_hash = (old or {}).get("embedded_hash")
        payload = dict(record.payload)
        payload.update(
            tenant=record.tenant,
            kind=record.kind,
            key=record.key,
            terms=record.terms,
            analyzer=ANALYZER_VERSION,
            content_hash=new_hash,
            embed_state=DONE if embedded_hash == new_hash else hold_as or PENDING,
        )
        if payload["embed_state"] == PENDING:
            # When it went pending: the sweeper leaves young pending records to the jobs already queued.
            unchanged = old is not None and old.get("content_hash") == new_hash and "pending_since" in old
            payload["pending_since"] = old["pending_since"] if unchanged and old else int(time.time())
        if record.embed_model:
            payload["embed_model"] = record.embed_model
        if keep_text:
            payload["embed_text"] = record.embed_text
            if record.embed_name:
                payload["embed_name"] = record.embed_name
        if embedded_hash:
            payload["embedded_hash"] = embedded_hash
        for name in VECTOR_FIELDS:
            if old and name in old:
                payload[name] = old[name]
        return payload

    async def enqueue_embedding(self, items: Sequence[tuple[str, str]]) -> bool:
        """Enqueue embed jobs in batches (records whose texts live with an owner: per owner, to the
        node that holds it); False when any enqueue failed (the sweeper repairs it)."""
        ok = True
        size = self.engine.settings.embeddings_batch_size
        texts = self.texts
        groups: dict[str | None, list[tuple[str, str]]] = {}
        for item in items:
            groups.setdefault(None if texts is None else texts.owner(item[0]), []).append(item)
        for owner, group in groups.items():
            for start in range(0, len(group), size):
                batch = group[start : start + size]
                if texts is None:
                    job = await self.engine.queue.enqueue_embed(self.surface, self.collection, batch, bulk=self.bulk)
                else:
                    job = await self.engine.queue.enqueue_embed(self.surface, self.collection, batch, bulk=self.bulk, job=texts.job, owner=owner)
                ok = ok and job is not None
        return ok

    async def documents(self, current: Mapping[str, Mapping[str, Any]]) -> dict[str, Document]:
        """The document each record of ``current`` (key -> stored payload) embeds: from its payload,
        or from where the surface keeps its texts (a record whose text is not there, or no longer
        has the stored hash, is left out)."""
        if self.texts is None:
            return {key: document(payload) for key, payload in current.items()}
        return await self.texts.documents(self.engine, [(key, str(payload.get("content_hash"))) for key, payload in current.items()])

    def stored_hash(self, payload: Mapping[str, Any]) -> str:
        """The content hash a stored record calls for: derived again from its payload's texts, or,
        when the surface keeps the texts, the one stored (the surface writes the two together)."""
        return payload_hash(payload) if self.texts is None else str(payload.get("content_hash"))

    async def counts(self, tenants: Sequence[str] | None = None) -> dict[str, int]:
        """``records``, ``embedded`` and ``pending`` counts, for ``tenants`` or everyone."""
        base = Filter(must=(MatchAny("tenant", tuple(tenants)),)) if tenants is not None else Filter()
        records = await self.engine.store.count(self.collection, base)
        pending = await self.engine.store.count(self.collection, base.and_(Match("embed_state", PENDING)))
        return {"records": records, "embedded": records - pending, "pending": pending}


def can_embed(engine: Engine, embed_model: str | None) -> bool:
    """Whether a record can be embedded now: it names a model of its own, or a default model serves
    (with embeddings off, ``none``, only the first)."""
    return bool(embed_model) or engine.embedders.serving is not None


def tenant_filter(tenants: Sequence[str]) -> Filter:
    """Only the records of ``tenants``: every query of a caller carries this."""
    return Filter(must=(MatchAny("tenant", tuple(tenants)),))
