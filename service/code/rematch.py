"""The regex matching process: Python ``re`` over whole files, in a process the service can kill.

Regex search means Python's ``re``, exactly. ``re`` cannot be interrupted and holds the GIL while
it matches, so a catastrophic pattern (``(a+)+$``) would stall the server for as long as it
backtracks. The service therefore runs every regex match in a separate process (stdlib only,
started as ``python -I -S rematch.py``) and kills it when the search's time budget runs out,
keeping the files answered before. A process serves one request after another (``matchers.py``
keeps a few warm); it exits at the end of its input, or after ``IDLE_EXIT_S`` without a request.

Protocol: one JSON request per line on stdin::

    {"pattern": str, "flags": int, "root": str, "max_bytes": int, "max_matches": int,
     "alarm_s"?: int, "plan"?: {"literals": [str, ...], "ignore_case": bool, "single_line": bool},
     "files": [{"path": str, "text"?: str}, ...]}

then JSON lines on stdout, files in order: ``{"i": index, "lines": [[line, text], ...]}`` for a
file with matching lines, ``{"i": index, "skipped": true}`` for a file that could not be read,
``{"i": index}`` now and then to say the files up to ``index`` are done (a file without a match
has no line of its own), and ``{"done": true, "scanned": n}`` last (or ``{"error": message}``).
A file's line is written as soon as it is matched, so a process killed mid-request has told
what it found before. A file without ``text`` is read from ``root``: a regular file whose real
path lies inside the root, at most ``max_bytes``, without a NUL byte in its first 8 KiB (the
walker's own rules), decoded as UTF-8 with replacement, as the indexer reads it.

``plan`` (``prefilter.ScanPlan``) says which literals every match holds: a file holding none is
skipped, and when no match holds a newline only the lines holding one are matched (:class:`Guide`).

``alarm_s`` arms ``SIGALRM`` (no handler: the kernel ends the process) for the request: should
the service die while a match runs, the match still ends then.

The lines of a file are those on which a match starts, one entry per line as ``grep -n`` prints
them, numbered by ``\\n`` like the chunker: exactly the lines holding a position ``p`` where
``pattern.match(text, p)`` succeeds (``$`` at a line's end counts on that line).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

BINARY_PROBE_BYTES = 8192
MAX_LINE_CHARS = 4096  # a matched line comes back cut to this (the answer's snippet is shorter still)
MEMORY_LIMIT_BYTES = 2 << 30  # a pattern that makes re allocate without bound fails here, not on the host
NICENESS = 10
PROGRESS_EVERY_S = 0.005  # how often files without a match are reported done
IDLE_EXIT_S = 300.0  # a process without a request this long ends itself
GUIDE_SPAN = 512  # characters after a line holding a literal that a guided scan searches in the same call


class Guide:
    """Where matches can be, from a request's ``plan`` (``prefilter.ScanPlan``): every match holds
    one of ``literals``, found with ``str.find`` (literals of exact case: each text is read once
    per literal) or one ``re`` of them (ignoring case by ``re``'s own folding when
    ``ignore_case``); with ``single_line`` no match holds a newline."""

    def __init__(self, literals: list[str], ignore_case: bool, single_line: bool) -> None:
        self.single_line = single_line
        self._literals = None if ignore_case else list(dict.fromkeys(literals))
        alternation = "|".join(re.escape(literal) for literal in sorted(set(literals), key=len, reverse=True))
        self._any = re.compile(alternation, re.IGNORECASE if ignore_case else 0)

    @classmethod
    def of(cls, plan: dict[str, Any] | None) -> Guide | None:
        if not plan or not plan.get("literals"):
            return None
        return cls([str(literal) for literal in plan["literals"]], bool(plan.get("ignore_case")), bool(plan.get("single_line")))

    def finder(self, text: str) -> Callable[[int], int]:
        """For ``text``: where the next literal starts at or after a position (-1: none does)."""
        literals = self._literals
        if literals is None:
            search = self._any.search

            def find_any(position: int) -> int:
                found = search(text, position)
                return -1 if found is None else found.start()

            return find_any
        if len(literals) == 1:
            literal = literals[0]
            return lambda position: text.find(literal, position)
        upcoming = [text.find(literal) for literal in literals]  # each literal's next start (-1: no more)

        def find_first(position: int) -> int:
            first = -1
            for index, start in enumerate(upcoming):
                if 0 <= start < position:
                    start = upcoming[index] = text.find(literals[index], position)
                if start >= 0 and (first < 0 or start < first):
                    first = start
            return first

        return find_first


def line_matches(pattern: re.Pattern[str], text: str, max_matches: int, guide: Guide | None = None) -> list[tuple[int, str]]:
    """Lines of ``text`` where a match of ``pattern`` starts, as (1-based line number, line text),
    at most ``max_matches``, in line order (a match spanning lines counts on its first line).

    With a ``guide``, a text holding none of its literals has no match, and when no match holds a
    newline only the lines holding a literal are matched (``guided_line_matches``): the same lines."""
    if guide is not None:
        if guide.single_line:
            return guided_line_matches(pattern, text, max_matches, guide)
        if guide.finder(text)(0) < 0:
            return []
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


def guided_line_matches(pattern: re.Pattern[str], text: str, max_matches: int, guide: Guide, span: int = GUIDE_SPAN) -> list[tuple[int, str]]:
    """``line_matches`` of a pattern none of whose matches holds a newline: a match lies inside
    its line and holds a literal of ``guide``, so the text between a line holding one and the next
    such line is skipped. From each line holding a literal, ``re`` searches that line and the
    lines up to ``span`` characters after it in one call (where such lines are dense, one call per
    block instead of one per line; a match found in the block holds a literal all the same), up to
    and with the block's last newline (``endpos``: nothing a match there reads lies past it; what
    lies before is seen as ever, for ``\\b``, ``^`` and lookbehinds)."""
    matches: list[tuple[int, str]] = []
    position, line_no, counted_to, size = 0, 1, 0, len(text)
    find = guide.finder(text)
    while len(matches) < max_matches and position < size:
        hit = find(position)
        if hit < 0:
            break
        block_start = text.rfind("\n", 0, hit) + 1
        block_end = text.find("\n", min(hit + span, size))
        block_end = size if block_end < 0 else block_end
        found = pattern.search(text, block_start, block_end + 1)
        if found is None or found.start() > block_end:
            position = block_end + 1
            continue
        start = found.start()
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = size if line_end < 0 else line_end
        line_no += text.count("\n", counted_to, line_start)
        counted_to = line_start
        matches.append((line_no, text[line_start:line_end][:MAX_LINE_CHARS]))
        position = line_end + 1
    return matches


def scan_compile(pattern: str, flags: int) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, or a pattern that starts a match on the same lines (the lines
    ``line_matches`` reports: searched from each line's start) but tries fewer positions. A leading
    repeat of one character class or character:

    - without an upper bound, of characters that are never a newline, gets a lookbehind that no
      such character precedes (``(?<![a-z])[a-z]+\\d``): where a match starts inside a run of them,
      one starts at the run's start too (the repeat takes the run's first characters as well), and
      a run never holds a line's start, so the first match from a line's start is the same;
    - is cut into that character and the rest (``[0-9]{4}`` as ``[0-9][0-9]{3}``): the same
      matches, but ``re`` then skips ahead to the characters a match can start with."""
    compiled = re.compile(pattern, flags)
    try:
        from re import _compiler, _constants, _parser  # type: ignore[attr-defined]

        parsed = _parser.parse(pattern, flags)
        op, arg = parsed.data[0]
        if op not in (_constants.MAX_REPEAT, _constants.MIN_REPEAT, getattr(_constants, "POSSESSIVE_REPEAT", None)):
            return compiled
        low, high, body = arg
        if len(body.data) != 1 or body.data[0][0] not in (_constants.IN, _constants.LITERAL, _constants.ANY, _constants.NOT_LITERAL):
            return compiled
        item = body.data[0]
        run_start = high == _constants.MAXREPEAT and _compiler.compile(_parser.SubPattern(parsed.state, [item]), flags).fullmatch("\n") is None
        if low >= 1 and item[0] in (_constants.IN, _constants.LITERAL):
            # The character first (re skips ahead to it), then: not preceded by another (two back).
            rest_high = high if high == _constants.MAXREPEAT else high - 1
            after = [(_constants.ASSERT_NOT, (-1, _parser.SubPattern(parsed.state, [item, item])))] if run_start else []
            parsed.data[0:1] = [item, *after, *([(op, (low - 1, rest_high, body))] if rest_high else [])]
        elif run_start:
            parsed.data[0:0] = [(_constants.ASSERT_NOT, (-1, _parser.SubPattern(parsed.state, [item])))]
        else:
            return compiled
        faster: re.Pattern[str] = _compiler.compile(parsed, flags)
    except Exception:  # an internal of re changed: the plain compile serves
        return compiled
    return faster if faster.groups == compiled.groups and faster.flags == compiled.flags else compiled


