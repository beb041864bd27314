"""The walker on real trees: skip dirs, binary and large files, nested .gitignore, symlinks."""

from __future__ import annotations

import os
import sysconfig
import time
from pathlib import Path

import pytest

from service.code.walker import NO_INDEX_MARKER, WalkResult, walk


def write(path: Path, content: str | bytes = "text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    write(target / "secret.py", "password = 1\n")
    return target


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "ws"
    write(root / "src" / "main.py", "def main():\n    pass\n")
    write(root / "src" / "util.go", "package util\n")
    write(root / "lib" / "a.rs", "fn a() {}\n")
    write(root / "README.md", "# readme\n")
    write(root / "coverage.txt", "a file named like a skipped dir is kept\n")
    for skipped in (
        "node_modules/x/index.js",
        ".git/config",
        "vendor/y.go",
        "coverage/r.txt",
        "deep/er/coverage/z.txt",
    ):
        write(root / skipped)
    write(root / "img.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(root / "late_nul.txt", b"a" * 9000 + b"\x00")  # the probe reads 8 KiB only
    write(root / "big.txt", "x" * 2_000)
    write(root / ".gitignore", "*.log\nbuild/\n")
    write(root / "app.log")
    write(root / "build" / "out.js")
    write(root / "pkg" / ".gitignore", "secret.txt\n/local_only.py\n!important.log\n")
    write(root / "pkg" / "secret.txt")
    write(root / "pkg" / "local_only.py")
    write(root / "pkg" / "sub" / "local_only.py")
    write(root / "pkg" / "sub" / "secret.txt")
    write(root / "pkg" / "important.log")
    write(root / "pkg" / "debug.log")
    os.symlink(outside, root / "escape_dir")
    os.symlink(outside / "secret.py", root / "escape_file.py")
    os.symlink(root, root / "src" / "loop")
    os.symlink(root / "src" / "main.py", root / "alias.py")
    os.symlink(root / "missing.py", root / "dangling.py")
    return root


def paths(result: WalkResult) -> set[str]:
    return {walked.path for walked in result.files}


def test_walk_lists_exactly_the_searchable_files(workspace: Path) -> None:
    result = walk(workspace, skip_dirs=["coverage"], max_file_bytes=1_000)

    assert paths(result) == {
        ".gitignore",
        "README.md",
        "alias.py",  # a symlink to a file inside the root
        "coverage.txt",
        "lib/a.rs",
        "pkg/.gitignore",
        "pkg/important.log",  # re-included by the nested !important.log
        "pkg/sub/local_only.py",  # /local_only.py is anchored to pkg/
        "src/main.py",
        "src/util.go",
    }


def test_walk_counts_what_it_skips(workspace: Path) -> None:
    result = walk(workspace, skip_dirs=["coverage"], max_file_bytes=1_000)

    assert result.skipped_binary == 1  # img.png
    assert result.skipped_too_large == 2  # big.txt, late_nul.txt
    assert result.skipped_ignored == 5  # app.log, pkg/secret.txt, pkg/local_only.py, pkg/sub/secret.txt, debug.log
    assert result.skipped_symlinks == 3  # escape_dir, escape_file.py, src/loop
    assert result.pruned_dirs == 6  # node_modules, .git, vendor, coverage x2, build
    assert result.skipped_unreadable == 1  # dangling.py


def test_binary_probe_reads_only_the_first_8_kib(workspace: Path) -> None:
    result = walk(workspace, skip_dirs=["coverage"])

    assert "late_nul.txt" in paths(result)
    assert "img.png" not in paths(result)


def test_a_file_known_as_text_with_its_size_and_mtime_is_not_probed_again(tmp_path: Path) -> None:
    """``known_text`` spares the binary probe of a file whose size and mtime are those it had when
    known as text: a NUL byte written in place with both kept (which the index's change detection
    cannot see either) leaves it listed, while a walk without ``known_text``, or one where the mtime
    moved, probes it and skips it as binary."""
    kept = write(tmp_path / "kept.py", "x = 1\n")
    moved = write(tmp_path / "moved.py", "y = 2\n")
    before = {path.name: (path.stat().st_size, path.stat().st_mtime_ns) for path in (kept, moved)}
    for path in (kept, moved):
        stamp = path.stat().st_mtime_ns
        path.write_bytes(path.read_bytes().replace(b" = ", b"\0= "))  # same size, now binary
        os.utime(path, ns=(stamp, stamp))
    os.utime(moved, ns=(before["moved.py"][1] + 10**9,) * 2)

    assert {f.path for f in walk(tmp_path, known_text=before).files} == {"kept.py"}
    unknown = walk(tmp_path)
    assert unknown.files == [] and unknown.skipped_binary == 2


def test_default_skip_dirs_apply_without_configuration(workspace: Path) -> None:
    listed = paths(walk(workspace))

    assert not any(p.startswith(("node_modules/", ".git/", "vendor/")) for p in listed)
    assert "coverage/r.txt" in listed and "deep/er/coverage/z.txt" in listed


def test_sizes_and_mtimes_come_from_the_files(workspace: Path) -> None:
    result = walk(workspace)
    by_path = {walked.path: walked for walked in result.files}

    info = os.stat(workspace / "src" / "main.py")
    assert by_path["src/main.py"].size == info.st_size
    assert by_path["src/main.py"].mtime_ns == info.st_mtime_ns
    assert [walked.path for walked in result.files] == sorted(by_path, key=lambda p: p.split("/"))


def test_a_symlinked_root_is_walked_through_its_target(workspace: Path, tmp_path: Path) -> None:
    link = tmp_path / "ws_link"
    os.symlink(workspace, link)

    assert paths(walk(link)) == paths(walk(workspace))


def test_nested_gitignore_overrides_the_root_one(tmp_path: Path) -> None:
    write(tmp_path / ".gitignore", "*.gen.py\n")
    write(tmp_path / "a" / ".gitignore", "!keep.gen.py\n")
    write(tmp_path / "a" / "keep.gen.py")
    write(tmp_path / "a" / "drop.gen.py")
    write(tmp_path / "b" / "keep.gen.py")

    listed = paths(walk(tmp_path))

    assert "a/keep.gen.py" in listed
    assert "a/drop.gen.py" not in listed and "b/keep.gen.py" not in listed


def test_git_info_exclude_is_respected(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "info" / "exclude", "local/\n")
    write(tmp_path / "local" / "notes.py")
    write(tmp_path / "kept.py")

    assert paths(walk(tmp_path)) == {"kept.py"}


def test_a_missing_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        walk(tmp_path / "missing")


def test_walk_of_the_standard_library_is_fast() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    walk(stdlib, skip_dirs=["site-packages"])  # warm the OS cache

    started = time.perf_counter()
    result = walk(stdlib, skip_dirs=["site-packages"])
    elapsed = time.perf_counter() - started

    assert len(result.files) > 1_500
    assert result.skipped_binary > 100  # the .pyc files
    assert not any("site-packages/" in walked.path for walked in result.files)
    assert elapsed < 1.5, f"walking the stdlib took {elapsed:.2f} s"


def test_the_services_own_directories_are_never_walked(tmp_path: Path) -> None:
    """A protected directory (by path), a directory holding the marker (another deployment's data,
    a workspace cache), links into either, and a root inside one: none yields a file."""
    (tmp_path / "app.py").write_text("x = 1\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "jwt-secret").write_text("secret\n")
    other = tmp_path / "nested" / "other-data"
    other.mkdir(parents=True)
    (other / NO_INDEX_MARKER).write_text("")
    (other / "jwt-secret").write_text("theirs\n")
    os.symlink(data / "jwt-secret", tmp_path / "key.txt")
    os.symlink(other / "jwt-secret", tmp_path / "their-key.txt")
    assert paths(walk(tmp_path, protected=[data])) == {"app.py"}
    assert walk(data, protected=[data]).files == [] and walk(other).files == []
    assert "data/jwt-secret" in paths(walk(tmp_path)), "the control: unprotected, the data directory is walked"
