"""Catalog values: one frozen dataclass per ingested entity type (``parsing`` builds them) and the search request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.catalog.cursor import ListingCursor
from service.catalog.refs import EntityRef


@dataclass(frozen=True)
class Capability:
    id: str
    domain: str
    title: str
    summary: str
    description: str = ""
    input_type: str = ""
    output_type: str = ""
    order: int = 1_000_000
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Domain:
    id: str
    description: str
    title: str = ""
    order: int = 1_000_000


@dataclass(frozen=True)
class Guide:
    id: str
    title: str
    summary: str
    markdown: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExportFunction:
    name: str
    signature: str = ""
    purpose: str = ""


@dataclass(frozen=True)
class Export:
    subpath: str
    purpose: str = ""
    signature: str = ""
    type_definition: str = ""
    example: str = ""
    functions: tuple[ExportFunction, ...] = ()
    referenced_types: str = ""


@dataclass(frozen=True)
class NamedItem:
    """A package job or retriever: a name and an optional one-line description."""

    name: str
    description: str = ""


@dataclass(frozen=True)
class Fork:
    """A community fork: outdated when the listing pin is not an ancestor of the fork tip."""

    upstream: str
    listing_pin: str
    tip_ancestors: tuple[str, ...] = ()

    @property
    def listing_ahead(self) -> bool:
        return self.listing_pin not in self.tip_ancestors


@dataclass(frozen=True)
class Package:
    id: str
    name: str
    summary: str = ""
    readme: str = ""
    tags: tuple[str, ...] = ()
    hidden: bool = False
    exports: tuple[Export, ...] = ()
    jobs: tuple[NamedItem, ...] = ()
    retrievers: tuple[NamedItem, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    fork: Fork | None = None

    @property
    def name_leaf(self) -> str:
        """``home-controls`` for ``@alice/home-controls``."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def name_scope(self) -> str | None:
        """``alice`` for ``@alice/home-controls``."""
        if self.name.startswith("@") and "/" in self.name:
            return self.name[1:].split("/", 1)[0]
        return None


@dataclass(frozen=True)
class LastRefresh:
    status: str
    at: str = ""
    message: str = ""


@dataclass(frozen=True)
class Integration:
    id: str
    name: str
    provider: str
    description: str = ""
    auth_type: str = ""
    token_url: str = ""
    authorize_url: str = ""
    api_base_url: str = ""
    client_id: str = ""
    required_hosts: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    docs_url: str = ""
    tags: tuple[str, ...] = ()
    last_refresh: LastRefresh | None = None


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Connection:
    """An MCP server's connection state as the platform last saw it."""

    status: str
    at: str = ""
    message: str = ""


@dataclass(frozen=True)
class McpServer:
    id: str
    description: str = ""
    instructions: str = ""
    url: str = ""
    tools: tuple[McpTool, ...] = ()
    connection: Connection | None = None


@dataclass(frozen=True)
class Secret:
    id: str
    description: str = ""
    package_id: str | None = None
    provider: str = ""
    hosts: tuple[str, ...] = ()
    expires_at: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Memory:
    id: str
    text: str
    tags: tuple[str, ...] = ()
    archived: bool = False
    created_at: str = ""


@dataclass(frozen=True)
class WaitingItem:
    id: str
    title: str
    status: str
    category: str = "other"
    detail: str = ""
    next_step: str = ""
    integration: str = ""
    server: str = ""


Entity = Capability | Domain | Guide | Package | Integration | McpServer | Secret | Memory | WaitingItem


def normalize_subpath(subpath: str) -> str:
    """``./bond-area-shades`` and ``bond-area-shades`` name the same export."""
    stripped = subpath[2:] if subpath.startswith("./") else subpath
    return stripped or "."


def entity_type_of(entity: Entity) -> str:
    return {
        Capability: "capability",
        Domain: "domain",
        Guide: "guide",
        Package: "package",
        Integration: "integration",
        McpServer: "mcp-server",
        Secret: "secret",
        Memory: "memory",
        WaitingItem: "waiting",
    }[type(entity)]


@dataclass(frozen=True)
class SearchRequest:
    """One validated ``POST /v1/catalog/search`` body (``search.parse`` builds it)."""

    query: str | None
    domain: str | None
    entity: list[tuple[str, EntityRef | str]] | None
    limit: int | None
    max_response_size: int | None
    include_hidden: bool
    cursor: ListingCursor | None = None
    # Which evidence ranks the hits: the served ranking, or one channel alone ("lexical", "dense") for evaluation.
    ranking: str = "served"
    # What the request's inputs changed (a query cut to its prefix, a limit clamped): every answer shows them.
    notices: tuple[str, ...] = ()
