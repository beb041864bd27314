"""The inotify watch of a workspace tree, on real files: reads wake it for nothing, changes are
reported by path (files, new and moved directories), pruned directories are not watched, and a
root that goes away ends it."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.code.inotify import CHANGES, TreeWatch, WatchError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

IN_ACCESS, IN_CLOSE_NOWRITE, IN_OPEN = 0x1, 0x10, 0x20
NEVER = threading.Event()


def pruned(directory: str) -> bool:
    return os.path.basename(directory) in {".git", "node_modules"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel in ("app/main.py", "app/util/text.py", "docs/readme.md", "node_modules/lib/index.js", ".git/HEAD", ".git/info/exclude", ".git/objects/ab/cd"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")
    return root


@pytest.fixture
def watch(tree: Path) -> Iterator[TreeWatch]:
    with TreeWatch(str(tree), pruned) as watching:
        yield watching


def changes(watch: TreeWatch, timeout_ms: int = 300) -> set[str]:
    return watch.changes(debounce_ms=800, step_ms=50, timeout_ms=timeout_ms, stop=NEVER)


def watch_masks(fd: int) -> list[int]:
    """The event mask of every watch on the inotify descriptor ``fd``, as the kernel holds them."""
    with open(f"/proc/self/fdinfo/{fd}") as handle:
        return [int(line.split("mask:")[1].split()[0], 16) for line in handle if line.startswith("inotify wd:")]


def test_reads_wake_the_watch_for_nothing_and_no_watch_asks_for_opens(tree: Path, watch: TreeWatch) -> None:
    masks = watch_masks(watch.fd)
    assert masks and all(mask & CHANGES == CHANGES and not mask & (IN_OPEN | IN_ACCESS | IN_CLOSE_NOWRITE) for mask in masks)
    for _ in range(3):
        for path in tree.rglob("*"):
            if path.is_file():
                path.read_bytes()
    assert changes(watch) == set()


def test_pruned_directories_are_not_watched_but_git_info_is(tree: Path, watch: TreeWatch) -> None:
    # repo, app, app/util, docs, .git (its own entries) and .git/info: nothing in node_modules or .git/objects.
    assert watch.watched == len(watch_masks(watch.fd)) == 6
    (tree / "node_modules" / "lib" / "index.js").write_text("changed\n")
    (tree / ".git" / "objects" / "ab" / "cd").write_text("object\n")
    assert changes(watch) == set()
    (tree / ".git" / "info" / "exclude").write_text("*.log\n")
    assert changes(watch) == {str(tree / ".git" / "info" / "exclude")}


def test_a_git_directory_made_after_the_watch_has_its_info_watched_alone(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    (root / "src").mkdir(parents=True)
    with TreeWatch(str(root), pruned) as watching:
        (root / ".git").mkdir()
        assert changes(watching) == {str(root / ".git")}
        (root / ".git" / "info").mkdir()
        (root / ".git" / "objects" / "ab").mkdir(parents=True)
        changes(watching)
        assert watching.watched == 4  # fresh, src, .git, .git/info
        (root / ".git" / "objects" / "ab" / "cd").write_text("object\n")
        (root / ".git" / "info" / "exclude").write_text("*.log\n")
        assert changes(watching) == {str(root / ".git" / "info" / "exclude")}


def test_edits_creations_and_deletions_are_reported_by_path(tree: Path, watch: TreeWatch) -> None:
    (tree / "app" / "main.py").write_text("def main(): pass\n")
    (tree / "app" / "util" / "new.py").write_text("x = 1\n")
    (tree / "docs" / "readme.md").unlink()
    assert changes(watch) == {str(tree / "app" / "main.py"), str(tree / "app" / "util" / "new.py"), str(tree / "docs" / "readme.md")}


def test_a_directory_created_or_moved_in_is_watched_as_it_arrives(tree: Path, watch: TreeWatch, tmp_path: Path) -> None:
    (tree / "lib" / "deep").mkdir(parents=True)
    assert str(tree / "lib") in changes(watch)
    (tree / "lib" / "deep" / "mod.py").write_text("y = 2\n")
    assert changes(watch) == {str(tree / "lib" / "deep" / "mod.py")}

    outside = tmp_path / "elsewhere"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "a.py").write_text("a = 1\n")
    os.rename(outside, tree / "vendored")
    assert changes(watch) == {str(tree / "vendored")}
    (tree / "vendored" / "pkg" / "a.py").write_text("a = 2\n")
    assert changes(watch) == {str(tree / "vendored" / "pkg" / "a.py")}


def test_a_directory_moved_away_is_no_longer_watched(tree: Path, watch: TreeWatch, tmp_path: Path) -> None:
    before = watch.watched
    os.rename(tree / "app", tmp_path / "app-moved")
    assert changes(watch) == {str(tree / "app")}
    assert watch.watched == before - 2  # app and app/util
    (tmp_path / "app-moved" / "main.py").write_text("outside now\n")
    assert changes(watch) == set()


def test_a_directory_moved_within_the_tree_is_watched_under_its_new_path(tree: Path, watch: TreeWatch) -> None:
    os.rename(tree / "app" / "util", tree / "docs" / "util")
    assert changes(watch) == {str(tree / "app" / "util"), str(tree / "docs" / "util")}
    (tree / "docs" / "util" / "text.py").write_text("moved\n")
    assert changes(watch) == {str(tree / "docs" / "util" / "text.py")}


def test_a_deleted_root_ends_the_watch(tree: Path, watch: TreeWatch) -> None:
    shutil.rmtree(tree)
    with pytest.raises(WatchError, match="the root is gone"):
        changes(watch, timeout_ms=2_000)


def test_a_missing_root_cannot_be_watched(tmp_path: Path) -> None:
    with pytest.raises(WatchError, match="the root is gone"):
        TreeWatch(str(tmp_path / "absent"), pruned)


def test_a_stop_ends_the_wait_at_once(watch: TreeWatch) -> None:
    stop = threading.Event()
    stop.set()
    assert watch.changes(debounce_ms=800, step_ms=50, timeout_ms=60_000, stop=stop) == set()


def test_a_watch_whose_descriptor_is_past_1023_still_waits_for_changes(tree: Path) -> None:
    """A service holds many files, so its watch's descriptor can be past what ``select`` takes."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1_100:
        pytest.skip(f"this process may not hold 1,100 files (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1_100), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1_030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with TreeWatch(str(tree), pruned) as watching:
            assert watching.fd > 1_023
            (tree / "app" / "main.py").write_text("changed\n")
            assert changes(watching) == {str(tree / "app" / "main.py")}
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
