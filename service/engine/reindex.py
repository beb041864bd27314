"""Reindex and model migration: rebuild every index from its records, and change the default model without downtime.

Records hold everything their index entries derive from (``embed_text``, ``embed_name``, ``embed_model``), so
``reindex`` rebuilds from them alone, in five steps, each resumable after a crash:

1. **records**: each record's ``content_hash`` is derived again from its text, name and model. A record
   whose stored state disagrees (another hash, ``done`` without a current vector, a vector of a
   model that does not serve) goes back to ``pending`` and gets an embed job. Terms an older
   analyzer wrote (the record's ``analyzer`` version) are brought up to date
   (``analyzer.upgrade_terms``), so the BM25 index follows analyzer fixes too.
2. **fill**: when the configured default model differs from the serving one, the new model's
   vector (a new named vector: names carry model and dimension) is computed for every embedded
   record of the default model, batch by batch, while searches keep using the old vector.
   ``fill_vector``/``fill_hash`` on a record say what its new vector was computed from, so a crash
   loses at most one batch. Records written meanwhile are filled by the next pass; the fill ends
   with a pass that finds nothing left.
3. **switch**: the serving marker (``service.engine.serving``) names the new model. Processes read
   it at start and every ``SERVING_REFRESH_S`` seconds.
4. **reconcile**: once every process has switched (a wait of two refresh periods when other
   processes may serve, with a Qdrant server), records embedded meanwhile with the old model get
   the new vector, and every record's ``vector_name`` names it.
5. **retire**: the old model's named vector is dropped from each collection where no record still
   uses it (a workspace that names the old model explicitly keeps it), freeing its memory and disk.

The migration's own marker (``migration``) records the target and the step reached; progress goes
to a listener at each step and batch (``service.engine.reindex_progress``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from service.engine.analyzer import ANALYZER_VERSION, upgrade_terms
from service.engine.embeddings import Embedder, ModelRef
from service.engine.records import DONE, PENDING, RecordIndex
from service.engine.reindex_progress import ProgressListener, ReindexProgress
from service.engine.serving import SERVING_KEY, SERVING_REFRESH_S, read_marker, refresh_serving, write_marker
from service.engine.store import VectorSpec
from service.engine.views import Document, embed_views

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

MIGRATION_KEY = "migration"
SCROLL_PAGE = 512
MAX_FILL_PASSES = 20



class ReindexNotFinished(Exception):
    """The deadline passed before the reindex was done; running it again continues where it stopped."""


@dataclass
class ReindexReport:
    """What a reindex did."""

    serving_model: str | None = None
    target_model: str | None = None
    switched: bool = False
    records: int = 0
    repaired: int = 0
    reanalyzed: int = 0
    """Records whose terms an older analyzer wrote, brought up to date."""
    filled: int = 0
    reconciled: int = 0
    passes: int = 0
    retired: dict[str, str] = field(default_factory=dict)
    """Collection -> the old vector dropped from it."""
    teams: dict[str, Any] = field(default_factory=dict)
    """Re-keying of old team keys (``service.engine.teams.TeamMigrationReport``)."""
    by_collection: dict[str, dict[str, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- reindex ---------------------------------------------------------------------------------


async def reindex(
    engine: Engine,
    *,
    progress: ProgressListener | None = None,
    deadline: float | None = None,
    settle_s: float | None = None,
    team_orgs: Mapping[str, str] | None = None,
) -> ReindexReport:
    """Repair every record, then fill, switch to and reconcile the configured default model if it
    does not serve yet. ``deadline`` (monotonic) raises ``ReindexNotFinished`` between batches;
    ``settle_s`` is how long the switch waits for other processes (default: two refresh periods
    with a Qdrant server, none for the single-process embedded store). First, records under old
    team keys are re-keyed to ``team:<org>/<team>`` for each team of ``team_orgs`` (and of the
    mapping a ``reindex --team-org`` command left for a running service), see ``service.engine.teams``."""
    from service.engine.teams import migrate_team_tenants, take_queued_team_orgs

    notify = progress or (lambda _: None)
    notify(ReindexProgress("teams"))
    teams = await migrate_team_tenants(engine, {**await take_queued_team_orgs(engine), **(team_orgs or {})})
    await refresh_serving(engine.store, engine.embedders)
    registry = engine.embedders
    serving, target = registry.serving, registry.configured
    report = ReindexReport(serving_model=serving.model if serving else None, teams=teams.as_dict())
    serving_vector = _vector_name(registry.default)
    for index in engine.surfaces.values():
        records, repaired, reanalyzed = await _repair(engine, index, serving_vector, notify)
        report.records += records
        report.repaired += repaired
        report.reanalyzed += reanalyzed
        report.by_collection.setdefault(index.collection, {}).update(records=records, repaired=repaired, reanalyzed=reanalyzed)
    migration = await read_marker(engine.store, MIGRATION_KEY)
    if target is None:
        notify(ReindexProgress("done"))
        return report
    embedder = registry.get(target.model, target.dimensions)
    if serving != target or (migration and migration.get("state") != "done"):
        await _probe_dimensions(embedder)
    if serving != target:
        report.target_model = target.model
        await _fill(engine, embedder, serving, serving_vector, report, notify, deadline)
        await _switch(engine, target)
        report.switched = True
        migration = await read_marker(engine.store, MIGRATION_KEY)
    # "filling" here too: a run that died between writing the serving marker and its own marker.
    if migration and migration.get("state") in ("filling", "switched") and migration.get("target_vector") == _vector_name(embedder):
        report.target_model = target.model
        others_may_serve = engine.settings.store_kind == "qdrant"  # the embedded stores admit one process
        wait = settle_s if settle_s is not None else (2 * SERVING_REFRESH_S if others_may_serve else 0.0)
        notify(ReindexProgress("switch", total=int(wait)))
        await asyncio.sleep(wait)
        for index in engine.surfaces.values():
            reconciled = await _reconcile(engine, index, embedder, notify, deadline)
            report.reconciled += reconciled
            report.by_collection.setdefault(index.collection, {})["reconciled"] = reconciled
        report.retired = await _retire(engine, migration, _vector_name(embedder), notify)
        await write_marker(engine.store, MIGRATION_KEY, {**migration, "state": "done", "finished_at": time.time()})
    report.serving_model = registry.default_model
    notify(ReindexProgress("done"))
    return report


async def _probe_dimensions(embedder: Embedder) -> None:
    """An OpenAI-compatible model without configured dimensions tells them on its first answer;
    the vector's name carries them, so learn them before naming it."""
    if not embedder.dimensions:
        await embedder.embed_documents(["dimension probe"])