class FileReader:
    """Reads workspace files under one root, whose real path is resolved once; each directory's
    real path once per request too (a request lists many files of few directories)."""

    def __init__(self, root: str, max_bytes: int) -> None:
        self.real_root = os.path.realpath(root)
        self.max_bytes = max_bytes
        self._inside = self.real_root + os.sep
        self._dirs: dict[str, str] = {}

    def read(self, rel_path: str) -> str | None:
        """The text of a workspace file, or None when it is gone, outside the root, too large or binary."""
        directory, _, name = rel_path.rpartition("/")
        real_dir = self._dirs.get(directory)
        if real_dir is None:
            real_dir = self._dirs[directory] = os.path.realpath(os.path.join(self.real_root, directory))
        real = os.path.join(real_dir, name)
        if not real.startswith(self._inside) or name in ("", ".", ".."):
            # The directory's real path leaves the root (a link swapped in since the walk), or the
            # name is not a plain one: resolve the whole path as it stands.
            real = os.path.realpath(os.path.join(self.real_root, rel_path))
            if not real.startswith(self._inside):
                return None
        data = self._read_bytes(real)
        if data is None and self._last_error == errno.ELOOP:
            # The file itself is now a link: read what it points to, if that is inside the root.
            real = os.path.realpath(real)
            data = self._read_bytes(real) if real.startswith(self._inside) else None
        if data is None or len(data) > self.max_bytes or b"\0" in data[:BINARY_PROBE_BYTES]:
            return None
        return data.decode("utf-8", errors="replace")

    _last_error = 0

    def _read_bytes(self, real: str) -> bytes | None:
        self._last_error = 0
        try:
            # O_NONBLOCK: a fifo swapped in since the walk must not block the open. O_NOFOLLOW: a
            # link swapped in for the file is resolved (and checked) first.
            descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            self._last_error = exc.errno or 0
            return None
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_size > self.max_bytes:
                return None
            pieces = []
            left = self.max_bytes + 1
            while left > 0:
                piece = os.read(descriptor, left)
                if not piece:
                    break
                pieces.append(piece)
                left -= len(piece)
            return b"".join(pieces)
        except OSError:
            return None
        finally:
            os.close(descriptor)


