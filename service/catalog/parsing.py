"""Catalog request bodies: the ingested entities, validated into ``model`` values.

``parse_entity`` reads one element of ``PUT /v1/catalog/entities``; every fault raises
``ValidationError`` naming the field path (``entities[3].exports[0].subpath``) and what to send.
Unknown fields are refused, which is also how secret values and integration tokens stay out: a
``value`` on a secret gets its own message, since secret values are never accepted or stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from service.catalog.model import (
    Capability,
    Connection,
    Domain,
    Entity,
    Export,
    ExportFunction,
    Fork,
    Guide,
    Integration,
    LastRefresh,
    McpServer,
    McpTool,
    Memory,
    NamedItem,
    Package,
    Secret,
    WaitingItem,
    normalize_subpath,
)
from service.errors import ValidationError
from service.validation import Fields

INGEST_TYPES = ("capability", "domain", "guide", "package", "integration", "mcp-server", "secret", "memory", "waiting")
MAX_ID = 200
MAX_TEXT = 20_000
MAX_MARKDOWN = 2_000_000
MAX_FILE = 1_000_000
_BAD_ID_CHARS = re.compile(r"[\s#|\x00-\x1f]")
# Fields that would carry a secret value or a token: named so the refusal says why.
SECRET_VALUE_FIELDS = ("value", "secretValue", "secret", "plaintext", "token", "accessToken", "refreshToken")
WAITING_STATUSES = ("block", "degraded", "setup")
WAITING_CATEGORIES = ("oauth-reconnect", "secret-expired", "mcp-reconnect", "setup", "onboarding", "other")
REFRESH_STATUSES = ("ok", "reconnectable", "failed")
# An MCP server's connection: degraded and disconnected servers show in the Waiting block.
CONNECTION_STATUSES = ("connected", "degraded", "disconnected")


def _id(fields: Fields, name: str = "id", *, no_colon: bool = False) -> str:
    value: str = fields.str(name, required=True, max_length=MAX_ID, non_empty=True)
    if _BAD_ID_CHARS.search(value):
        raise ValidationError(f"{fields._path(name)} {value!r} must not contain whitespace, '#' or '|'")
    if no_colon and ":" in value:
        raise ValidationError(f"{fields._path(name)} {value!r} must not contain ':'")
    return value


def _text(fields: Fields, name: str, *, required: bool = False, limit: int = MAX_TEXT) -> str:
    value: str = fields.str(name, required=required, default="", max_length=limit, non_empty=required)
    return value


def _tags(fields: Fields, name: str = "tags") -> tuple[str, ...]:
    value: tuple[str, ...] = fields.str_list(name, max_items=100, max_length=100)
    return value


def _objects(fields: Fields, name: str, max_items: int) -> list[Fields]:
    return [Fields(item, f"{fields._path(name)}[{i}]") for i, item in enumerate(fields.list(name, max_items=max_items))]


def _named_items(fields: Fields, name: str) -> tuple[NamedItem, ...]:
    items = []
    for i, item in enumerate(fields.list(name, max_items=200)):
        where = f"{fields._path(name)}[{i}]"
        if isinstance(item, str) and item.strip():
            items.append(NamedItem(item.strip()))
            continue
        sub = Fields(item, where)
        items.append(NamedItem(sub.str("name", required=True, max_length=MAX_ID, non_empty=True), _text(sub, "description")))
        sub.reject_unknown()
    return tuple(items)


def _schema(fields: Fields, name: str) -> dict[str, Any]:
    value = fields.raw(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{fields._path(name)} must be a JSON Schema object")
    return value


def _capability(f: Fields) -> Capability:
    cap_id = _id(f)
    if cap_id.startswith("mcp:"):
        raise ValidationError(f"{f._path('id')}: ids starting with 'mcp:' are MCP tools; ingest them as an mcp-server entity's tools")
    domain = _id(f, "domain")
    if domain.startswith("mcp:"):
        raise ValidationError(f"{f._path('domain')}: 'mcp:' domains are synthesized from connected MCP servers")
    return Capability(
        id=cap_id,
        domain=domain,
        title=_text(f, "title") or cap_id,
        summary=_text(f, "summary", required=True),
        description=_text(f, "description"),
        input_type=_text(f, "inputType"),
        output_type=_text(f, "outputType"),
        order=f.int("order", default=1_000_000, minimum=0, maximum=1_000_000),
        tags=_tags(f),
    )


def _domain(f: Fields) -> Domain:
    domain_id = _id(f)
    if domain_id.startswith("mcp:"):
        raise ValidationError(f"{f._path('id')}: 'mcp:' domains are synthesized from connected MCP servers")
    return Domain(
        id=domain_id,
        description=_text(f, "description", required=True),
        title=_text(f, "title"),
        order=f.int("order", default=1_000_000, minimum=0, maximum=1_000_000),
    )


def _guide(f: Fields) -> Guide:
    guide_id = _id(f)
    return Guide(
        id=guide_id,
        title=_text(f, "title") or guide_id,
        summary=_text(f, "summary"),
        markdown=_text(f, "markdown", required=True, limit=MAX_MARKDOWN),
        tags=_tags(f),
    )


def _export(f: Fields) -> Export:
    subpath = f.str("subpath", required=True, max_length=MAX_ID, non_empty=True)
    if _BAD_ID_CHARS.search(subpath):
        raise ValidationError(f"{f._path('subpath')} {subpath!r} must not contain whitespace, '#' or '|'")
    functions = []
    for sub in _objects(f, "functions", 100):
        functions.append(ExportFunction(sub.str("name", required=True, max_length=MAX_ID, non_empty=True), _text(sub, "signature"), _text(sub, "purpose")))
        sub.reject_unknown()
    referenced = f.raw("referencedTypes")
    if isinstance(referenced, list) and all(isinstance(t, str) for t in referenced):
        referenced = "\n\n".join(referenced)
    elif referenced is not None and not isinstance(referenced, str):
        raise ValidationError(f"{f._path('referencedTypes')} must be a string or a list of strings")
    return Export(
        subpath=normalize_subpath(subpath),
        purpose=_text(f, "purpose"),
        signature=_text(f, "signature"),
        type_definition=_text(f, "typeDefinition"),
        example=_text(f, "example"),
        functions=tuple(functions),
        referenced_types=referenced or "",
    )


def _files(f: Fields) -> dict[str, str]:
    raw = f.raw("files")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{f._path('files')} must be an object of path -> text")
    files: dict[str, str] = {}
    for path, text in raw.items():
        if not isinstance(text, str):
            raise ValidationError(f"{f._path('files')}[{path!r}] must be the file's text")
        if not path or path.startswith("/") or "#" in path or ".." in path.split("/"):
            raise ValidationError(f"{f._path('files')}: {path!r} must be a relative path without '#' or '..'")
        if len(text) > MAX_FILE:
            raise ValidationError(f"{f._path('files')}[{path!r}] is {len(text)} characters; the limit is {MAX_FILE}")
        files[path] = text
    return files


def _fork(f: Fields) -> Fork | None:
    sub = f.obj("fork")
    if sub is None:
        return None
    fork = Fork(
        upstream=sub.str("upstream", required=True, max_length=MAX_ID, non_empty=True),
        listing_pin=sub.str("listingPin", required=True, max_length=100, non_empty=True),
        tip_ancestors=sub.str_list("tipAncestors", max_items=10_000, max_length=100),
    )
    sub.reject_unknown()
    return fork


def _package(f: Fields) -> Package:
    exports = []
    for sub in _objects(f, "exports", 500):
        exports.append(_export(sub))
        sub.reject_unknown()
    subpaths = [e.subpath for e in exports]
    duplicate = next((s for s in subpaths if subpaths.count(s) > 1), None)
    if duplicate:
        raise ValidationError(f"{f._path('exports')} lists subpath {duplicate!r} twice")
    package_id = _id(f)
    return Package(
        id=package_id,
        name=f.str("name", default=package_id, max_length=MAX_ID) or package_id,
        summary=_text(f, "summary"),
        readme=_text(f, "readme", limit=MAX_FILE),
        tags=_tags(f),
        hidden=f.bool("hidden"),
        exports=tuple(exports),
        jobs=_named_items(f, "jobs"),
        retrievers=_named_items(f, "retrievers"),
        files=_files(f),
        fork=_fork(f),
    )


def _integration(f: Fields) -> Integration:
    for token_field in ("accessToken", "refreshToken", "token", "clientSecret"):
        if token_field in f.data:
            raise ValidationError(
                f"{f._path(token_field)}: integrations carry operational metadata only; tokens and client secrets "
                "live on the connection and are never accepted here"
            )
    refresh = None
    sub = f.obj("lastRefresh")
    if sub is not None:
        status = sub.str("status", required=True, max_length=40)
        if status not in REFRESH_STATUSES:
            raise ValidationError(f"{sub._path('status')} must be one of {', '.join(REFRESH_STATUSES)}")
        refresh = LastRefresh(status, _text(sub, "at"), _text(sub, "message"))
        sub.reject_unknown()
    integration_id = _id(f)
    return Integration(
        id=integration_id,
        name=_text(f, "name") or integration_id,
        provider=(_text(f, "provider") or integration_id).lower(),
        description=_text(f, "description"),
        auth_type=_text(f, "authType"),
        token_url=_text(f, "tokenUrl"),
        authorize_url=_text(f, "authorizeUrl"),
        api_base_url=_text(f, "apiBaseUrl"),
        client_id=_text(f, "clientId"),
        required_hosts=f.str_list("requiredHosts", max_items=100, max_length=300),
        scopes=f.str_list("scopes", max_items=200, max_length=300),
        docs_url=_text(f, "docsUrl"),
        tags=_tags(f),
        last_refresh=refresh,
    )


def _mcp_server(f: Fields) -> McpServer:
    server_id = _id(f, no_colon=True)
    if server_id.startswith("mcp:"):
        server_id = server_id[4:]
    tools = []
    for sub in _objects(f, "tools", 2000):
        name = _id(sub, "name")
        tools.append(McpTool(name, _text(sub, "description"), _schema(sub, "inputSchema"), _schema(sub, "outputSchema")))
        sub.reject_unknown()
    names = [t.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise ValidationError(f"{f._path('tools')} lists tool {duplicate!r} twice")
    return McpServer(
        id=server_id,
        description=_text(f, "description"),
        instructions=_text(f, "instructions"),
        url=_text(f, "url"),
        tools=tuple(tools),
        connection=_connection(f),
    )


def _connection(f: Fields) -> Connection | None:
    sub = f.obj("connection")
    if sub is None:
        return None
    status = sub.str("status", required=True, max_length=40)
    if status not in CONNECTION_STATUSES:
        raise ValidationError(f"{sub._path('status')} must be one of {', '.join(CONNECTION_STATUSES)}")
    connection = Connection(status, _timestamp(sub, "at"), _text(sub, "message", limit=2000))
    sub.reject_unknown()
    return connection


def _timestamp(f: Fields, name: str) -> str:
    """An ISO 8601 date or date-time (``2025-01-31``, ``2025-01-31T12:00:00Z``), or empty."""
    value = _text(f, name, limit=64)
    if value and parse_timestamp(value) is None:
        raise ValidationError(f"{f._path(name)} {value[:64]!r} must be an ISO 8601 date or date-time such as 2025-01-31 or 2025-01-31T12:00:00Z")
    return value


def parse_timestamp(value: str) -> datetime | None:
    """``value`` as an aware datetime (a date is its midnight UTC, a naive time is UTC); None when it is not ISO 8601."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _secret(f: Fields) -> Secret:
    for value_field in SECRET_VALUE_FIELDS:
        if value_field in f.data:
            raise ValidationError(
                f"{f._path(value_field)}: secret entities carry metadata only (id, description, provider, hosts, "
                "expiresAt, packageId); secret values are never accepted, stored or returned. Remove the field."
            )
    package_id = f.str("packageId", max_length=MAX_ID)
    if package_id is not None and (not package_id or _BAD_ID_CHARS.search(package_id)):
        raise ValidationError(f"{f._path('packageId')} must be a package id")
    return Secret(
        id=_id(f, no_colon=True),
        description=_text(f, "description"),
        package_id=package_id,
        provider=_text(f, "provider"),
        hosts=f.str_list("hosts", max_items=100, max_length=300),
        expires_at=_timestamp(f, "expiresAt"),
        tags=_tags(f),
    )


