"""Helpers shared by the benchmarks: percentiles, the machine header, versions, markdown tables."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

PACKAGES = ("qdrant-edge-py", "qdrant-client", "sentence-transformers", "torch", "aiohttp", "arq", "tantivy")


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def versions(packages: Sequence[str] = PACKAGES) -> str:
    found = []
    for name in packages:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A markdown table under a ``###`` title, flushed (long benches print as they go)."""
    print(f"### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print(flush=True)