def _vector_name(embedder: Embedder | None) -> str | None:
    return embedder.vector_name if embedder is not None and embedder.dimensions else None


async def _scroll_all(engine: Engine, collection: str) -> Any:
    offset: str | None = None
    while True:
        page, offset = await engine.store.scroll(collection, None, limit=SCROLL_PAGE, offset=offset)
        yield page
        if offset is None:
            return


def _is_default(payload: Mapping[str, Any]) -> bool:
    return not payload.get("embed_model")


async def _repair(engine: Engine, index: RecordIndex, serving_vector: str | None, notify: ProgressListener) -> tuple[int, int, int]:
    """Step 1: derive each record's hash again and put back to pending what has no current vector;
    bring terms an older analyzer wrote up to date. Returns (records, repaired, reanalyzed)."""
    seen = repaired = reanalyzed = 0
    to_embed: list[tuple[str, str]] = []
    async for page in _scroll_all(engine, index.collection):
        for point in page:
            payload = point.payload
            seen += 1
            expected = index.stored_hash(payload)
            state = payload.get("embed_state")
            wanted = state
            if state in (DONE, PENDING):
                stored = payload.get("vector_name")
                vector_ok = not _is_default(payload) or serving_vector is None or stored in (None, serving_vector, payload.get("fill_vector"))
                wanted = DONE if payload.get("embedded_hash") == expected and vector_ok else PENDING
            changes: dict[str, Any] = {}
            if payload.get("content_hash") != expected or state != wanted:
                changes.update(content_hash=expected, embed_state=wanted)
                if wanted == PENDING:
                    # pending_since 0: the sweeper takes it at once if the job queued below is lost.
                    changes["pending_since"] = 0
                    to_embed.append((str(payload["key"]), expected))
                repaired += 1
            version = int(payload.get("analyzer") or 1)
            if version < ANALYZER_VERSION:
                changes.update(_upgraded(payload, index.analyzed_fields, version), analyzer=ANALYZER_VERSION)
                reanalyzed += 1
            if changes:
                await engine.store.set_payload(index.collection, [point.id], changes)
        notify(ReindexProgress("records", index.collection, seen, seen))
    await index.enqueue_embedding(to_embed)
    if repaired or reanalyzed:
        log.info("reindex repaired records", extra={"collection": index.collection, "repaired": repaired, "reanalyzed": reanalyzed})
    return seen, repaired, reanalyzed


