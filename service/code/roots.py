"""Who may register which workspace root: the allowed bases expanded per caller, the service's own
directories that are never searchable, and who owns a root already registered.

Bases (``allowed_roots``) may name their owner with a placeholder segment, expanded per caller:
``{user}`` (the caller's ``sub``), ``{org}`` (the caller's org), ``{team}`` (each of the caller's
teams, under its org: a ``{team}`` base names ``{org}`` before it). A plain base (no placeholder)
is shared: in a multi-tenant deployment only admins register under it; a deployment that declares
itself single-tenant (``single_tenant``) lets every caller. A root must resolve (symlinks and
``..`` first) under one of the caller's bases, and every refusal of a root outside them reads the
same, whether or not the path exists.

The data directory, the index directory and every workspace's cache are never a workspace: a root
holding one or lying inside one is refused, and the walker prunes them from any tree (by path, and
by the marker file ``NO_INDEX_MARKER`` written into each, which also covers another deployment's
data directory on the same machine).

Ownership, as defence in depth behind the bases: in a multi-tenant deployment a root equal to,
inside, or holding a root another user registered is refused with 403, unless both lie under the
same ``{org}`` or ``{team}`` base, which the two callers then share.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from service.auth import Caller
from service.code.walker import NO_INDEX_MARKER
from service.code.workspace import Workspace
from service.errors import Forbidden, PathOutsideWorkspace, ValidationError
from service.settings import ROOT_PLACEHOLDERS, Settings

log = logging.getLogger(__name__)

_MARKER_TEXT = "agentsearch keeps its data here; it is never indexed as workspace code.\n"

USER, ORG, TEAM, SHARED, LOCAL = "user", "org", "team", "shared", "local"
# Bases whose workspaces several callers may hold (each its own) over the same tree.
SHARED_KINDS = frozenset({ORG, TEAM})


@dataclass(frozen=True)
class Base:
    """One allowed base as it applies to a caller: its real path and whose it is."""

    path: Path
    kind: str  # user, org, team (named after their owner), shared (a plain base) or local (the CLI)

    def holds(self, path: Path) -> bool:
        return path == self.path or self.path in path.parents


# ---- bases -------------------------------------------------------------------------------------


def placeholder_segment(value: str) -> str:
    """A claim value as one path segment that cannot leave its base: ``/``, ``%``, NUL and every
    other character outside letters, digits and ``@+-_.~`` are percent-encoded, and a leading dot
    too (no ``.``, ``..`` or hidden name). The encoding is one-to-one, so two callers never share one."""
    encoded = quote(value, safe="@+")
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded


def _values(caller: Caller) -> dict[str, list[str]]:
    """Each placeholder's values for ``caller``: a team is one only with its org."""
    teams = list(caller.teams) if caller.org else []
    return {"{user}": [caller.sub], "{org}": [caller.org] if caller.org else [], "{team}": teams}


def _kind(template: Path) -> str:
    parts = set(template.parts)
    if "{user}" in parts:
        return USER
    if "{team}" in parts:
        return TEAM
    return ORG if "{org}" in parts else SHARED


def expand_base(template: Path, caller: Caller) -> list[Path]:
    """The directories ``template`` names for ``caller`` (none when it lacks the claim a placeholder needs)."""
    parts = template.parts
    slots = [i for i, part in enumerate(parts) if part in ROOT_PLACEHOLDERS]
    values = _values(caller)
    expanded = []
    for choice in itertools.product(*(values[parts[i]] for i in slots)):
        segments = list(parts)
        for i, value in zip(slots, choice, strict=True):
            segments[i] = placeholder_segment(value)
        expanded.append(Path(*segments))
    return expanded


def caller_bases(settings: Settings, caller: Caller) -> list[Base]:
    """The bases open to ``caller``: those named after it, its org and teams, and the plain ones
    when it is an admin or the deployment is single-tenant."""
    bases: list[Base] = []
    for template in settings.allowed_roots:
        kind = _kind(template)
        if kind == SHARED and not (caller.admin or settings.is_single_tenant):
            continue
        bases.extend(Base(_real(path), kind) for path in expand_base(template, caller))
    return bases


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a loop in the operator's base: it holds nothing
        return path


def describe_bases(settings: Settings) -> str:
    """The mode and bases, for the start-up log line."""
    mode = "single-tenant (every caller may register under a plain base)" if settings.is_single_tenant else "multi-tenant (plain bases are for admins)"
    bases = ", ".join(str(base) for base in settings.allowed_roots) or "none"
    return f"workspace roots: {mode}; allowed bases: {bases}"


# ---- a caller's root -----------------------------------------------------------------------------


def resolve_caller_root(raw: str, settings: Settings, bases: Sequence[Base]) -> tuple[Path, Base]:
    """The real path of ``raw``, a directory under one of ``bases``, and that base."""
    expanded = _absolute(raw)
    try:
        resolved = Path(expanded).resolve()  # symlinks and '..' resolved before the check below
    except (RuntimeError, OSError):  # Python 3.11 reports a symlink loop as RuntimeError, later ones as OSError
        lexical = Path(os.path.normpath(expanded))
        if any(base.holds(lexical) for base in bases):
            raise ValidationError(f"root {raw!r} is a symlink loop; register a real directory") from None
        raise _outside(raw, settings, bases) from None
    base = next((base for base in bases if base.holds(resolved)), None)
    if base is None:
        raise _outside(raw, settings, bases)
    _require_directory(raw, resolved)
    return resolved, base