def _memory(f: Fields) -> Memory:
    return Memory(
        id=_id(f),
        text=_text(f, "text", required=True, limit=4000),
        tags=_tags(f),
        archived=f.bool("archived"),
        created_at=_text(f, "createdAt"),
    )


def _waiting(f: Fields) -> WaitingItem:
    status = f.str("status", required=True, max_length=40)
    if status not in WAITING_STATUSES:
        raise ValidationError(f"{f._path('status')} must be one of {', '.join(WAITING_STATUSES)}")
    category = f.str("category", default="other", max_length=40)
    if category not in WAITING_CATEGORIES:
        raise ValidationError(f"{f._path('category')} must be one of {', '.join(WAITING_CATEGORIES)}")
    return WaitingItem(
        id=_id(f),
        title=_text(f, "title", required=True, limit=500),
        status=status,
        category=category,
        detail=_text(f, "detail", limit=2000),
        next_step=_text(f, "nextStep", limit=2000),
        integration=_text(f, "integration", limit=MAX_ID),
        server=_text(f, "server", limit=MAX_ID),
    )


_READERS: dict[str, Callable[[Fields], Entity]] = {
    "capability": _capability,
    "domain": _domain,
    "guide": _guide,
    "package": _package,
    "integration": _integration,
    "mcp-server": _mcp_server,
    "secret": _secret,
    "memory": _memory,
    "waiting": _waiting,
}


def parse_entity(data: Any, where: str) -> Entity:
    """One ingest entity, validated; ``where`` prefixes field paths in error messages."""
    fields = Fields(data, where)
    entity_type = fields.str("type", required=True, max_length=40)
    reader = _READERS.get(entity_type)
    if reader is None:
        raise ValidationError(f"{where}.type {entity_type!r} is not an entity type; use one of {', '.join(INGEST_TYPES)}")
    entity = reader(fields)
    fields.reject_unknown()
    return entity

