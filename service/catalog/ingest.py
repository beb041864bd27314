"""Catalog ingest: entities to indexed records (owner-scoped keys), child diffs, and deletes.

A package is written as its index card, one record per export and one record with its files; an
MCP server as its card and one record per tool. Children that disappeared from a re-ingest are
deleted; children whose text is unchanged keep their vectors (``RecordIndex`` diffs content
hashes), so re-ingesting a server with one edited tool re-embeds that tool alone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.keys import GLOBAL_KINDS, SCOPE_RANKED, SCOPE_RANKED_HIDDEN, Kind, mcp_domain, record_key
from service.catalog.markdown import DEFAULT_BUDGET_CHARS, collapse_whitespace, headings, own_sections, section
from service.catalog.models import (
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
    parse_timestamp,
)
from service.catalog.render import guide_section_header
from service.engine.analyzer import analyze, terms_text
from service.engine.records import IndexRecord, RecordIndex
from service.engine.store import Filter, Match
from service.errors import Forbidden, NotFound, ValidationError

log = logging.getLogger(__name__)

# What the model reads: MiniLM sees ~256 word pieces, so longer text only costs time.
EMBED_CHARS = 1500
# Lexical terms of long bodies (guides, READMEs): enough to find them, bounded for BM25 and payload size.
TERMS_CHARS = 30_000
MAX_LINK_TERMS = 400
_CALLABLE = re.compile(r"(?:function\s+|const\s+|export\s+)*([A-Za-z_$][\w$]*)\s*(?:=\s*(?:async\s*)?)?\(")


@dataclass(frozen=True)
class IngestSummary:
    entity: str
    records: int
    to_embed: int
    removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "records": self.records, "toEmbed": self.to_embed, "removed": self.removed}


# ---- owners ----------------------------------------------------------------------------------------


def resolve_owner(caller: Caller, owner: str | None) -> str:
    """The tenant that owns user-scoped entities of this request: the caller, its org or one of its teams.

    ``team:<name>`` names the caller's team ``<name>`` of the caller's org; the stored tenant is
    ``team:<org>/<name>`` (``Caller.team_owner_tenant``: admins may name ``team:<org>/<name>``).
    """
    if owner in (None, "", "user"):
        return caller.user_tenant
    assert owner is not None
    if owner == "org":
        if not caller.org:
            raise ValidationError("owner 'org' needs a token with an org claim")
        return f"org:{caller.org}"
    kind, _, name = owner.partition(":")
    if kind not in ("user", "org", "team") or not name:
        raise ValidationError("owner must be 'user', 'org', 'team:<name>' (or, for admins, 'user:<sub>' / 'org:<org>' / 'team:<org>/<name>')")
    if kind == "team":
        tenant = caller.team_owner_tenant(name)
    else:
        tenant = owner if owner in caller.tenants or caller.admin else None
    if tenant is None:
        yours = ["user"] + (["org"] if caller.org else []) + [f"team:{team}" for team in caller.teams]
        raise Forbidden(f"owner {owner!r} is not one of your tenants ({', '.join(yours)})")
    return tenant


def tenant_for(entity: Entity, owner_tenant: str) -> str:
    return GLOBAL_TENANT if isinstance(entity, Capability | Domain | Guide) else owner_tenant


def refuse_repeated_entities(entities: Sequence[Entity], owner_tenant: str) -> None:
    """400 when one ``(type, id)`` of one owner appears twice in a batch, naming its positions:
    each copy's stale-child cleanup would delete the other's exports and tools after a 200."""
    positions: dict[tuple[str, str], list[int]] = {}
    for i, entity in enumerate(entities):
        positions.setdefault((tenant_for(entity, owner_tenant), entity_label(entity)), []).append(i)
    repeated = [(label, where) for (_, label), where in positions.items() if len(where) > 1]
    if repeated:
        named = "; ".join(
            f"{label} at entities[{where[0]}] and entities[{where[1]}]" + (f" (and {len(where) - 2} more)" if len(where) > 2 else "")
            for label, where in repeated[:5]
        )
        raise ValidationError(f"entities must be unique per owner in one request; repeated: {named}")


def lint_guide(guide: Guide, path: str) -> None:
    """The ``no-oversized-guide-section`` lint: each heading's own text fits the entity budget
    left after the header it is answered under, so opening any heading answers with its text,
    never a bare contents list. ``path`` names the field in the error."""
    for heading, size in own_sections(guide.markdown):
        room = DEFAULT_BUDGET_CHARS - len(guide_section_header(guide.id, guide.title, guide.summary, heading.slug))
        if size > room:
            raise ValidationError(
                f"{path}: section #{heading.slug} (line {heading.line}) has {size:,} characters of its own, "
                f"over the {room:,} that fit the {DEFAULT_BUDGET_CHARS:,}-character entity budget after its header "
                "(no-oversized-guide-section); split it under subheadings"
            )


def require_rights(caller: Caller, entities: Iterable[Entity]) -> None:
    globals_ = sorted({entity_type_of(e) for e in entities if isinstance(e, Capability | Domain | Guide)})
    if globals_ and not caller.admin:
        raise Forbidden(f"{', '.join(globals_)} entities are global built-ins and need an admin token (claim admin: true)")


# ---- records per entity ------------------------------------------------------------------------------


def _embed(*parts: str) -> str:
    text = "\n".join(p.strip() for p in parts if p and p.strip())
    return text[:EMBED_CHARS]


def _record(tenant: str, kind: Kind, entity_id: str, *, embed: str, terms: str, payload: dict[str, Any]) -> IndexRecord:
    base: dict[str, Any] = {"ranked": False, "hidden": False, "archived": False}
    base.update(payload)
    if base["ranked"]:
        base["scope"] = SCOPE_RANKED_HIDDEN if base["hidden"] else SCOPE_RANKED
    return IndexRecord(key=record_key(tenant, kind, entity_id), tenant=tenant, kind=kind.value, embed_text=embed or entity_id, terms=terms, payload=base)


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
    embed = _embed(f"{cap.title}: {cap.summary}", cap.description)
    terms = terms_text(cap.id, cap.title, cap.summary, cap.description, " ".join(cap.tags))
    return [_record(GLOBAL_TENANT, Kind.CAPABILITY, cap.id, embed=embed, terms=terms, payload=payload)]


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
    return [_record(GLOBAL_TENANT, Kind.DOMAIN, domain.id, embed=_embed(domain.id, domain.description), terms=terms_text(domain.id, domain.description), payload=payload)]


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
    records = [_record(tenant, Kind.PACKAGE, pkg.id, embed=embed, terms=terms, payload=payload)]
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
    embed = _embed(f"{export.subpath} ({', '.join(names)}): {export.purpose}", f"package {pkg.name_leaf}")
    terms = terms_text(export.subpath, " ".join(names), export.purpose, export.signature, " ".join(f.purpose for f in export.functions))
    return _record(tenant, Kind.EXPORT, f"{pkg.id}#{export.subpath}", embed=embed, terms=terms, payload=payload)


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
    return [_record(tenant, Kind.INTEGRATION, integration.id, embed=embed, terms=terms, payload=payload)]


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
    records = [_record(tenant, Kind.MCP_SERVER, server.id, embed=embed, terms=terms, payload=payload)]
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
        tool_embed = _embed(f"{tool.name}: {tool.description}", f"MCP server {server.id}")
        tool_terms = terms_text(tool.name, tool.description, server.id)
        records.append(_record(tenant, Kind.MCP_TOOL, f"{server.id}:{tool.name}", embed=tool_embed, terms=tool_terms, payload=tool_payload))
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


# ---- writes and deletes ----------------------------------------------------------------------------------


def _children_filter(tenant: str, kind: Kind, field: str, value: str) -> Filter:
    return Filter(must=(Match("tenant", tenant), Match("kind", kind.value), Match(field, value)))


async def _child_keys(index: RecordIndex, flt: Filter) -> set[str]:
    keys: set[str] = set()
    offset: str | None = None
    while True:
        page, offset = await index.engine.store.scroll(index.collection, flt, limit=512, offset=offset)
        keys.update(str(p.payload["key"]) for p in page)
        if offset is None:
            return keys


async def write_entities(index: RecordIndex, entities: Sequence[Entity], owner_tenant: str) -> list[IngestSummary]:
    """Write every entity's records in one batched write, then delete children (exports, tools) that are gone."""
    planned = [(entity, tenant_for(entity, owner_tenant)) for entity in entities]
    records = [(entity, tenant, records_for(entity, tenant)) for entity, tenant in planned]
    flat = [record for _, _, group in records for record in group]
    embedded = await _embedded_hashes(index, [r.key for r in flat])
    await index.write(flat)
    summaries = []
    for entity, tenant, group in records:
        # The same rule RecordIndex applies: a record keeps its vector only if that vector was computed from this text.
        to_embed = sum(1 for r in group if embedded.get(r.key) != r.content_hash)
        removed = await _drop_stale_children(index, entity, tenant, {r.key for r in group})
        summaries.append(IngestSummary(entity_label(entity), len(group), to_embed, removed))
    log.info("catalog entities written", extra={"tenant": owner_tenant, "entities": len(summaries), "to_embed": sum(s.to_embed for s in summaries)})
    return summaries


