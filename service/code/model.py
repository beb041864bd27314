"""The code collection: its indexed payload fields, the chunk key scheme and embed states.

Every chunk of a workspace is one point of the ``code`` collection, keyed
``{workspace}|{path}|{chunk content hash}`` (``|{n}`` appended for the n-th repeat of the same
text in one file). The key names the text, not the position: inserting lines above a function
moves its ``start_line`` but keeps its key, so ``RecordIndex``-style diffing keeps its vector and
only chunks whose text is new are embedded. A renamed file's chunks get new keys (the path is
part of the key, as chunk hashes cover text only) and are embedded again.

Payload fields besides the record ones (``tenant``, ``kind``, ``key``, ``content_hash``,
``embed_state``, ...): ``workspace``, ``path`` and ``dirs`` (every ancestor directory, so a
directory scope is one keyword match), what a search filters on. A chunk's lines, kind and symbol
are the workspace's chunk cache's (``cache.py``), as is its text. A point holds no text: ``terms`` is empty (a chunk's BM25 terms are in its workspace's lexical index,
``trigram.py``) and there is no ``embed_text`` (embedding reads the chunk from the workspace's
cache, ``texts.py``).

Embed states: ``pending`` and ``done`` as everywhere, plus ``cold``: written and searchable
lexically, but not queued for embedding (the sweeper only re-enqueues ``pending``). A workspace
stays cold until a query embeds a small scope, a broad fallback warms it, or it prewarms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.engine.records import collection_spec
from service.engine.store import Filter, Match

if TYPE_CHECKING:
    from service.code.workspace import Workspace

SURFACE_NAME = "code"
COLLECTION = "code"
RECORD_KIND = "chunk"
COLD = "cold"

# Chunks are filtered by workspace, path, directory and embed state, never by key, kind or model,
# and searched lexically in their workspace's lexical index: the store indexes nothing else (at
# 272k chunks those indexes held about 150 MB of memory).
SPEC = collection_spec(COLLECTION, keyword_fields=("workspace", "path", "dirs"), record_keywords=(), text_index=False)


def chunk_key(workspace_id: str, path: str, chunk_hash: str, occurrence: int) -> str:
    """The record key of a chunk: stable while its text and path are."""
    base = f"{workspace_id}|{path}|{chunk_hash}"
    return base if occurrence == 0 else f"{base}|{occurrence}"


def workspace_of_key(key: str) -> str:
    """The workspace a chunk key (``chunk_key``) belongs to."""
    return key.split("|", 1)[0]


def workspace_filter(workspace: Workspace) -> Filter:
    """Every chunk of the workspace (the tenant first: it is the collection's tenant index)."""
    return Filter(must=(Match("tenant", workspace.tenant), Match("workspace", workspace.id)))


def dirs_of(path: str) -> list[str]:
    """Every ancestor directory of a workspace path: ``a/b/c.py`` -> ``["a", "a/b"]``."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
