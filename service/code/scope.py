"""Path and glob scope of a code search: which workspace files a query may look at.

- ``path``: ``None``, ``""`` or ``"."`` is the whole workspace; otherwise a file or directory
  relative to the workspace root (or absolute but inside it). ``..`` escapes, absolute paths
  outside the root and symlinks resolving outside it are refused with :class:`ScopeError`. The
  scope is kept as the *resolved* relative path, the form in which the walker lists files.
- ``glob``: a basename pattern (no ``/``: ``*.go``, matched against the file name at any depth) or
  a relative path pattern (``internal/*.go``, ``pkg/*_test.go``), matched against the path
  relative to the workspace root, or relative to the scope directory when ``path`` names one. ``*``
  and ``?`` never cross ``/``; ``[abc]`` and ``[!abc]`` are classes. There is no doublestar: a glob
  with ``**`` is refused, as are globs starting with ``/``, holding ``..`` or braces.
"""

from __future__ import annotations

import os
import posixpath
import re
import warnings
from dataclasses import dataclass
from pathlib import Path


class ScopeError(ValueError):
    """A path or glob that cannot scope a search; the message says what to fix."""


class ScopeNotFound(ScopeError):
    """The ``path`` names nothing in the workspace (as opposed to a path that escapes it)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """A resolved search scope; ``prefix`` is ``""`` for the whole workspace."""

    root: Path
    prefix: str
    is_file: bool
    glob: str | None
    _glob_regex: re.Pattern[str] | None = None

    def contains(self, rel_path: str) -> bool:
        """Whether a workspace file (relative, ``/``-separated) is in scope."""
        if self.prefix:
            if self.is_file:
                if rel_path != self.prefix:
                    return False
            elif not rel_path.startswith(self.prefix + "/"):
                return False
        return self._glob_matches(rel_path)

    def _glob_matches(self, rel_path: str) -> bool:
        if self._glob_regex is None:
            return True
        assert self.glob is not None
        if "/" not in self.glob:
            return self._glob_regex.fullmatch(posixpath.basename(rel_path)) is not None
        if self._glob_regex.fullmatch(rel_path) is not None:
            return True
        if self.prefix and not self.is_file:
            return self._glob_regex.fullmatch(rel_path[len(self.prefix) + 1 :]) is not None
        return False


def resolve_scope(root: Path, path: str | None, glob: str | None) -> Scope:
    """Check and resolve a search's ``path`` and ``glob`` against the workspace ``root``."""
    real_root = root.resolve()
    prefix, is_file = _resolve_path(real_root, path)
    normalized_glob = _normalize_glob(glob)
    glob_regex = glob_to_regex(normalized_glob) if normalized_glob else None
    return Scope(real_root, prefix, is_file, normalized_glob, glob_regex)


def _resolve_path(real_root: Path, path: str | None) -> tuple[str, bool]:
    raw = (path or "").strip()
    if raw in ("", "."):
        return "", False
    if "\0" in raw:
        raise ScopeError("path contains a NUL byte; give a path relative to the workspace root")
    if os.path.isabs(raw):
        candidate = Path(raw)
    else:
        normalized = posixpath.normpath(raw.replace(os.sep, "/"))
        if normalized == ".." or normalized.startswith("../"):
            raise ScopeError(f"path {raw!r} leaves the workspace; give a path inside it, relative to its root, or '.'")
        candidate = real_root / normalized
    try:
        resolved = candidate.resolve()
    except (RuntimeError, OSError):  # Python 3.11 reports a symlink loop as RuntimeError, later ones as OSError
        raise ScopeError(f"path {raw!r} is a symlink loop; give a file or directory inside the workspace, or '.'") from None
    if resolved != real_root and real_root not in resolved.parents:
        raise ScopeError(
            f"path {raw!r} resolves outside the workspace (an absolute path or a symlink pointing out); "
            "give a path inside the workspace, relative to its root, or '.'"
        )
    try:
        exists = resolved.exists()
    except OSError as exc:  # a name longer than the file system allows, ...
        raise ScopeNotFound(f"path {raw!r} does not exist in the workspace ({exc.strerror}); give an existing file or directory, or '.'") from None
    if not exists:
        raise ScopeNotFound(f"path {raw!r} does not exist in the workspace; give an existing file or directory, or '.'")
    relative = resolved.relative_to(real_root).as_posix()
    return ("" if relative == "." else relative), resolved.is_file()


def _normalize_glob(glob: str | None) -> str | None:
    if glob is None or not glob.strip():
        return None
    pattern = glob.strip()
    if "**" in pattern:
        raise ScopeError(
            f"glob {pattern!r} uses '**', which is not supported (no doublestar); use a basename pattern "
            "like '*.go' or a relative one like 'internal/*.go', and narrow the search with path"
        )
    if pattern.startswith("/"):
        raise ScopeError(f"glob {pattern!r} is absolute; write it relative to the workspace, like 'internal/*.go'")
    while pattern.startswith("./"):
        pattern = pattern[2:]
    segments = pattern.split("/")
    if ".." in segments:
        raise ScopeError(f"glob {pattern!r} contains '..'; globs match inside the workspace only")
    if "" in segments:
        raise ScopeError(f"glob {pattern!r} has an empty path segment; write it like 'internal/*.go'")
    if "{" in pattern or "}" in pattern:
        raise ScopeError(f"glob {pattern!r} uses braces, which are not supported; run one search per pattern")
    return pattern


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` within one path segment, ``[...]`` / ``[!...]`` classes (never ``/``)."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        elif char == "[" and (end := _class_end(pattern, index)) is not None:
            parts.append(_class_regex(pattern[index:end]))
            index = end + 1
        else:
            parts.append(re.escape(char))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "--" in a class: literal today, as intended
            return re.compile("".join(parts), re.DOTALL)
    except re.error as exc:
        raise ScopeError(
            f"glob {pattern!r} has an invalid character class ({exc.msg}); write it like '[a-z]*.go'"
        ) from None


def _class_end(pattern: str, start: int) -> int | None:
    """Index of the ``]`` closing a class opened before ``start``; a leading ``!`` or ``]`` is
    part of the class, as in fnmatch. None: no closing bracket, so ``[`` is literal."""
    index = start
    if index < len(pattern) and pattern[index] == "!":
        index += 1
    if index < len(pattern) and pattern[index] == "]":
        index += 1
    end = pattern.find("]", index)
    return None if end < 0 else end


def _class_regex(body: str) -> str:
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    escaped = re.sub(r"([\\^\[\]&~|])", r"\\\1", body)
    # Keep "-" as a range operator, like fnmatch; "/" is excluded so a class stays in one segment.
    return f"(?!/)[^{escaped}]" if negate else f"(?!/)[{escaped}]"