def read_text(root: str, rel_path: str, max_bytes: int) -> str | None:
    """The text of a workspace file, or None when it is gone, outside the root, too large or binary."""
    return FileReader(root, max_bytes).read(rel_path)


def serve(request: dict[str, Any], out: IO[str]) -> None:
    """Answer one request (see the module docstring), a line per matched file as it is matched."""
    pattern = scan_compile(request["pattern"], int(request["flags"]))
    guide = Guide.of(request.get("plan"))
    left = int(request["max_matches"])
    reader = FileReader(str(request["root"]), int(request["max_bytes"]))
    scanned = 0
    reported = time.monotonic()
    for index, item in enumerate(request["files"]):
        if left <= 0:
            break
        text = item.get("text")
        if text is None:
            text = reader.read(str(item["path"]))
        scanned = index + 1
        if text is None:
            out.write(json.dumps({"i": index, "skipped": True}) + "\n")
        else:
            found = line_matches(pattern, text, left, guide)
            if found:
                left -= len(found)
                out.write(json.dumps({"i": index, "lines": found}) + "\n")
            elif time.monotonic() - reported < PROGRESS_EVERY_S:
                continue
            else:
                out.write(f'{{"i": {index}}}\n')
        out.flush()
        reported = time.monotonic()
    out.write(json.dumps({"done": True, "scanned": scanned}) + "\n")
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


def requests(source: int, idle_exit_s: float) -> Iterator[bytes]:
    """The request lines read from ``source``, until its end or ``idle_exit_s`` without one."""
    pending = bytearray()
    while True:
        end = pending.find(b"\n")
        if end >= 0:
            line = bytes(pending[: end + 1])
            del pending[: end + 1]
            yield line
            continue
        readable, _, _ = select.select([source], [], [], idle_exit_s)
        if not readable:
            return  # idle too long: the pool starts another when it needs one
        data = os.read(source, 1 << 16)
        if not data:
            return
        pending += data


def main() -> int:
    """Serve requests until the end of input (or ``IDLE_EXIT_S`` without one); a request that
    fails ends the process (after its ``error`` line): its state after a ``MemoryError`` is not
    to be trusted."""
    _limit_resources()
    alarm = getattr(signal, "alarm", None)
    for line in requests(sys.stdin.fileno(), IDLE_EXIT_S):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if alarm is not None:
                alarm(max(int(request.get("alarm_s", 0)), 0))
            serve(request, sys.stdout)
        except (re.error, ValueError, KeyError, TypeError, MemoryError, RecursionError) as exc:
            sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            sys.stdout.flush()
            return 1
        finally:
            if alarm is not None:
                alarm(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