async def _embedded_hashes(index: RecordIndex, keys: Sequence[str]) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for start in range(0, len(keys), 1024):
        found = await index.get_many(keys[start : start + 1024])
        hashes.update({key: str(p["embedded_hash"]) for key, p in found.items() if p.get("embedded_hash")})
    return hashes


async def _drop_stale_children(index: RecordIndex, entity: Entity, tenant: str, fresh: set[str]) -> int:
    if isinstance(entity, Package):
        flt = _children_filter(tenant, Kind.EXPORT, "package_id", entity.id)
    elif isinstance(entity, McpServer):
        flt = _children_filter(tenant, Kind.MCP_TOOL, "server", entity.id)
    else:
        return 0
    stale = sorted(await _child_keys(index, flt) - fresh)
    if stale:
        await index.delete(stale)
    return len(stale)


# Delete target per `type` of `DELETE /v1/catalog/entities/{type}:{id}`.
_DELETE_KINDS: dict[str, Kind] = {
    "capability": Kind.CAPABILITY,
    "domain": Kind.DOMAIN,
    "guide": Kind.GUIDE,
    "package": Kind.PACKAGE,
    "integration": Kind.INTEGRATION,
    "mcp-server": Kind.MCP_SERVER,
    "secret": Kind.SECRET,
    "memory": Kind.MEMORY,
    "waiting": Kind.WAITING,
}


