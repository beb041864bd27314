"""Walking a workspace: which files code search sees, with their size and mtime.

What gets skipped:
- directories named ``.git``, ``node_modules``, ``vendor`` and every name in ``skip_dirs`` are
  pruned anywhere in the tree (exact names, not globs);
- ``.gitignore`` files are respected, the root one and nested ones, with git's precedence (a
  deeper file overrides a shallower one, ``!`` re-includes) and ``.git/info/exclude`` at the root;
- files larger than ``max_file_bytes`` and binary files (a NUL byte in the first 8 KiB) are
  skipped and counted;
- the service's own directories are never walked: a directory in ``protected`` (the data and index
  directories) or holding the marker file ``NO_INDEX_MARKER`` (every data directory and workspace
  cache has one) is pruned, a root inside one lists nothing, a link into one is skipped;
- symlinks: one whose target lies outside the root is never followed. A symlinked *file* inside
  the root is listed under its link path. A symlinked *directory* inside the root is not
  descended: its target is walked under its real path anyway, so following it would only list
  files twice and could loop.

Paths are relative to the root, ``/``-separated, and listed in a stable (sorted) order.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

logger = logging.getLogger(__name__)

DEFAULT_SKIP_DIRS: frozenset[str] = frozenset({".git", "node_modules", "vendor"})
BINARY_PROBE_BYTES = 8192
DEFAULT_MAX_FILE_BYTES = 1_000_000
# Written into every data directory and workspace cache: a directory holding it is never walked.
NO_INDEX_MARKER = ".agentsearch-noindex"


@dataclass(frozen=True, slots=True)
class WalkedFile:
    """One searchable file: ``path`` is relative to the root, ``/``-separated."""

    path: str
    size: int
    mtime_ns: int


@dataclass(slots=True)
class WalkResult:
    """The files of one walk and how many were left out, by reason."""

    files: list[WalkedFile] = field(default_factory=list)
    skipped_binary: int = 0
    skipped_too_large: int = 0
    skipped_ignored: int = 0
    skipped_symlinks: int = 0
    skipped_unreadable: int = 0
    pruned_dirs: int = 0


@dataclass(frozen=True, slots=True)
class _IgnoreRules:
    """A ``.gitignore`` and the directory (relative to the root) it lives in."""

    base: str
    spec: GitIgnoreSpec

    def verdict(self, rel_path: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by ``!``, None: no pattern of this file applies."""
        local = rel_path[len(self.base) + 1 :] if self.base else rel_path
        if is_dir:
            local += "/"
        return self.spec.check_file(local).include


def walk(
    root: Path,
    skip_dirs: Iterable[str] = (),
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    protected: Iterable[str | os.PathLike[str]] = (),
    known_text: Mapping[str, tuple[int, int]] | None = None,
) -> WalkResult:
    """List the searchable files under ``root`` (see the module docstring for the rules).

    ``known_text``: files known to be text, by path, with the ``(size, mtime_ns)`` they had then
    (a workspace's indexed files): one that still has them is not probed for a NUL byte again (its
    content is taken as unchanged, as the index's change detection takes it), which spares a
    revalidation of an unchanged tree an open and a read of every file."""
    real_root = os.path.realpath(root)
    if not os.path.isdir(real_root):
        raise NotADirectoryError(f"workspace root {root} is not a directory")
    walker = _Walker(real_root, DEFAULT_SKIP_DIRS | frozenset(skip_dirs), max_file_bytes, frozenset(os.path.realpath(p) for p in protected))
    walker.known_text = known_text or {}
    if walker.is_protected(real_root) or _marked_above(real_root):
        walker.result.pruned_dirs += 1
        return walker.result
    root_rules = _load_rules(os.path.join(real_root, ".git", "info", "exclude"), "")
    walker.walk_dir(real_root, "", [root_rules] if root_rules else [])
    return walker.result


