"""Registered workspaces: their search settings, who owns them, and the durable registry on disk.

A workspace is a directory tree on this node, registered by root path. It belongs to the tenant
of the user who registered it (``user:<sub>``): workspaces are checkouts on a machine, often with
uncommitted work, so org and team members do not share them; each registers its own. Its id is
derived from (owner, resolved root), so registering the same root again addresses the same
workspace. Who may register which root (bases named after their owner, the roots of other users)
is ``roots.py``'s; the entry records the base it was registered under.

Layout under the data directory::

    workspaces/<id>/workspace.json    the registry entry (this module)
    workspaces/<id>/chunks.sqlite     the chunk cache (``cache.py``)  } or under <index_dir>/<id>/,
    workspaces/<id>/trigram/          the trigram index (``trigram.py``) } the workspace's or the service's

The registry entry is written atomically (temp file, fsync, rename), so a crash never leaves a
half-written one, and it survives restarts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from service.settings import Settings

log = logging.getLogger(__name__)

REGISTRY_DIR = "workspaces"
ENTRY_FILE = "workspace.json"
ENTRY_FORMAT = 1


@dataclass(frozen=True)
class SearchConfig:
    """The ``search:`` block of one workspace: its own search settings."""

    skip_dirs: tuple[str, ...] = ()
    embeddings_model: str | None = None
    embeddings_dimensions: int | None = None
    prewarm_embeddings: bool = False
    index_dir: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["skip_dirs"] = list(self.skip_dirs)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchConfig:
        return cls(
            skip_dirs=tuple(data.get("skip_dirs") or ()),
            embeddings_model=data.get("embeddings_model"),
            embeddings_dimensions=data.get("embeddings_dimensions"),
            prewarm_embeddings=bool(data.get("prewarm_embeddings", False)),
            index_dir=data.get("index_dir"),
        )

    def index_affecting(self) -> tuple[Any, ...]:
        """The settings whose change invalidates the indexed chunks (model, cache location)."""
        return (self.embeddings_model, self.embeddings_dimensions, self.index_dir)


@dataclass(frozen=True)
class Workspace:
    """One registered workspace. ``warm``: its chunks are embedded in the background as they change."""

    id: str
    tenant: str
    root: Path
    search: SearchConfig = field(default_factory=SearchConfig)
    created_at: float = 0.0
    warm: bool = False
    base: str | None = None  # the allowed base it was registered under, as expanded for its owner
    base_kind: str | None = None  # whose base that is: user, org, team, shared or local (``roots.py``)

    def cache_dir(self, settings: Settings) -> Path:
        """Its own ``index_dir``, else the service's, else beside its registry entry."""
        if self.search.index_dir:
            return Path(self.search.index_dir).expanduser() / self.id
        if settings.index_dir is not None:
            return settings.index_dir / self.id
        return settings.data_dir / REGISTRY_DIR / self.id

    @property
    def embed_model(self) -> str | None:
        """The model named for its records (``None``: the service default)."""
        return self.search.embeddings_model

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": ENTRY_FORMAT,
            "id": self.id,
            "tenant": self.tenant,
            "root": str(self.root),
            "search": self.search.as_dict(),
            "created_at": self.created_at,
            "warm": self.warm,
            "base": self.base,
            "base_kind": self.base_kind,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workspace:
        return cls(
            id=str(data["id"]),
            tenant=str(data["tenant"]),
            root=Path(data["root"]),
            search=SearchConfig.from_dict(data.get("search") or {}),
            created_at=float(data.get("created_at", 0.0)),
            warm=bool(data.get("warm", False)),
            base=data.get("base"),
            base_kind=data.get("base_kind"),
        )


def workspace_id(tenant: str, root: Path) -> str:
    """``ws_`` + 20 hex digits of (owner, resolved root): the same registration, the same id."""
    return "ws_" + hashlib.sha256(f"{tenant}\x00{root}".encode()).hexdigest()[:20]


def is_workspace_id(text: str) -> bool:
    return len(text) == 23 and text.startswith("ws_") and all(c in "0123456789abcdef" for c in text[3:])


class WorkspaceRegistry:
    """The registry entries under ``<data_dir>/workspaces``."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir / REGISTRY_DIR
        # Entries read, by the file's identity (inode, mtime, size) then: every code search looks its
        # workspace up, and a stat is what a read and a parse cost over again (saves replace the file).
        self._read: dict[str, tuple[tuple[int, int, int], Workspace]] = {}

    def _entry(self, workspace_id: str) -> Path:
        return self.directory / workspace_id / ENTRY_FILE

    def get(self, workspace_id: str) -> Workspace | None:
        if not is_workspace_id(workspace_id):
            return None
        path = self._entry(workspace_id)
        try:
            stat = path.stat()
            identity = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            known = self._read.get(workspace_id)
            if known is not None and known[0] == identity:
                return known[1]
            workspace = Workspace.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            self._read.pop(workspace_id, None)
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("unreadable workspace entry", extra={"workspace": workspace_id, "error": str(exc)})
            return None
        self._read[workspace_id] = (identity, workspace)
        return workspace

    def save(self, workspace: Workspace) -> None:
        path = self._entry(workspace.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(workspace.as_dict(), handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def delete(self, workspace_id: str) -> None:
        self._entry(workspace_id).unlink(missing_ok=True)

    def owned_by(self, tenants: tuple[str, ...]) -> list[Workspace]:
        """Every workspace of ``tenants``, oldest first."""
        return [workspace for workspace in self.all() if workspace.tenant in tenants]

    def all(self) -> list[Workspace]:
        """Every readable registry entry, oldest first."""
        found = []
        if self.directory.is_dir():
            for entry in sorted(self.directory.iterdir()):
                workspace = self.get(entry.name)
                if workspace is not None:
                    found.append(workspace)
        return sorted(found, key=lambda w: w.created_at)


def new_workspace(tenant: str, root: Path, search: SearchConfig, base: str | None = None, base_kind: str | None = None) -> Workspace:
    return Workspace(
        id=workspace_id(tenant, root), tenant=tenant, root=root, search=search, created_at=time.time(), base=base, base_kind=base_kind
    )


def with_search(workspace: Workspace, search: SearchConfig) -> Workspace:
    """The workspace under new settings; a changed model or cache location makes it cold again."""
    reset = workspace.search.index_affecting() != search.index_affecting()
    return replace(workspace, search=search, warm=workspace.warm and not reset)
