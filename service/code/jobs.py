"""The code surface's arq jobs: build a workspace's index and warm it (fast queue), and embed its
chunks (bulk queue).

All three are node-local (``node_local``): on several workspace nodes they go to the queue of the node
that holds the workspace's files. Both are resumable: a revalidation commits batch by batch, so a job whose time runs out asks arq
to run it again (``Retry``) and the next try continues with the files not yet indexed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from arq import Retry

from service.code.semantic import IndexNotComplete, index_workspace, warm
from service.engine.queue import node_local
from service.engine.refresh import embed_job
from service.engine.runtime import Engine
from service.engine.store import StoreError
from service.errors import WorkspaceBroken, WorkspaceMissing

log = logging.getLogger(__name__)

# Leave the job this much of arq's timeout to commit its last batch and return.
TIMEOUT_MARGIN_S = 15.0


def _deadline(engine: Engine) -> float:
    return time.monotonic() + max(engine.settings.job_timeout_s - TIMEOUT_MARGIN_S, 10.0)


def _retry(ctx: dict[str, Any], workspace_id: str, exc: Exception) -> Retry:
    defer = 1 if isinstance(exc, IndexNotComplete) else min(5 * 2 ** (int(ctx.get("job_try", 1)) - 1), 120)
    log.info("workspace job continues later", extra={"workspace": workspace_id, "reason": type(exc).__name__, "try": ctx.get("job_try")})
    return Retry(defer=defer)


@node_local
async def index_workspace_job(ctx: dict[str, Any], workspace_id: str) -> dict[str, int]:
    """Index (or revalidate) the workspace; with ``prewarm_embeddings``, warm it too."""
    engine: Engine = ctx["engine"]
    try:
        return await index_workspace(engine, workspace_id, deadline=_deadline(engine))
    except (IndexNotComplete, StoreError) as exc:
        raise _retry(ctx, workspace_id, exc) from exc
    except (WorkspaceMissing, WorkspaceBroken) as exc:
        return _unusable(workspace_id, exc)


@node_local
async def embed_chunks_job(ctx: dict[str, Any], workspace_id: str, collection: str, items: list[list[str]]) -> dict[str, int]:
    """Embed chunks (key, content hash) of the workspace, reading their texts from its cache
    (``texts.py``): it runs on the node that holds the workspace."""
    return await embed_job(ctx["engine"], collection, items, int(ctx.get("job_try", 1)))


@node_local
async def warm_workspace_job(ctx: dict[str, Any], workspace_id: str) -> dict[str, int]:
    """Background warming after a cold broad fallback: queue every cold chunk for embedding."""
    engine: Engine = ctx["engine"]
    try:
        return {"queued": await warm(engine, workspace_id, deadline=_deadline(engine))}
    except (IndexNotComplete, StoreError) as exc:
        raise _retry(ctx, workspace_id, exc) from exc
    except (WorkspaceMissing, WorkspaceBroken) as exc:
        return _unusable(workspace_id, exc)


def _unusable(workspace_id: str, exc: WorkspaceMissing | WorkspaceBroken) -> dict[str, int]:
    """A root that is gone or a cache that cannot be opened: retrying cannot help; its status says what to do."""
    log.warning("workspace job skipped", extra={"workspace": workspace_id, "reason": exc.code})
    return {exc.code: 1}