async def delete_entity(index: RecordIndex, caller: Caller, entity_type: str, entity_id: str, owner_tenant: str) -> int:
    """Delete one entity (and its children) of ``owner_tenant``; 404 when that owner has none."""
    kind = _DELETE_KINDS.get(entity_type)
    if kind is None:
        raise ValidationError(f"unknown entity type {entity_type!r}; use one of {', '.join(_DELETE_KINDS)}")
    if not entity_id:
        raise ValidationError(f"empty id after '{entity_type}:'")
    if kind in GLOBAL_KINDS:
        caller.require_admin()
        tenant = GLOBAL_TENANT
    else:
        tenant = owner_tenant
    if kind is Kind.MCP_SERVER and entity_id.startswith("mcp:"):
        entity_id = entity_id[4:]
    if kind is Kind.SECRET and ":" in entity_id:
        kind = Kind.PACKAGE_SECRET  # secret:{packageId}:{id} addresses a package-scoped reference
    key = record_key(tenant, kind, entity_id)
    if await index.get(key) is None:
        raise NotFound(f"no {entity_type}:{entity_id} in your catalog (owner {tenant})" if tenant != GLOBAL_TENANT else f"no built-in {entity_type}:{entity_id}")
    keys = [key]
    if kind is Kind.PACKAGE:
        keys.append(record_key(tenant, Kind.PACKAGE_FILES, entity_id))
        keys.extend(await _child_keys(index, _children_filter(tenant, Kind.EXPORT, "package_id", entity_id)))
    elif kind is Kind.MCP_SERVER:
        keys.extend(await _child_keys(index, _children_filter(tenant, Kind.MCP_TOOL, "server", entity_id)))
    await index.delete(keys)
    return len(keys)
