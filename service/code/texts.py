"""Where embedding reads a chunk's text: its workspace's chunk cache, not the store's point.

A chunk's point in the ``code`` collection carries its key, place, hash and embed state, never its
text (the cache holds that once, deflated). Embedding a chunk therefore runs where its workspace's
cache is: its embed jobs are ``embed_chunks``, a node-local job whose first argument is the
workspace (the workspace's node queue when there are several nodes, the bulk queue otherwise),
and it reads each text from the cache, embedding it only while the cached chunk still has the
content hash the job was queued with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from service.code.context import embed_text_of
from service.code.model import workspace_of_key
from service.code.state import workspaces_of
from service.engine.views import Document
from service.errors import WorkspaceBroken, WorkspaceMissing

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

EMBED_JOB = "embed_chunks"


class ChunkTexts:
    """The code surface's ``RecordTexts``: chunk keys start with their workspace's id."""

    job = EMBED_JOB

    def owner(self, key: str) -> str:
        return workspace_of_key(key)

    async def documents(self, engine: Engine, items: Sequence[tuple[str, str]]) -> dict[str, Document]:
        """The documents of the chunks (key, content hash) whose workspace this process holds and
        whose cached chunk still has that hash (a workspace held by another node, gone or broken
        gives none)."""
        workspaces = workspaces_of(engine)
        by_workspace: dict[str, dict[str, str]] = {}
        for key, expected in items:
            by_workspace.setdefault(self.owner(key), {})[key] = expected
        found: dict[str, Document] = {}
        for workspace_id, wanted in by_workspace.items():
            workspace = workspaces.registry.get(workspace_id)
            if workspace is None:
                continue
            try:
                runtime = await workspaces.runtime(workspace)
            except (WorkspaceMissing, WorkspaceBroken) as exc:
                log.info("chunk texts unavailable", extra={"workspace": workspace_id, "reason": exc.code})
                continue
            for key, chunk in runtime.cache.by_keys(wanted).items():
                if chunk.content_hash == wanted[key]:
                    found[key] = Document(embed_text_of(chunk.path, chunk.symbol, chunk.text))
        return found


CHUNK_TEXTS = ChunkTexts()

__all__ = ["CHUNK_TEXTS", "EMBED_JOB", "ChunkTexts"]
