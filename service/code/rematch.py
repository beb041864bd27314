"""The regex matching process: Python ``re`` over whole files, in a process the service can kill.

Regex search means Python's ``re``, exactly. ``re`` cannot be interrupted and holds the GIL while
it matches, so a catastrophic pattern (``(a+)+$``) would stall the server for as long as it
backtracks. The service therefore runs every regex match in this separate process (stdlib only,
started as ``python -I -S rematch.py``) and kills it when the search's time budget runs out,
keeping the files answered before.

Protocol: one JSON request on stdin::

    {"pattern": str, "flags": int, "root": str, "max_bytes": int, "max_matches": int,
     "files": [{"path": str, "text"?: str}, ...]}

then one JSON line on stdout per file, in order (``{"i": index, "lines": [[line, text], ...]}``,
``"skipped": true`` for a file that could not be read), and ``{"done": true}`` last (or
``{"error": message}``). A file without ``text`` is read from ``root``: a regular file whose real
path lies inside the root, at most ``max_bytes``, without a NUL byte in its first 8 KiB (the
walker's own rules), decoded as UTF-8 with replacement, as the indexer reads it.

The lines of a file are those on which a match starts, one entry per line as ``grep -n`` prints
them, numbered by ``\\n`` like the chunker: exactly the lines holding a position ``p`` where
``pattern.match(text, p)`` succeeds (``$`` at a line's end counts on that line).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from typing import IO, Any

BINARY_PROBE_BYTES = 8192
MAX_LINE_CHARS = 4096  # a matched line comes back cut to this (the answer's snippet is shorter still)
MEMORY_LIMIT_BYTES = 2 << 30  # a pattern that makes re allocate without bound fails here, not on the host
NICENESS = 10


def line_matches(pattern: re.Pattern[str], text: str, max_matches: int) -> list[tuple[int, str]]:
    """Lines of ``text`` where a match of ``pattern`` starts, as (1-based line number, line text),
    at most ``max_matches``, in line order (a match spanning lines counts on its first line)."""
    matches: list[tuple[int, str]] = []
    position, line_no, counted_to = 0, 1, 0
    while len(matches) < max_matches and position <= len(text):
        found = pattern.search(text, position)
        if found is None:
            break
        start = found.start()
        line_no += text.count("\n", counted_to, start)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        matches.append((line_no, text[line_start:line_end][:MAX_LINE_CHARS]))
        # Continue on the next line: one entry per line, as grep prints.
        position, counted_to = line_end + 1, start
    return matches


def read_text(root: str, rel_path: str, max_bytes: int) -> str | None:
    """The text of a workspace file, or None when it is gone, outside the root, too large or binary."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, rel_path))
    if not real.startswith(real_root + os.sep):
        return None  # a symlink swapped in since the walk, pointing out of the workspace
    try:
        # O_NONBLOCK: a fifo swapped in since the walk must not block the open.
        descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                return None
            data = handle.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes or b"\0" in data[:BINARY_PROBE_BYTES]:
        return None
    return data.decode("utf-8", errors="replace")


def serve(request: dict[str, Any], out: IO[str]) -> None:
    """Answer one request (see the module docstring), a line per file as it is matched."""
    pattern = re.compile(request["pattern"], int(request["flags"]))
    left = int(request["max_matches"])
    root, max_bytes = str(request["root"]), int(request["max_bytes"])
    for index, item in enumerate(request["files"]):
        if left <= 0:
            break
        text = item.get("text")
        if text is None:
            text = read_text(root, str(item["path"]), max_bytes)
        if text is None:
            out.write(json.dumps({"i": index, "skipped": True}) + "\n")
            out.flush()
            continue
        found = line_matches(pattern, text, left)
        left -= len(found)
        out.write(json.dumps({"i": index, "lines": found}) + "\n")
        out.flush()
    out.write('{"done": true}\n')
    out.flush()


def _limit_resources() -> None:
    """Bound memory, and yield the CPU to the server: a hostile pattern burns a core until it is
    killed, and the server's own threads must not wait behind it."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform: the time budget still bounds the process
    with contextlib.suppress(AttributeError, OSError):
        os.nice(NICENESS)


def main() -> int:
    _limit_resources()
    try:
        serve(json.loads(sys.stdin.read()), sys.stdout)
    except (re.error, ValueError, KeyError, TypeError, MemoryError, RecursionError) as exc:
        sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