def _upgraded(payload: Mapping[str, Any], fields: Sequence[str], version: int) -> dict[str, Any]:
    """The analyzed fields of ``payload`` (a string of terms, or a list of terms) under today's analyzer."""
    upgraded: dict[str, Any] = {}
    for name in fields:
        value = payload.get(name)
        if isinstance(value, str):
            upgraded[name] = upgrade_terms(value, version)
        elif isinstance(value, list):
            upgraded[name] = list(dict.fromkeys(upgrade_terms(str(term), version) for term in value))
    return upgraded


def _needs_fill(payload: Mapping[str, Any], target_vector: str) -> bool:
    """An embedded default-model record whose new vector is missing or from another text."""
    current = payload.get("content_hash")
    return (
        _is_default(payload)
        and payload.get("embed_state") == DONE
        and payload.get("embedded_hash") == current
        and not (payload.get("fill_vector") == target_vector and payload.get("fill_hash") == current)
    )


async def _fill(
    engine: Engine,
    embedder: Embedder,
    serving: ModelRef | None,
    serving_vector: str | None,
    report: ReindexReport,
    notify: ProgressListener,
    deadline: float | None,
) -> None:
    """Step 2: passes over every collection until one finds nothing left to fill."""
    target_vector = embedder.vector_name
    marker = {
        "state": "filling",
        "target_model": embedder.model,
        "target_dimensions": engine.embedders.configured.dimensions if engine.embedders.configured else None,
        "target_vector": target_vector,
        "source_model": serving.model if serving else None,
        "source_vector": serving_vector,
        "started_at": time.time(),
    }
    previous = await read_marker(engine.store, MIGRATION_KEY)
    if previous and previous.get("target_vector") == target_vector and previous.get("state") == "filling":
        marker["started_at"] = previous.get("started_at", marker["started_at"])  # a resumed run
    await write_marker(engine.store, MIGRATION_KEY, marker)
    for index in engine.surfaces.values():
        await engine.ensure_vector(index.collection, VectorSpec(target_vector, embedder.dimensions))
    for _ in range(MAX_FILL_PASSES):
        report.passes += 1
        filled = 0
        for index in engine.surfaces.values():
            count = await _fill_collection(engine, index, embedder, notify, deadline)
            filled += count
            stats = report.by_collection.setdefault(index.collection, {})
            stats["filled"] = stats.get("filled", 0) + count
        report.filled += filled
        if filled == 0:
            return
    log.warning("records kept changing during the fill; switching, the reconcile step embeds the rest")


async def _fill_collection(engine: Engine, index: RecordIndex, embedder: Embedder, notify: ProgressListener, deadline: float | None) -> int:
    target_vector = embedder.vector_name
    todo: list[tuple[str, str, Mapping[str, Any]]] = []
    total = 0
    async for page in _scroll_all(engine, index.collection):
        for point in page:
            payload = point.payload
            if _is_default(payload) and payload.get("embed_state") == DONE:
                total += 1
                if _needs_fill(payload, target_vector):
                    todo.append((str(payload["key"]), str(payload["content_hash"]), payload))
    done = total - len(todo)
    notify(ReindexProgress("fill", index.collection, done, total))
    filled = 0
    batch_size = engine.settings.embeddings_batch_size
    for start in range(0, len(todo), batch_size):
        if deadline is not None and time.monotonic() > deadline:
            raise ReindexNotFinished(f"filled {done} of {total} records of {index.collection}")
        batch = todo[start : start + batch_size]
        # A text kept on another node is not filled here: the reconcile step sends it there.
        rows, _elsewhere = await _with_documents(index, batch)
        filled += await _write_target(engine, index, embedder, rows, {"fill_vector": target_vector}, fill_hash=True)
        done += len(batch)
        notify(ReindexProgress("fill", index.collection, done, total))
    return filled


async def _with_documents(
    index: RecordIndex, batch: Sequence[tuple[str, str, Mapping[str, Any]]]
) -> tuple[list[tuple[str, str, Document]], list[tuple[str, str]]]:
    """The rows of ``batch`` with their documents, and the (key, hash) of those whose text this
    process cannot read (kept with a workspace on another node)."""
    documents = await index.documents({key: payload for key, _, payload in batch})
    rows = [(key, expected, documents[key]) for key, expected, _ in batch if key in documents]
    return rows, [(key, expected) for key, expected, _ in batch if key not in documents]


