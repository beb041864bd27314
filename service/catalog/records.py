"""The records one catalog entity becomes: owner-scoped keys, payload fields, embed text and terms.

A package becomes its index card, one record per export and one record with its files; an MCP
server its card and one record per tool; every other entity one record. One record per export and
per tool lets ``RecordIndex`` re-embed only the ones whose text changed.
"""

from __future__ import annotations

import re
from typing import Any

from service.auth import GLOBAL_TENANT
from service.catalog.keys import SCOPE_RANKED, SCOPE_RANKED_HIDDEN, Kind, mcp_domain, record_key
from service.catalog.markdown import collapse_whitespace, headings, section
from service.catalog.model import (
    Capability,
    Domain,
    Entity,
    Export,
    Guide,
    Integration,
    McpServer,
    Memory,
    Package,
    Secret,
    WaitingItem,
    entity_type_of,
)
from service.catalog.parsing import parse_timestamp
from service.engine.analyzer import analyze, name_parts, spoken, terms_text
from service.engine.records import IndexRecord

# What the model reads: MiniLM sees ~256 word pieces, so longer text only costs time.
EMBED_CHARS = 1500
# Lexical terms of long bodies (guides, READMEs): enough to find them, bounded for BM25 and payload size.
TERMS_CHARS = 30_000
MAX_LINK_TERMS = 400
# Context a member's text carries from its parent (an MCP server's or a package's description), in
# words: enough to say what the parent is, after the member's own words (the model reads the first
# 256 word pieces; the most telling parts go first).
CONTEXT_WORDS = 24
MAX_PARAMETERS = 12
PARAMETER_WORDS = 10
_FIELD = re.compile(r"([A-Za-z_$][\w$]*)\??\s*:")
_CALLABLE = re.compile(r"(?:function\s+|const\s+|export\s+)*([A-Za-z_$][\w$]*)\s*(?:=\s*(?:async\s*)?)?\(")


def _words(text: str, limit: int) -> str:
    """The first ``limit`` words of ``text``."""
    return " ".join(text.split()[:limit])


def _parameters(input_type: str) -> str:
    """A TypeScript-ish input type's field names as words: ``{ userId: string; note?: string }`` -> "Parameters: user id, note"."""
    names = [spoken(name) for name in _FIELD.findall(input_type or "")][:MAX_PARAMETERS]
    return f"Parameters: {', '.join(names)}" if names else ""


