"""The code surface's definition: its collection, routes, jobs, command-line commands and the hooks
that open and close the workspaces' state on an engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.code.cli import add_cli
from service.code.jobs import embed_chunks_job, index_workspace_job, warm_workspace_job
from service.code.model import COLLECTION, SPEC, SURFACE_NAME
from service.code.roots import mark_no_index
from service.code.routes import routes
from service.code.search import SEARCH
from service.code.semantic import INDEX_JOB, WARM_JOB
from service.code.state import open_workspaces, workspaces_of
from service.code.texts import CHUNK_TEXTS, EMBED_JOB
from service.engine.store import VectorSpec
from service.engine.surface import JobDef, SurfaceDef
from service.errors import EmbeddingUnavailable

if TYPE_CHECKING:
    from service.engine.runtime import Engine


async def on_open(engine: Engine) -> None:
    """Open the workspaces' state on the engine, mark the data and index directories as never
    indexed (any walk, of any deployment, prunes them), and create the default model's vector up
    front, so dense search works before the first embedding lands."""
    await open_workspaces(engine)
    for directory in (engine.settings.data_dir, engine.settings.index_dir):
        if directory is not None:
            mark_no_index(directory)
    try:
        embedder = engine.embedders.default
    except EmbeddingUnavailable:
        return
    if embedder is not None and embedder.dimensions:
        await engine.ensure_vector(COLLECTION, VectorSpec(embedder.vector_name, embedder.dimensions))


async def on_close(engine: Engine) -> None:
    """Close the open workspaces' caches and the regex matcher processes."""
    workspaces_of(engine).close()


SURFACE = SurfaceDef(
    name=SURFACE_NAME,
    spec=SPEC,
    routes=routes,
    on_open=on_open,
    on_close=on_close,
    add_cli=add_cli,
    jobs={
        INDEX_JOB: JobDef(index_workspace_job, fast=True),
        WARM_JOB: JobDef(warm_workspace_job, fast=True),
        EMBED_JOB: JobDef(embed_chunks_job, fast=False),
    },
    bulk_embedding=True,
    record_texts=CHUNK_TEXTS,
    search=SEARCH,
)

__all__ = ["SURFACE"]
