"""Helpers shared by the benchmarks: percentiles, the machine header, versions."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata

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
