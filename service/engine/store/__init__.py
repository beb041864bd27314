"""The index store: the ``Store`` interface, its two adapters, and ``open_store`` to pick one."""

from __future__ import annotations

from pathlib import Path

from .base import (
    CollectionSpec,
    Condition,
    DenseQuery,
    Filter,
    HasVector,
    Hit,
    Match,
    MatchAny,
    PointRecord,
    Query,
    Range,
    Store,
    StoreError,
    StoreFullError,
    StoreLockedError,
    TextQuery,
    VectorSpec,
    point_id,
)

STORE_KINDS = ("edge", "qdrant", "qdrant-local")


async def open_store(
    kind: str,
    *,
    data_dir: Path | None,
    qdrant_url: str | None,
    api_key: str | None,
    shard_number: int | None,
    replication_factor: int | None,
    write_consistency_factor: int | None,
    local_path: Path | None = None,
) -> Store:
    """The store of ``kind``: ``"edge"`` (embedded, in ``data_dir``), ``"qdrant"`` (server at
    ``qdrant_url``) or ``"qdrant-local"`` (qdrant-client's local mode in ``local_path``: the server
    adapter without a server, one process, small data).

    ``edge`` takes the directory's lock at once: a second process gets ``StoreLockedError``. The
    qdrant client connects lazily, on the first call. The adapters are imported here, not at module
    level, so that each backend loads only when used.
    """
    if kind == "edge":
        if data_dir is None:
            raise StoreError("the edge store needs a data directory")
        from .edge import EdgeStore

        return EdgeStore(Path(data_dir))
    if kind == "qdrant":
        if not qdrant_url:
            raise StoreError("the qdrant store needs a server URL")
        from .client import QdrantClientStore

        return QdrantClientStore.connect(
            qdrant_url,
            api_key,
            shard_number=shard_number,
            replication_factor=replication_factor,
            write_consistency_factor=write_consistency_factor,
        )
    if kind == "qdrant-local":
        if local_path is None:
            raise StoreError("the qdrant-local store needs a directory")
        from .client import QdrantClientStore

        Path(local_path).mkdir(parents=True, exist_ok=True)
        try:
            return QdrantClientStore.local(Path(local_path))
        except RuntimeError as exc:  # qdrant-client's own lock: "already accessed by another instance"
            raise StoreLockedError(f"the qdrant local-mode directory {local_path} is open in another process: {exc}") from None
    raise StoreError(f"unknown store kind {kind!r}; expected one of {', '.join(STORE_KINDS)}")


__all__ = [
    "STORE_KINDS",
    "CollectionSpec",
    "Condition",
    "DenseQuery",
    "Filter",
    "HasVector",
    "Hit",
    "Match",
    "MatchAny",
    "PointRecord",
    "Query",
    "Range",
    "Store",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
    "TextQuery",
    "VectorSpec",
    "open_store",
    "point_id",
]