class _Walker:
    def __init__(self, real_root: str, skip_dirs: frozenset[str], max_file_bytes: int, protected: frozenset[str]) -> None:
        self.real_root = real_root
        self.skip_dirs = skip_dirs
        self.max_file_bytes = max_file_bytes
        self.protected = protected
        self.result = WalkResult()
        self.known_text: Mapping[str, tuple[int, int]] = {}

    def is_protected(self, real_path: str) -> bool:
        """Whether a real path is, or lies inside, a protected directory."""
        return any(real_path == p or real_path.startswith(p.rstrip(os.sep) + os.sep) for p in self.protected)

    def walk_dir(self, abs_dir: str, rel_dir: str, rules: list[_IgnoreRules]) -> None:
        try:
            with os.scandir(abs_dir) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            self.result.skipped_unreadable += 1
            return
        if any(entry.name == NO_INDEX_MARKER for entry in entries):
            self.result.pruned_dirs += 1
            return
        own = _load_rules(os.path.join(abs_dir, ".gitignore"), rel_dir)
        # Deepest rules first: the first file with an opinion decides, as in git.
        rules = [own, *rules] if own else rules
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            self._visit(entry, rel, rules)

    def _visit(self, entry: os.DirEntry[str], rel: str, rules: list[_IgnoreRules]) -> None:
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            self.result.skipped_unreadable += 1
            return
        if is_dir:
            self._visit_dir(entry, rel, rules)
        elif is_link:
            self._visit_link(entry.path, rel, rules)
        else:
            self._visit_file(entry.path, rel, rules)

    def _visit_dir(self, entry: os.DirEntry[str], rel: str, rules: list[_IgnoreRules]) -> None:
        if entry.name in self.skip_dirs or entry.path in self.protected or _is_ignored(rules, rel, is_dir=True):
            self.result.pruned_dirs += 1
            return
        self.walk_dir(entry.path, rel, rules)

    def _visit_link(self, path: str, rel: str, rules: list[_IgnoreRules]) -> None:
        target = os.path.realpath(path)
        inside = target == self.real_root or target.startswith(self.real_root + os.sep)
        if not inside or os.path.isdir(target) or self.is_protected(target) or _marked_above(os.path.dirname(target), self.real_root):
            self.result.skipped_symlinks += 1
            return
        self._visit_file(path, rel, rules)

    def _visit_file(self, abs_path: str, rel: str, rules: list[_IgnoreRules]) -> None:
        if _is_ignored(rules, rel, is_dir=False):
            self.result.skipped_ignored += 1
            return
        try:
            info = os.stat(abs_path)
        except OSError:
            self.result.skipped_unreadable += 1
            return
        if not stat.S_ISREG(info.st_mode):
            return  # sockets, fifos, devices: never searchable
        if info.st_size > self.max_file_bytes:
            self.result.skipped_too_large += 1
            return
        binary = False if self.known_text.get(rel) == (info.st_size, info.st_mtime_ns) else _looks_binary(abs_path)
        if binary is None:
            self.result.skipped_unreadable += 1
        elif binary:
            self.result.skipped_binary += 1
        else:
            self.result.files.append(WalkedFile(rel, info.st_size, info.st_mtime_ns))


def walk_paths(
    root: Path,
    paths: Iterable[str],
    skip_dirs: Iterable[str] = (),
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    protected: Iterable[str | os.PathLike[str]] = (),
) -> WalkResult:
    """The files among ``paths`` (relative to ``root``) that ``walk(root, ...)`` would list, by the
    same rules, reading only their directories' ``.gitignore`` files: a path left out is gone,
    skipped, or a directory."""
    real_root = os.path.realpath(root)
    if not os.path.isdir(real_root):
        raise NotADirectoryError(f"workspace root {root} is not a directory")
    walker = _Walker(real_root, DEFAULT_SKIP_DIRS | frozenset(skip_dirs), max_file_bytes, frozenset(os.path.realpath(p) for p in protected))
    if walker.is_protected(real_root) or _marked_above(real_root):
        return walker.result
    root_rules = _load_rules(os.path.join(real_root, ".git", "info", "exclude"), "")
    in_effect: dict[str, list[_IgnoreRules] | None] = {}

    def rules_inside(rel_dir: str) -> list[_IgnoreRules] | None:
        """The rules that apply inside ``rel_dir``; None when the walk never enters it."""
        if rel_dir in in_effect:
            return in_effect[rel_dir]
        abs_dir = os.path.join(real_root, rel_dir) if rel_dir else real_root
        rules: list[_IgnoreRules] | None
        if not rel_dir:
            rules = [root_rules] if root_rules else []
        else:
            parent, _, name = rel_dir.rpartition("/")
            rules = rules_inside(parent)
            if rules is not None and (
                name in walker.skip_dirs
                or abs_dir in walker.protected
                or os.path.islink(abs_dir)
                or not os.path.isdir(abs_dir)
                or _is_ignored(rules, rel_dir, is_dir=True)
            ):
                rules = None
        if rules is not None and os.path.exists(os.path.join(abs_dir, NO_INDEX_MARKER)):
            rules = None
        if rules is not None:
            own = _load_rules(os.path.join(abs_dir, ".gitignore"), rel_dir)
            rules = [own, *rules] if own else rules
        in_effect[rel_dir] = rules
        return rules

    for rel in sorted(set(paths)):
        rules = rules_inside(rel.rpartition("/")[0])
        if rules is None:
            continue
        abs_path = os.path.join(real_root, rel)
        try:
            info = os.lstat(abs_path)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            walker._visit_link(abs_path, rel, rules)
        elif not stat.S_ISDIR(info.st_mode):
            walker._visit_file(abs_path, rel, rules)
    return walker.result


def _marked_above(real_path: str, stop: str | None = None) -> bool:
    """Whether ``real_path`` or a directory above it (up to ``stop``, else the file system's root) holds the marker."""
    current = real_path
    while True:
        if os.path.exists(os.path.join(current, NO_INDEX_MARKER)):
            return True
        parent = os.path.dirname(current)
        if parent == current or current == stop:
            return False
        current = parent


def _is_ignored(rules: list[_IgnoreRules], rel: str, is_dir: bool) -> bool:
    for rule in rules:
        verdict = rule.verdict(rel, is_dir)
        if verdict is not None:
            return verdict
    return False


def _load_rules(path: str, base: str) -> _IgnoreRules | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    spec = GitIgnoreSpec.from_lines(lines)
    return _IgnoreRules(base, spec) if len(spec) else None


def _looks_binary(path: str) -> bool | None:
    """Whether the file holds a NUL byte (the binary probe); None when the file cannot be read."""
    try:
        with open(path, "rb") as handle:
            return b"\0" in handle.read(BINARY_PROBE_BYTES)
    except OSError:
        return None
