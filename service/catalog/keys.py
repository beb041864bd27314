"""The catalog collection: its indexed payload fields, record kinds and the owner-scoped key scheme.

Every catalog record is one point of the ``catalog`` collection keyed ``{tenant}|{kind}|{id}``:

    global|capability|emailSend             built-in capability (admin)
    global|domain|email                     a domain's description and curated position (admin)
    global|guide|package_authoring          official guide (admin)
    user:alice|package|home-controls        saved package (its index card)
    user:alice|export|home-controls#./bond  one export contract of that package
    user:alice|package-files|home-controls  the package's files (README.md included); never ranked
    user:alice|integration|github           saved integration
    user:alice|mcp-server|home              connected MCP server
    user:alice|mcp-tool|home:set_pin        one tool of that server (domain ``mcp:home``)
    user:alice|secret|githubPat             user secret reference (metadata only)
    user:alice|package-secret|pkg:token     package-scoped secret reference (stored, never ranked)
    user:alice|memory|m1                    long-term memory
    user:alice|waiting|w1                   something the human must clear

The tenant is part of the key, so two owners may use the same package id without touching each
other's records: writes and deletes only ever address the caller's own keys. One record per export
and per MCP tool lets ``RecordIndex``'s content-hash diff re-embed only the ones whose text changed.
"""

from __future__ import annotations

from enum import StrEnum

from service.engine.records import collection_spec

SURFACE_NAME = "catalog"
COLLECTION = "catalog"

SPEC = collection_spec(
    COLLECTION,
    # ``connection.status`` and ``last_refresh.status``: the Waiting check reads the few servers down and
    # integrations to reconnect of a caller; unindexed, the store tested every server of the caller (5 ms
    # a search at 100k records), indexed it reads only those.
    keyword_fields=("entity_type", "entity_id", "domain", "server", "package_id", "name_leaf", "link_terms", "scope", "connection.status", "last_refresh.status"),
    integer_fields=("order",),
    bool_fields=("ranked", "hidden", "archived"),
)


class Kind(StrEnum):
    """Record kinds (the ``kind`` payload field)."""

    CAPABILITY = "capability"
    DOMAIN = "domain"
    GUIDE = "guide"
    PACKAGE = "package"
    EXPORT = "export"
    PACKAGE_FILES = "package-files"
    INTEGRATION = "integration"
    MCP_SERVER = "mcp-server"
    MCP_TOOL = "mcp-tool"
    SECRET = "secret"
    PACKAGE_SECRET = "package-secret"
    MEMORY = "memory"
    WAITING = "waiting"


# ``scope`` of records that unscoped ranked queries return. One keyword condition instead of
# kind + ranked + hidden: each extra condition is evaluated per point during the exact dense scan
# (85 ms vs 30 ms at 30k points on the dev machine).
SCOPE_RANKED = "ranked"
SCOPE_RANKED_HIDDEN = "ranked-hidden"
# Ranked kinds: capability, guide, package, export, integration, mcp-server, user secret. MCP tools
# are searched only with a domain scope; package-scoped secrets, memories, waiting items, domains and
# package files never rank.

# Kinds that live in the global tenant and need an admin token to write.
GLOBAL_KINDS = frozenset({Kind.CAPABILITY, Kind.DOMAIN, Kind.GUIDE})


def record_key(tenant: str, kind: Kind, entity_id: str) -> str:
    return f"{tenant}|{kind.value}|{entity_id}"


def split_key(key: str) -> tuple[str, str, str]:
    """(tenant, kind, id) of a record key."""
    tenant, kind, entity_id = key.split("|", 2)
    return tenant, kind, entity_id


def mcp_domain(server: str) -> str:
    return f"mcp:{server}"


def server_of_domain(domain: str) -> str | None:
    """``home`` for ``mcp:home``; None for a built-in domain."""
    return domain[4:] if domain.startswith("mcp:") and len(domain) > 4 else None
