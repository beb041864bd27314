"""Test helper: reading what waits in an arq queue of the real Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.engine.runtime import Engine


async def queued_functions(engine: Engine, queue: str) -> list[str]:
    """The functions of the jobs waiting in ``queue`` (arq keeps each job's body under its own key)."""
    from arq.jobs import Job

    functions = []
    for raw in await engine.redis.zrange(queue, 0, -1):
        info = await Job(raw.decode(), engine.redis, _queue_name=queue, _deserializer=engine.redis.job_deserializer).info()
        assert info is not None
        functions.append(info.function)
    return functions