def _schema_parameters(schema: dict[str, Any]) -> str:
    """A JSON Schema's top-level properties as "Parameters: name (description), ..."."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return ""
    parts = []
    for name, spec in list(properties.items())[:MAX_PARAMETERS]:
        described = spec.get("description") if isinstance(spec, dict) else None
        parts.append(f"{spoken(str(name))} ({_words(str(described), PARAMETER_WORDS)})" if described else spoken(str(name)))
    return f"Parameters: {', '.join(parts)}" if parts else ""


def _name_words(*names: str) -> str:
    """Names as words for the record's name view, each word once: ``./slack/postMessage``,
    ``postMessage`` -> "slack post Message"."""
    first: dict[str, str] = {}
    for word in (part for name in names for part in name_parts(name)):
        first.setdefault(word.lower(), word)
    return " ".join(first.values())


def _embed(*parts: str) -> str:
    text = "\n".join(p.strip() for p in parts if p and p.strip())
    return text[:EMBED_CHARS]


def _record(tenant: str, kind: Kind, entity_id: str, *, embed: str, terms: str, payload: dict[str, Any], name: str = "") -> IndexRecord:
    """One record; ``name`` (the entity's name as words) is embedded too and composed into its vector
    (``service.engine.views``): an agent's words often meet a tool's name more directly than its
    description."""
    base: dict[str, Any] = {"ranked": False, "hidden": False, "archived": False}
    base.update(payload)
    if base["ranked"]:
        base["scope"] = SCOPE_RANKED_HIDDEN if base["hidden"] else SCOPE_RANKED
    key = record_key(tenant, kind, entity_id)
    return IndexRecord(key=key, tenant=tenant, kind=kind.value, embed_text=embed or entity_id, terms=terms, payload=base, embed_name=name.strip())


def capability_records(cap: Capability) -> list[IndexRecord]:
    payload = {
        "entity_type": "capability",
        "entity_id": cap.id,
        "entity": f"capability:{cap.id}",
        "title": cap.title,
        "summary": cap.summary,
        "description": cap.description,
        "domain": cap.domain,
        "input_type": cap.input_type,
        "output_type": cap.output_type,
        "order": cap.order,
        "tags": list(cap.tags),
        "ranked": True,
    }
    embed = _embed(f"{spoken(cap.title)}: {cap.summary}", cap.description, _parameters(cap.input_type))
    # Its name counts twice (id and title), its domain and parameter names once, like its words.
    terms = terms_text(cap.id, cap.title, cap.summary, cap.description, " ".join(cap.tags), cap.domain, _parameters(cap.input_type))
    return [_record(GLOBAL_TENANT, Kind.CAPABILITY, cap.id, embed=embed, terms=terms, payload=payload, name=spoken(cap.title))]


def domain_records(domain: Domain) -> list[IndexRecord]:
    payload = {
        "entity_type": "domain",
        "entity_id": domain.id,
        "domain": domain.id,
        "title": domain.title or domain.id,
        "description": domain.description,
        "order": domain.order,
        "declared": True,
    }
    embed = _embed(domain.id, domain.description)
    return [_record(GLOBAL_TENANT, Kind.DOMAIN, domain.id, embed=embed, terms=terms_text(domain.id, domain.description), payload=payload, name=spoken(domain.id))]


def guide_records(guide: Guide) -> list[IndexRecord]:
    heads = headings(guide.markdown)
    payload = {
        "entity_type": "guide",
        "entity_id": guide.id,
        "entity": f"guide:{guide.id}",
        "title": guide.title,
        "summary": guide.summary or _first_paragraph(guide.markdown),
        "markdown": guide.markdown,
        "tags": list(guide.tags),
        "ranked": True,
    }
    heading_text = "; ".join(h.text for h in heads[:40])
    embed = _embed(f"{guide.title}: {payload['summary']}", heading_text)
    terms = terms_text(guide.id, guide.title, guide.summary, " ".join(guide.tags), guide.markdown[:TERMS_CHARS])
    return [_record(GLOBAL_TENANT, Kind.GUIDE, guide.id, embed=embed, terms=terms, payload=payload)]


def _first_paragraph(md: str) -> str:
    for block in md.split("\n\n"):
        text = " ".join(block.split())
        if text and not text.startswith(("#", "```", "---", "|", "<")):
            return text[:240]
    return ""


def callable_names(export: Export) -> list[str]:
    """Function names an export offers: its ``functions`` or the name in its signature."""
    if export.functions:
        return [f.name for f in export.functions]
    match = _CALLABLE.search(export.signature)
    return [match.group(1)] if match else []


def intent_section(readme: str) -> str:
    """The README's ``Intent`` section body (the package index shows it), or ''."""
    for heading in headings(readme):
        if heading.slug == "intent":
            body = section(readme, heading.slug).split("\n", 1)
            return body[1].strip() if len(body) > 1 else ""
    return ""


def link_terms(*texts: str) -> list[str]:
    """Distinct analyzed words that tie a package to MCP servers and integrations of the same name."""
    seen: dict[str, None] = {}
    for text in texts:
        for term in analyze(text):
            if len(seen) >= MAX_LINK_TERMS:
                return list(seen)
            seen.setdefault(term, None)
    return list(seen)


def package_records(pkg: Package, tenant: str) -> list[IndexRecord]:
    intent = intent_section(pkg.readme)
    export_index = [{"subpath": e.subpath, "purpose": _one_line(e.purpose)} for e in pkg.exports]
    payload = {
        "entity_type": "package",
        "entity_id": pkg.id,
        "entity": f"package:{pkg.id}",
        "package_id": pkg.id,
        "name": pkg.name,
        "name_leaf": pkg.name_leaf.lower(),
        "name_scope": pkg.name_scope,
        "title": pkg.name,
        "summary": pkg.summary or _first_paragraph(pkg.readme),
        "tags": list(pkg.tags),
        "hidden": pkg.hidden,
        "intent": intent,
        "exports": export_index,
        "jobs": [{"name": j.name, "description": j.description} for j in pkg.jobs],
        "retrievers": [{"name": r.name, "description": r.description} for r in pkg.retrievers],
        "files": sorted(set(pkg.files) | ({"README.md"} if pkg.readme else set())),
        "fork": {"upstream": pkg.fork.upstream, "listingAhead": pkg.fork.listing_ahead} if pkg.fork else None,
        "link_terms": link_terms(pkg.id, pkg.name, " ".join(pkg.tags), pkg.readme[:TERMS_CHARS]),
        "ranked": True,
    }
    # Export purposes stay out of the card's embedded text: each export is embedded on its own, and
    # editing one export must not re-embed its package card.
    embed = _embed(f"{pkg.name_leaf}: {payload['summary']}", f"Tags: {', '.join(pkg.tags)}" if pkg.tags else "", intent)
    terms = terms_text(pkg.id, pkg.name, pkg.summary, " ".join(pkg.tags), pkg.readme[:TERMS_CHARS], " ".join(f"{e.subpath} {e.purpose}" for e in pkg.exports))
    records = [_record(tenant, Kind.PACKAGE, pkg.id, embed=embed, terms=terms, payload=payload, name=spoken(pkg.name_leaf))]
    records.extend(export_record(pkg, export, tenant) for export in pkg.exports)
    files = dict(pkg.files)
    if pkg.readme:
        files.setdefault("README.md", pkg.readme)
    files_payload = {"entity_type": "package", "entity_id": pkg.id, "package_id": pkg.id, "files": files}
    records.append(_record(tenant, Kind.PACKAGE_FILES, pkg.id, embed=f"files of {pkg.name}: " + " ".join(sorted(files)), terms="", payload=files_payload))
    return records


def export_record(pkg: Package, export: Export, tenant: str) -> IndexRecord:
    names = callable_names(export)
    payload = {
        "entity_type": "package",
        "entity_id": f"{pkg.id}#{export.subpath}",
        "entity": f"package:{pkg.id}#{export.subpath}",
        "package_id": pkg.id,
        "package_name": pkg.name,
        "name_leaf": pkg.name_leaf.lower(),
        "title": f"{pkg.name_leaf}/{export.subpath}",
        "summary": _one_line(export.purpose),
        "subpath": export.subpath,
        "purpose": export.purpose,
        "signature": export.signature,
        "type_definition": export.type_definition,
        "example": export.example,
        "functions": [{"name": f.name, "signature": f.signature, "purpose": f.purpose} for f in export.functions],
        "referenced_types": export.referenced_types,
        "callables": names,
        "identity_terms": terms_text(export.subpath, " ".join(names), export.purpose),
        "hidden": pkg.hidden,
        "ranked": True,
    }
    # The package's summary is context for the model only; in the terms every export would match it.
    embed = _embed(f"{export.subpath} ({', '.join(names)}): {export.purpose}", f"package {pkg.name_leaf}: {_words(pkg.summary, CONTEXT_WORDS)}")
    terms = terms_text(export.subpath, " ".join(names), export.purpose, export.signature, " ".join(f.purpose for f in export.functions))
    return _record(tenant, Kind.EXPORT, f"{pkg.id}#{export.subpath}", embed=embed, terms=terms, payload=payload, name=_name_words(export.subpath, *names))


def integration_records(integration: Integration, tenant: str) -> list[IndexRecord]:
    refresh = integration.last_refresh
    payload = {
        "entity_type": "integration",
        "entity_id": integration.id,
        "entity": f"integration:{integration.id}",
        "title": integration.name,
        "summary": _one_line(integration.description) or f"{integration.name} integration",
        "provider": integration.provider,
        "description": integration.description,
        "auth_type": integration.auth_type,
        "token_url": integration.token_url,
        "authorize_url": integration.authorize_url,
        "api_base_url": integration.api_base_url,
        "client_id": integration.client_id,
        "required_hosts": list(integration.required_hosts),
        "scopes": list(integration.scopes),
        "docs_url": integration.docs_url,
        "tags": list(integration.tags),
        "last_refresh": {"status": refresh.status, "at": refresh.at, "message": refresh.message} if refresh else None,
        "link_terms": link_terms(integration.id, integration.provider, integration.name),
        "ranked": True,
    }
    embed = _embed(f"{integration.name} integration ({integration.provider}): {integration.description}")
    terms = terms_text(integration.id, integration.name, integration.provider, integration.description, " ".join(integration.tags), " ".join(integration.required_hosts))
    return [_record(tenant, Kind.INTEGRATION, integration.id, embed=embed, terms=terms, payload=payload, name=spoken(integration.name))]


def mcp_server_records(server: McpServer, tenant: str) -> list[IndexRecord]:
    domain = mcp_domain(server.id)
    payload = {
        "entity_type": "mcp-server",
        "entity_id": server.id,
        "entity": f"mcp-server:{server.id}",
        "server": server.id,
        "domain": domain,
        "title": server.id,
        "summary": _one_line(server.description) or f"MCP server {server.id}",
        "description": server.description,
        "instructions": server.instructions,
        "url": server.url,
        # Only the first names: the domain index reads every server card, the tools live in their own records.
        "tool_samples": [t.name for t in server.tools[:3]],
        "tool_count": len(server.tools),
        "name_leaf": server.id.lower(),
        "connection": {"status": server.connection.status, "at": server.connection.at, "message": server.connection.message} if server.connection else None,
        "ranked": True,
    }
    embed = _embed(f"{server.id} MCP server: {server.description}", server.instructions[:500], "Tools: " + ", ".join(t.name for t in server.tools[:40]))
    terms = terms_text(server.id, server.description, server.instructions[:TERMS_CHARS], " ".join(t.name for t in server.tools))
    records = [_record(tenant, Kind.MCP_SERVER, server.id, embed=embed, terms=terms, payload=payload, name=spoken(server.id))]
    for position, tool in enumerate(server.tools):
        tool_id = f"mcp:{server.id}:{tool.name}"
        tool_payload = {
            "entity_type": "capability",
            "entity_id": tool_id,
            "entity": f"capability:{tool_id}",
            "server": server.id,
            "domain": domain,
            "tool": tool.name,
            "title": tool.name,
            "summary": _one_line(tool.description) or f"{tool.name} on {server.id}",
            "description": tool.description,
            "input_schema": tool.input_schema,
            "output_schema": tool.output_schema,
            "order": position,
        }
        parameters = _schema_parameters(tool.input_schema)
        tool_embed = _embed(f"{spoken(tool.name)}: {tool.description}", parameters, f"{server.id} MCP server: {_words(server.description, CONTEXT_WORDS)}")
        # The tool's name counts twice, then its description, parameters and server name. The server's
        # description stays out: every tool would match its words, and a server-scoped search could
        # no longer tell its tools apart; it reaches the ranking through the server's own record.
        tool_terms = terms_text(tool.name, tool.name, tool.description, parameters, server.id)
        records.append(_record(tenant, Kind.MCP_TOOL, f"{server.id}:{tool.name}", embed=tool_embed, terms=tool_terms, payload=tool_payload, name=spoken(tool.name)))
    return records


def secret_records(secret: Secret, tenant: str) -> list[IndexRecord]:
    scoped = secret.package_id is not None
    payload = {
        "entity_type": "secret",
        "entity_id": secret.id,
        "entity": f"secret:{secret.id}",
        "title": secret.id,
        "summary": _one_line(secret.description) or f"secret {secret.id}",
        "description": secret.description,
        "provider": secret.provider,
        "hosts": list(secret.hosts),
        "expires_at": secret.expires_at,
        "expires_ts": expiry.timestamp() if (expiry := parse_timestamp(secret.expires_at)) else None,  # waiting items filter on it
        "tags": list(secret.tags),
        "package_id": secret.package_id,
        # Package-scoped secret references are stored but never ranked (secretList / packageGet show them).
        "ranked": not scoped,
    }
    kind, entity_id = (Kind.PACKAGE_SECRET, f"{secret.package_id}:{secret.id}") if scoped else (Kind.SECRET, secret.id)
    embed = _embed(f"secret {secret.id}: {secret.description}", secret.provider)
    terms = terms_text(secret.id, secret.description, secret.provider, " ".join(secret.hosts), " ".join(secret.tags))
    return [_record(tenant, kind, entity_id, embed=embed, terms=terms, payload=payload)]


def memory_records(memory: Memory, tenant: str) -> list[IndexRecord]:
    payload = {"entity_type": "memory", "entity_id": memory.id, "text": memory.text, "tags": list(memory.tags), "archived": memory.archived, "created_at": memory.created_at}
    return [_record(tenant, Kind.MEMORY, memory.id, embed=_embed(memory.text), terms=terms_text(memory.text, " ".join(memory.tags)), payload=payload)]


def waiting_records(item: WaitingItem, tenant: str) -> list[IndexRecord]:
    payload = {
        "entity_type": "waiting",
        "entity_id": item.id,
        "title": item.title,
        "status": item.status,
        "category": item.category,
        "detail": item.detail,
        "next_step": item.next_step,
        "integration": item.integration,
        "server": item.server,
    }
    return [_record(tenant, Kind.WAITING, item.id, embed=_embed(item.title), terms=terms_text(item.title, item.detail), payload=payload)]


def records_for(entity: Entity, tenant: str) -> list[IndexRecord]:
    if isinstance(entity, Capability):
        return capability_records(entity)
    if isinstance(entity, Domain):
        return domain_records(entity)
    if isinstance(entity, Guide):
        return guide_records(entity)
    if isinstance(entity, Package):
        return package_records(entity, tenant)
    if isinstance(entity, Integration):
        return integration_records(entity, tenant)
    if isinstance(entity, McpServer):
        return mcp_server_records(entity, tenant)
    if isinstance(entity, Secret):
        return secret_records(entity, tenant)
    if isinstance(entity, Memory):
        return memory_records(entity, tenant)
    return waiting_records(entity, tenant)


def entity_label(entity: Entity) -> str:
    if isinstance(entity, Secret) and entity.package_id:
        return f"secret:{entity.package_id}:{entity.id}"
    return f"{entity_type_of(entity)}:{entity.id}"


def _one_line(text: str, limit: int = 200) -> str:
    return collapse_whitespace(text, limit) if text.strip() else ""