def resolve_local_root(raw: str) -> Path:
    """The real path of a directory named by the machine's owner (the CLI, the stdio MCP server): no base applies."""
    expanded = _absolute(raw)
    try:
        resolved = Path(expanded).resolve()
    except (RuntimeError, OSError):
        raise ValidationError(f"root {raw!r} is a symlink loop; register a real directory") from None
    _require_directory(raw, resolved)
    return resolved


def _absolute(raw: str) -> str:
    if "\0" in raw:
        raise ValidationError("root contains a NUL byte")
    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded):
        raise ValidationError(f"root {raw!r} must be an absolute path")
    return expanded


def _require_directory(raw: str, resolved: Path) -> None:
    try:
        is_dir = resolved.is_dir()
    except OSError as exc:  # a name longer than the file system allows, ...
        raise ValidationError(f"root {raw!r} is not an existing directory ({exc.strerror})") from None
    if not is_dir:
        raise ValidationError(f"root {raw!r} is not an existing directory")


def _outside(raw: str, settings: Settings, bases: Sequence[Base]) -> PathOutsideWorkspace:
    """One answer for every root outside the caller's bases: it never depends on what exists there."""
    if not settings.allowed_roots:
        return PathOutsideWorkspace(
            "no allowed workspace base directories are configured; the operator sets AGENTSEARCH_ALLOWED_ROOTS or --allow-root"
        )
    if not bases:
        return PathOutsideWorkspace(
            f"root {raw!r} is not under a workspace base directory open to you, and none is: bases named after "
            "a user, org or team ({user}, {org}, {team}) are their owners', plain ones are for admins in a "
            "multi-tenant deployment; ask the operator for one"
        )
    yours = ", ".join(str(base.path) for base in bases[:5]) + (", ..." if len(bases) > 5 else "")
    return PathOutsideWorkspace(
        f"root {raw!r} is not under a workspace base directory open to you ({yours}); symlinks and '..' are "
        "resolved first; register a directory inside one"
    )


# ---- the service's own directories -----------------------------------------------------------------


def protected_dirs(settings: Settings) -> tuple[Path, ...]:
    """The real paths of the data directory, the index directory and the local store: never searchable."""
    found: list[Path] = []
    for path in (settings.data_dir, settings.index_dir, settings.qdrant_path):
        if path is not None:
            real = _real(path.expanduser().absolute())
            if real not in found:
                found.append(real)
    return tuple(found)


def mark_no_index(directory: Path) -> None:
    """Write the marker that makes every walk prune ``directory`` (best effort: the path check stays)."""
    marker = directory / NO_INDEX_MARKER
    try:
        if not marker.exists():
            directory.mkdir(parents=True, exist_ok=True)
            marker.write_text(_MARKER_TEXT)
    except OSError as exc:
        log.warning("cannot mark a directory as never indexed", extra={"directory": str(directory), "error": str(exc)})


def _marked(directory: Path) -> bool:
    try:
        return (directory / NO_INDEX_MARKER).exists()
    except OSError:
        return False


def check_not_protected(raw: str, root: Path, protected: Iterable[Path], *, may_hold: bool = False) -> None:
    """Refuse a root that is or lies inside a protected directory (or another deployment's, by its
    marker), or holds one (``may_hold``: the machine's owner, whose walk prunes it instead)."""
    for directory in protected:
        if directory == root or directory in root.parents:
            raise _inside_protected(raw)
        if root in directory.parents and not may_hold:
            raise PathOutsideWorkspace(
                f"root {raw!r} holds a directory where agentsearch keeps its data or indexes ({directory.name}), which is "
                "never searchable; register a directory that does not hold it"
            )
    if any(_marked(parent) for parent in (root, *root.parents)):
        raise _inside_protected(raw)


def _inside_protected(raw: str) -> PathOutsideWorkspace:
    return PathOutsideWorkspace(
        f"root {raw!r} is, or lies inside, a directory where agentsearch keeps its data or indexes, which is never "
        "searchable; register a directory of source code"
    )


def registered_caches(settings: Settings, workspaces: Iterable[Workspace]) -> list[Path]:
    """The caches of workspaces that name their own ``index_dir`` (older entries may name one
    outside the data and index directories)."""
    return [_real(w.cache_dir(settings)) for w in workspaces if w.search.index_dir]


# ---- ownership -------------------------------------------------------------------------------------


def overlaps(a: Path, b: Path) -> bool:
    """Whether one of two real paths is, or lies inside, the other."""
    return a == b or a in b.parents or b in a.parents


def check_ownership(raw: str, root: Path, base: Base, tenant: str, registered: Iterable[Workspace]) -> None:
    """403 when ``root`` overlaps a root another user registered, except under a shared org or team base they both hold."""
    for workspace in registered:
        if workspace.tenant == tenant or not overlaps(root, workspace.root):
            continue
        if base.kind in SHARED_KINDS and workspace.base == str(base.path) and workspace.base_kind == base.kind:
            continue
        raise Forbidden(
            f"root {raw!r} overlaps a workspace another user registered (the same directory, one inside it or one "
            "holding it); register a directory of your own"
        )
