"""Why a path in a workspace is not indexed: the walker's rule that skipped it, in words.

A search scoped to a ``path`` inside skipped content finds nothing; the answer says why (which
rule), so the caller neither takes the empty answer for "not there" nor retries it. The rules
are the walker's own (``walker.py``), checked for one path rather than for a whole tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from service.code.walker import BINARY_PROBE_BYTES, DEFAULT_SKIP_DIRS, NO_INDEX_MARKER, _IgnoreRules, _load_rules


def skip_reason(
    root: str | os.PathLike[str],
    rel_path: str,
    *,
    workspace_skip_dirs: Iterable[str],
    service_skip_dirs: Iterable[str],
    max_file_bytes: int,
) -> str | None:
    """Why the walker skips ``rel_path`` (relative to ``root``, ``/``-separated, resolved) or
    something above it; None when no rule does (it is indexed, or not indexed yet)."""
    real_root = os.path.realpath(root)
    workspace_dirs, service_dirs = frozenset(workspace_skip_dirs), frozenset(service_skip_dirs)
    exclude = _load_rules(os.path.join(real_root, ".git", "info", "exclude"), "")
    rules: list[_IgnoreRules] = [exclude] if exclude else []
    parts = [part for part in rel_path.split("/") if part]
    for depth, name in enumerate(parts):
        parent = "/".join(parts[:depth])
        own = _load_rules(os.path.join(real_root, parent, ".gitignore"), parent)
        rules = [own, *rules] if own else rules
        here = "/".join(parts[: depth + 1])
        absolute = os.path.join(real_root, here)
        if os.path.isdir(absolute):
            reason = _dir_reason(here, name, absolute, rules, workspace_dirs, service_dirs)
        else:
            reason = _file_reason(here, absolute, rules, max_file_bytes)
        if reason is not None:
            return reason
    return None


def _dir_reason(
    here: str, name: str, absolute: str, rules: list[_IgnoreRules], workspace_dirs: frozenset[str], service_dirs: frozenset[str]
) -> str | None:
    if name in DEFAULT_SKIP_DIRS:
        return f"{here!r} is not indexed: directories named {name!r} are always skipped ({', '.join(sorted(DEFAULT_SKIP_DIRS))})"
    if name in workspace_dirs:
        return f"{here!r} is not indexed: {name!r} is in the workspace's search.skip_dirs"
    if name in service_dirs:
        return f"{here!r} is not indexed: {name!r} is in the service's skip_dirs setting (AGENTSEARCH_SKIP_DIRS)"
    if _ignored_by(rules, here, is_dir=True):
        return f"{here!r} is not indexed: it is git-ignored (.gitignore or .git/info/exclude)"
    if os.path.exists(os.path.join(absolute, NO_INDEX_MARKER)):
        return f"{here!r} is not indexed: it holds the service's own data"
    return None


def _file_reason(here: str, absolute: str, rules: list[_IgnoreRules], max_file_bytes: int) -> str | None:
    if _ignored_by(rules, here, is_dir=False):
        return f"{here!r} is not indexed: it is git-ignored (.gitignore or .git/info/exclude)"
    try:
        info = os.stat(absolute)
        if not stat.S_ISREG(info.st_mode):
            return f"{here!r} is not indexed: it is not a regular file"
        size = info.st_size
        with open(absolute, "rb") as handle:
            binary = b"\0" in handle.read(BINARY_PROBE_BYTES)
    except OSError:
        return f"{here!r} is not indexed: it cannot be read"
    if size > max_file_bytes:
        return f"{here!r} is not indexed: it has {size:,} bytes, more than max_file_bytes ({max_file_bytes:,})"
    if binary:
        return f"{here!r} is not indexed: it is a binary file (a NUL byte in its first {BINARY_PROBE_BYTES:,} bytes)"
    return None


def _ignored_by(rules: list[_IgnoreRules], rel: str, *, is_dir: bool) -> bool:
    """git's precedence: the deepest file with an opinion decides (as the walker judges)."""
    for rule in rules:
        verdict = rule.verdict(rel, is_dir)
        if verdict is not None:
            return verdict
    return False