async def _write_target(
    engine: Engine, index: RecordIndex, embedder: Embedder, rows: Sequence[tuple[str, str, Document]], extra: Mapping[str, Any], *, fill_hash: bool
) -> int:
    """Embed rows (key, hash, document) with ``embedder`` and write its vector where the hash is still current."""
    if not rows:
        return 0
    vectors = await embed_views(embedder, [doc for _, _, doc in rows])
    latest = await index.get_many([key for key, _, _ in rows])
    written = 0
    for (key, expected, _), values in zip(rows, vectors, strict=True):
        if latest.get(key, {}).get("content_hash") != expected:
            continue  # changed meanwhile: a later pass takes the new text
        pid = index.point_id(key)
        await engine.store.update_vectors(index.collection, [(pid, {embedder.vector_name: values})])
        payload = {**extra, "fill_hash": expected} if fill_hash else {**extra, "embedded_hash": expected, "fill_hash": expected}
        await engine.store.set_payload(index.collection, [pid], payload)
        written += 1
    return written


async def _switch(engine: Engine, target: ModelRef) -> None:
    """Step 3: the serving marker names the new model; this process serves it at once."""
    await write_marker(engine.store, SERVING_KEY, {"model": target.model, "dimensions": target.dimensions})
    migration = await read_marker(engine.store, MIGRATION_KEY) or {}
    await write_marker(engine.store, MIGRATION_KEY, {**migration, "state": "switched", "switched_at": time.time()})
    engine.embedders.set_serving(target)
    log.info("switched the default embeddings model", extra={"model": target.model})


async def _reconcile(engine: Engine, index: RecordIndex, embedder: Embedder, notify: ProgressListener, deadline: float | None) -> int:
    """Step 4: every embedded default record gets the new vector and names it in ``vector_name``."""
    target_vector = embedder.vector_name
    relabel: list[str] = []
    todo: list[tuple[str, str, Mapping[str, Any]]] = []
    async for page in _scroll_all(engine, index.collection):
        for point in page:
            payload = point.payload
            if not (_is_default(payload) and payload.get("embed_state") == DONE):
                continue
            current = payload.get("content_hash")
            if payload.get("fill_vector") == target_vector and payload.get("fill_hash") == current:
                if payload.get("vector_name") != target_vector or payload.get("embedded_hash") != current:
                    relabel.append(point.id)
                    await engine.store.set_payload(index.collection, [point.id], {"vector_name": target_vector, "embedded_hash": current})
            elif payload.get("vector_name") != target_vector:
                todo.append((str(payload["key"]), str(current), payload))
    notify(ReindexProgress("reconcile", index.collection, 0, len(todo)))
    batch_size = engine.settings.embeddings_batch_size
    done = 0
    for start in range(0, len(todo), batch_size):
        if deadline is not None and time.monotonic() > deadline:
            raise ReindexNotFinished(f"reconciled {done} of {len(todo)} records of {index.collection}")
        batch = todo[start : start + batch_size]
        rows, elsewhere = await _with_documents(index, batch)
        done += await _write_target(engine, index, embedder, rows, {"fill_vector": target_vector, "vector_name": target_vector}, fill_hash=False)
        if elsewhere:
            # Their texts are on the node that holds them: pending, and embedded there with the
            # model now serving (the sweeper sends them again if this enqueue is lost).
            await engine.store.set_payload(index.collection, [index.point_id(key) for key, _ in elsewhere], {"embed_state": PENDING, "pending_since": int(time.time())})
            await index.enqueue_embedding(elsewhere)
            done += len(elsewhere)
        notify(ReindexProgress("reconcile", index.collection, done, len(todo)))
    return len(relabel) + done


async def _retire(engine: Engine, migration: Mapping[str, Any], target_vector: str | None, notify: ProgressListener) -> dict[str, str]:
    """Step 5: drop the old default model's vector from every collection where no record uses it."""
    old, old_model = migration.get("source_vector"), migration.get("source_model")
    if not old or old == target_vector:
        return {}
    retired: dict[str, str] = {}
    for index in engine.surfaces.values():
        notify(ReindexProgress("retire", index.collection))
        if await _uses_vector(engine, index, str(old), old_model):
            log.info("old vector kept: records still name its model", extra={"collection": index.collection, "vector": old})
            continue
        await engine.drop_vector(index.collection, str(old))
        retired[index.collection] = str(old)
    return retired


async def _uses_vector(engine: Engine, index: RecordIndex, vector: str, model: str | None) -> bool:
    """Whether a record has a vector in ``vector`` or names its model (and will get one)."""
    async for page in _scroll_all(engine, index.collection):
        for point in page:
            if point.payload.get("vector_name") == vector or (model and point.payload.get("embed_model") == model):
                return True
    return False


__all__ = [
    "MIGRATION_KEY",
    "ReindexNotFinished",
    "ReindexReport",
    "reindex",
]
