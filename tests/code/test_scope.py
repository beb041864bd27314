"""Search scope: path resolution inside the workspace and the simple glob contract (``*``, ``?`` and classes within one path segment; no ``**``, no braces)."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from service.code.scope import ScopeError, glob_to_regex, resolve_scope


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for relative in (
        "internal/auth/token.go",
        "internal/auth/token_test.go",
        "internal/db.go",
        "pkg/x_test.go",
        "src/a.py",
        "srcfoo/b.py",
        "README.md",
    ):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("x\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "escape")
    os.symlink(root / "internal", root / "alias")
    return root


FILES = [
    "internal/auth/token.go",
    "internal/auth/token_test.go",
    "internal/db.go",
    "pkg/x_test.go",
    "src/a.py",
    "srcfoo/b.py",
    "README.md",
]


def in_scope(root: Path, path: str | None, glob: str | None) -> list[str]:
    scope = resolve_scope(root, path, glob)
    return [relative for relative in FILES if scope.contains(relative)]


@pytest.mark.parametrize("path", [None, "", ".", "./", "  .  ", "internal/.."])
def test_whole_workspace(workspace: Path, path: str | None) -> None:
    assert in_scope(workspace, path, None) == FILES


def test_a_directory_scope_is_a_prefix_on_segment_boundaries(workspace: Path) -> None:
    assert in_scope(workspace, "src", None) == ["src/a.py"]
    assert in_scope(workspace, "internal/auth/", None) == ["internal/auth/token.go", "internal/auth/token_test.go"]


def test_a_file_scope(workspace: Path) -> None:
    assert in_scope(workspace, "internal/db.go", None) == ["internal/db.go"]


def test_an_absolute_path_inside_the_root(workspace: Path) -> None:
    assert in_scope(workspace, str(workspace / "pkg"), None) == ["pkg/x_test.go"]


def test_a_symlink_inside_the_root_scopes_its_target(workspace: Path) -> None:
    scope = resolve_scope(workspace, "alias/auth", None)

    assert scope.prefix == "internal/auth"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("..", "leaves the workspace"),
        ("../outside", "leaves the workspace"),
        ("src/../../outside", "leaves the workspace"),
        ("/etc", "resolves outside the workspace"),
        ("escape", "resolves outside the workspace"),
        ("escape/anything", "resolves outside the workspace"),
        ("missing/dir", "does not exist"),
    ],
)
def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str, message: str) -> None:
    with pytest.raises(ScopeError, match=message):
        resolve_scope(workspace, path, None)


def test_scope_error_is_a_value_error() -> None:
    assert issubclass(ScopeError, ValueError)


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("*.go", ["internal/auth/token.go", "internal/auth/token_test.go", "internal/db.go", "pkg/x_test.go"]),
        ("*_test.go", ["internal/auth/token_test.go", "pkg/x_test.go"]),
        ("internal/*.go", ["internal/db.go"]),  # * does not cross /
        ("pkg/*_test.go", ["pkg/x_test.go"]),
        ("internal/*/*.go", ["internal/auth/token.go", "internal/auth/token_test.go"]),
        ("./src/*.py", ["src/a.py"]),
        ("[a-s]*.py", ["src/a.py", "srcfoo/b.py"]),
        ("[!a]*.py", ["srcfoo/b.py"]),
        ("?.py", ["src/a.py", "srcfoo/b.py"]),
        ("README.md", ["README.md"]),
        ("*.rs", []),
    ],
)
def test_globs(workspace: Path, glob: str, expected: list[str]) -> None:
    assert in_scope(workspace, ".", glob) == expected


def test_a_relative_glob_also_matches_from_the_scope_directory(workspace: Path) -> None:
    assert in_scope(workspace, "internal", "auth/*_test.go") == ["internal/auth/token_test.go"]
    assert in_scope(workspace, "internal", "internal/auth/*_test.go") == ["internal/auth/token_test.go"]
    assert in_scope(workspace, "src", "*.go") == []


@pytest.mark.parametrize(
    ("glob", "message"),
    [
        ("**/tests/**", "no doublestar"),
        ("internal/**/*.go", "no doublestar"),
        ("/abs/*.go", "absolute"),
        ("../*.go", r"contains '\.\.'"),
        ("a//b.go", "empty path segment"),
        ("*.{ts,tsx}", "braces"),
        ("[z-a].go", "invalid character class"),
    ],
)
def test_unsupported_globs_are_refused_with_a_hint(workspace: Path, glob: str, message: str) -> None:
    with pytest.raises(ScopeError, match=message):
        resolve_scope(workspace, ".", glob)


SEGMENT = st.text(alphabet="ab.", min_size=1, max_size=4)
PATTERN_SEGMENT = st.lists(st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]"]), min_size=1, max_size=4).map(
    "".join
)


@given(
    pattern=st.lists(PATTERN_SEGMENT, min_size=1, max_size=3).map("/".join),
    path=st.lists(SEGMENT, min_size=1, max_size=3).map("/".join),
)
def test_globs_match_segment_by_segment_like_fnmatch(pattern: str, path: str) -> None:
    pattern_segments, path_segments = pattern.split("/"), path.split("/")
    expected = len(pattern_segments) == len(path_segments) and all(
        fnmatch.fnmatchcase(segment, glob) for segment, glob in zip(path_segments, pattern_segments, strict=True)
    )

    assert (glob_to_regex(pattern).fullmatch(path) is not None) == expected


@given(
    name=st.text(alphabet="ab.", min_size=1, max_size=5),
    directories=st.lists(SEGMENT, max_size=3),
    pattern=PATTERN_SEGMENT,
)
def test_basename_globs_ignore_the_directories(name: str, directories: list[str], pattern: str) -> None:
    assume("**" not in pattern and pattern != "..")  # refused, tested above
    scope = resolve_scope(Path(__file__).parent, ".", pattern)  # any existing directory will do
    relative = "/".join([*directories, name])

    assert scope.contains(relative) == fnmatch.fnmatchcase(name, pattern)
