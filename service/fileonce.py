"""Files created once by whichever process comes first: a data directory's generated secret and ids.

Two processes starting on one data directory may both find the file missing; each writes its own
candidate to a private temporary file and links it into place. ``link()`` fails when the name
exists, so exactly one candidate wins and every process reads the winner's.
"""

from __future__ import annotations

import os
from pathlib import Path


def create_once(path: Path, content: str, *, mode: int | None = None) -> None:
    """Create ``path`` holding ``content`` unless it exists (then leave it as it is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(content)
    if mode is not None:
        tmp.chmod(mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
