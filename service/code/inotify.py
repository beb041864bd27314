"""Linux's inotify watch of a directory tree: the paths whose content or listing changed, and none of the opens that reads cause.

A general-purpose watcher asks the kernel for every open of a file in a watched directory too, so
each file any process reads (a regex search over the tree, a build, ``git status``) wakes it: over
a 15,590-file tree, a whole-tree regex search cost the service about 150 ms of CPU in such a
watcher, beside the search's own. ``TreeWatch`` asks for changes alone (writes, attributes,
creations, deletions, moves), one watch a directory, and does not descend into the directories
``skip`` names (pruned directories never hold a searchable file) nor follow links to directories;
of a skipped ``.git`` it watches its own entries and ``info``, for ``.git/info/exclude``. A directory created or
moved into the tree is watched as it arrives. A full event queue, the watch limit and a root that
goes away end the watch with a ``WatchError`` that says why: the caller then falls back to
revalidating by mtime.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
import time
from collections.abc import Callable

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_ISDIR = 0x40000000
# What a watch asks for: changes to a directory's entries and their contents, no opens or reads.
CHANGES = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
READ_BYTES = 64 << 10


class WatchError(Exception):
    """The watch cannot be set up or has ended; the message says why."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class TreeWatch:
    """The inotify watch of every directory under ``root`` that ``skip`` does not name; close it."""

    def __init__(self, root: str, skip: Callable[[str], bool]) -> None:
        if not hasattr(os, "O_CLOEXEC"):
            raise WatchError("inotify is not available on this platform")
        self.root = root.rstrip(os.sep) or os.sep
        self._skip = skip
        try:
            self._lib = _libc()
            self.fd = int(self._lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        except (OSError, AttributeError) as exc:
            raise WatchError(f"inotify is not available ({exc})") from None
        if self.fd < 0:
            raise WatchError(f"inotify cannot start ({os.strerror(ctypes.get_errno())})")
        self._poller = select.poll()  # not select(): a service holds many files, and select takes no descriptor past 1023
        self._poller.register(self.fd, select.POLLIN)
        self._paths: dict[int, str] = {}  # watch descriptor -> directory
        self._descriptors: dict[str, int] = {}
        self._git: set[str] = set()  # skipped .git directories watched for their info alone
        try:
            if not self._add(self.root):
                raise WatchError("the root is gone")
            self._add_below(self.root)
        except BaseException:
            self.close()
            raise

    @property
    def watched(self) -> int:
        """Directories watched now."""
        return len(self._paths)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> TreeWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def changes(self, debounce_ms: int, step_ms: int, timeout_ms: int, stop: threading.Event) -> set[str]:
        """The paths changed, once the tree has been quiet for ``step_ms`` after a change (at most
        ``debounce_ms`` after the first); empty after ``timeout_ms`` without one, or on ``stop``."""
        changed: set[str] = set()
        started = time.monotonic()
        first: float | None = None
        while not stop.is_set():
            now = time.monotonic()
            if first is None and now - started >= timeout_ms / 1000:
                break
            if first is not None and now - first >= debounce_ms / 1000:
                break
            if not self._poller.poll(step_ms):
                if first is not None:
                    break  # quiet for a step after a change
                continue
            if self._read(changed) and first is None:
                first = time.monotonic()
        return changed

    def _read(self, changed: set[str]) -> bool:
        """Read what events wait into ``changed``; whether any named a path."""
        named = False
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return named
            except OSError as exc:
                raise WatchError(f"the watch failed ({exc})") from None
            offset = 0
            while offset + _EVENT.size <= len(data):
                descriptor, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].split(b"\0", 1)[0]
                offset += _EVENT.size + length
                named |= self._event(descriptor, mask, os.fsdecode(name), changed)

    def _event(self, descriptor: int, mask: int, name: str, changed: set[str]) -> bool:
        if mask & IN_Q_OVERFLOW:
            raise WatchError("the tree changed faster than its watch could follow (the event queue overflowed)")
        directory = self._paths.get(descriptor)
        if directory is None:
            return False
        if mask & IN_IGNORED or (mask & (IN_DELETE_SELF | IN_MOVE_SELF) and not name):
            if directory == self.root:
                raise WatchError("the root is gone")
            if mask & IN_IGNORED:
                self._git.discard(directory)
                self._paths.pop(descriptor, None)
                if self._descriptors.get(directory) == descriptor:
                    del self._descriptors[directory]
            return False
        if not name:
            return False
        path = os.path.join(directory, name)
        if mask & IN_ISDIR:
            if mask & (IN_MOVED_FROM | IN_DELETE):
                self._forget(path)
            if mask & (IN_CREATE | IN_MOVED_TO):
                if directory not in self._git:
                    self._add_tree(path)
                elif name == "info":
                    self._add(path)
        changed.add(path)
        return True

    # ---- watches ---------------------------------------------------------------------------

    def _add_tree(self, top: str) -> None:
        if self._skip(top):
            self._add_git_info(top)
        elif self._add(top):
            self._add_below(top)

    def _add_below(self, top: str) -> None:
        pending = [top]
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue  # gone or unreadable since: its parent's events still come
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                if self._skip(entry.path):
                    self._add_git_info(entry.path)
                elif self._add(entry.path):
                    pending.append(entry.path)

    def _add_git_info(self, path: str) -> None:
        """Of a skipped ``.git``, its ``info`` (where ``exclude`` lives) alone, and the ``.git``
        itself for its entries only, so an ``info`` made later (``git init``) is watched too."""
        if os.path.basename(path) == ".git" and self._add(path):
            self._git.add(path)
            self._add(os.path.join(path, "info"))

    def _add(self, directory: str) -> bool:
        """Watch one directory; False where it is gone, no directory or unreadable by now."""
        descriptor = int(self._lib.inotify_add_watch(self.fd, os.fsencode(directory), CHANGES | IN_ONLYDIR | IN_DONT_FOLLOW))
        if descriptor < 0:
            code = ctypes.get_errno()
            if code == errno.ENOSPC:
                raise WatchError("the inotify watch limit is reached (fs.inotify.max_user_watches)")
            if code in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP):
                return False
            raise WatchError(f"{directory} cannot be watched ({os.strerror(code)})")
        self._paths[descriptor] = directory
        self._descriptors[directory] = descriptor
        return True

    def _forget(self, top: str) -> None:
        """Stop watching a directory gone from ``top`` and all below it (moved away, deleted)."""
        prefix = top + os.sep
        for directory in [d for d in self._descriptors if d == top or d.startswith(prefix)]:
            self._git.discard(directory)
            descriptor = self._descriptors.pop(directory)
            self._paths.pop(descriptor, None)
            self._lib.inotify_rm_watch(self.fd, descriptor)


__all__ = ["CHANGES", "TreeWatch", "WatchError"]
