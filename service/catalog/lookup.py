"""Entity detail, one concept: every entity type's resolver of ``{type}:{id}[#fragment]`` refs and the record reads they share.

Each resolver builds a structured detail document (``render`` writes its markdown).

Each ref resolves on its own; a failure is that ref's error (``LookupFailure``), never the batch's.
Known-id lookups ignore the hidden-package discovery preference. Fragments never fall back to the
whole document: a missing heading, line, file or export fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.callshapes import (
    accessor,
    call_shape,
    execute_snippet,
    export_contract,
    has_required_fields,
    input_type,
    output_type,
)
from service.catalog.domains import list_domain
from service.catalog.keys import Kind, mcp_domain, record_key
from service.catalog.markdown import fit_or_toc, line_range, parse_line_fragment, section
from service.catalog.model import normalize_subpath
from service.catalog.refs import EntityRef
from service.catalog.state import catalog_index
from service.catalog.waiting import user_tenants
from service.engine.analyzer import analyze
from service.engine.store import Filter, Match, MatchAny
from service.errors import AgentSearchError, FragmentNotFound, InvalidEntityRef, NotFound

if TYPE_CHECKING:
    from service.engine.runtime import Engine

MAX_RELATED_PACKAGES = 5
MAX_PACKAGE_SECRETS = 100
# Platform capabilities some answers name, when this catalog has them (absorbing a fork, authenticated fetch).
ABSORB_CAPABILITIES = ("communityGet", "repoPublishSession")
FETCH_CAPABILITY = "createAuthenticatedFetch"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class LookupFailure:
    entity: str
    code: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "ok": False, "error": {"code": self.code, "message": self.message}}


# ---- record access ------------------------------------------------------------------------------


async def user_record(engine: Engine, caller: Caller, kind: Kind, entity_id: str) -> Mapping[str, Any] | None:
    """The caller's record (own user first, then org and teams) of ``kind`` and ``entity_id``."""
    tenants = user_tenants(caller)
    keys = [record_key(t, kind, entity_id) for t in tenants]
    found = await catalog_index(engine).get_many(keys)
    return next((found[k] for k in keys if k in found), None)


async def global_record(engine: Engine, kind: Kind, entity_id: str) -> Mapping[str, Any] | None:
    return await catalog_index(engine).get(record_key(GLOBAL_TENANT, kind, entity_id))


async def known_capabilities(engine: Engine, names: tuple[str, ...]) -> frozenset[str]:
    """Which of ``names`` are built-in capabilities of this catalog: an answer names a platform call only when it exists."""
    keys = {record_key(GLOBAL_TENANT, Kind.CAPABILITY, name): name for name in names}
    found = await catalog_index(engine).get_many(list(keys))
    return frozenset(keys[key] for key in found)


async def package_secrets(engine: Engine, package: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The package-scoped secret references of ``package`` (metadata only), in name order."""
    flt = Filter(must=(Match("tenant", str(package["tenant"])), Match("kind", Kind.PACKAGE_SECRET.value), Match("package_id", str(package["package_id"]))))
    page, _ = await catalog_index(engine).scroll(flt, limit=MAX_PACKAGE_SECRETS)
    rows = [
        {"name": p.payload.get("title"), "description": p.payload.get("description") or "", "expiresAt": p.payload.get("expires_at") or None}
        for p in page
    ]
    return sorted(rows, key=lambda row: str(row["name"]))


async def find_package(engine: Engine, caller: Caller, ident: str) -> Mapping[str, Any] | None:
    """A package of the caller by id (UUID or slug) or by name leaf / scoped name."""
    found = await user_record(engine, caller, Kind.PACKAGE, ident)
    if found is not None:
        return found
    leaf = ident.rsplit("/", 1)[-1].lower()
    flt = Filter(must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.PACKAGE.value), Match("name_leaf", leaf)))
    page, _ = await catalog_index(engine).scroll(flt, limit=8)
    if not page:
        return None
    order = {t: i for i, t in enumerate(user_tenants(caller))}
    return min((p.payload for p in page), key=lambda p: order.get(str(p.get("tenant")), 99))


async def package_files(engine: Engine, package: Mapping[str, Any]) -> dict[str, str]:
    record = await catalog_index(engine).get(record_key(str(package["tenant"]), Kind.PACKAGE_FILES, str(package["package_id"])))
    return dict(record.get("files") or {}) if record else {}


async def package_export(engine: Engine, package: Mapping[str, Any], subpath: str) -> Mapping[str, Any] | None:
    key = record_key(str(package["tenant"]), Kind.EXPORT, f"{package['package_id']}#{normalize_subpath(subpath)}")
    return await catalog_index(engine).get(key)


async def related_packages(engine: Engine, caller: Caller, provider_terms: list[str], limit: int = MAX_RELATED_PACKAGES) -> list[dict[str, Any]]:
    """The caller's visible packages whose id, name, tags or README mention one of ``provider_terms``."""
    if not provider_terms:
        return []
    flt = Filter(
        must=(MatchAny("tenant", user_tenants(caller)), Match("kind", Kind.PACKAGE.value), MatchAny("link_terms", tuple(provider_terms))),
        must_not=(Match("hidden", True),),
    )
    page, _ = await catalog_index(engine).scroll(flt, limit=limit)
    return [{"entity": p.payload.get("entity"), "name": p.payload.get("name"), "summary": p.payload.get("summary")} for p in page]


# ---- resolve -----------------------------------------------------------------------------------------


async def resolve(engine: Engine, caller: Caller, ref: EntityRef, budget_chars: int) -> dict[str, Any]:
    """The detail document of one ref; raises NotFound / FragmentNotFound / InvalidEntityRef."""
    runtime = engine.settings.runtime_name
    if ref.type == "capability":
        return await _capability(engine, caller, ref, runtime)
    if ref.type == "guide":
        return await _guide(engine, ref, budget_chars)
    if ref.type == "package":
        return await _package(engine, caller, ref, budget_chars)
    if ref.type == "integration":
        return await _integration(engine, caller, ref)
    if ref.type == "mcp-server":
        return await _mcp_server(engine, caller, ref, runtime)
    return await _secret(engine, caller, ref)


def _no_fragment(ref: EntityRef) -> None:
    if ref.fragment is not None:
        raise InvalidEntityRef(f"invalid entity ref {ref.full!r}: {ref.type} refs take no '#' fragment; use {ref.ref!r}")


async def _capability(engine: Engine, caller: Caller, ref: EntityRef, runtime: str) -> dict[str, Any]:
    _no_fragment(ref)
    if ref.id.startswith("mcp:"):
        server, _, tool = ref.id[4:].partition(":")
        record = await user_record(engine, caller, Kind.MCP_TOOL, f"{server}:{tool}") if server and tool else None
        if record is None:
            raise NotFound(f"no MCP tool {ref.ref!r}; list a server's tools with entity 'mcp-server:{server or '<name>'}'")
        server_record = await user_record(engine, caller, Kind.MCP_SERVER, server)
        siblings = max(0, int((server_record or {}).get("tool_count", 1)) - 1)
        detail = _capability_detail(record, runtime)
        detail["server"] = server
        detail["relatedOperationCount"] = siblings
        detail["related"] = f"mcp-server:{server}"
        return detail
    record = await global_record(engine, Kind.CAPABILITY, ref.id)
    if record is None:
        raise NotFound(f"no capability {ref.ref!r}; search by task or list a domain with search({{ domain }})")
    return _capability_detail(record, runtime)


def _capability_detail(record: Mapping[str, Any], runtime: str) -> dict[str, Any]:
    call = accessor(record, runtime=runtime)
    return {
        "type": "capability",
        "entity": record.get("entity"),
        "title": record.get("title"),
        "summary": record.get("summary"),
        "description": record.get("description") or "",
        "domain": record.get("domain"),
        "callShape": call_shape(record, runtime=runtime),
        "accessor": call,
        "execute": execute_snippet(call, runtime=runtime),
        "inputTypeDefinition": input_type(record),
        "outputTypeDefinition": output_type(record),
        "nextStep": (
            "Run the execute snippet with params matching the input type."
            if has_required_fields(record)
            else "Run the execute snippet with params {} (no field is required)."
        ),
    }


async def _guide(engine: Engine, ref: EntityRef, budget_chars: int) -> dict[str, Any]:
    record = await global_record(engine, Kind.GUIDE, ref.id)
    if record is None:
        raise NotFound(f"no guide {ref.ref!r}; search for guides by topic")
    md = str(record.get("markdown", ""))
    body, part, is_toc = open_document(md, ref.ref, ref.fragment_parts, budget_chars)
    return {"type": "guide", "entity": ref.full, "title": record.get("title"), "summary": record.get("summary"), "part": part, "tableOfContents": is_toc, "markdown": body}


def open_document(md: str, ref: str, parts: tuple[str, ...], budget_chars: int) -> tuple[str, str, bool]:
    """(text, which part, is a table of contents) for a document and its fragment parts (heading or lines)."""
    if not parts:
        text, is_toc = fit_or_toc(md, budget_chars, ref)
        return text, "contents" if is_toc else "whole", is_toc
    if len(parts) > 1:
        raise InvalidEntityRef(f"invalid entity ref {ref}#{'#'.join(parts)}: a document takes one fragment (a heading slug, L165 or L165-L180)")
    fragment = parts[0]
    if parse_line_fragment(fragment) is not None:
        return line_range(md, fragment, max_chars=budget_chars), f"lines {fragment}", False
    body = section(md, fragment)
    if len(body) <= budget_chars:
        return body, section_part(fragment, contents=False), False
    toc, _ = fit_or_toc(body, budget_chars, ref)
    return toc, section_part(fragment, contents=True), True


def section_part(slug: str, *, contents: bool) -> str:
    """The ``part`` an opened heading is answered as: its text, or its contents when over the budget."""
    return f"section #{slug} (contents)" if contents else f"section #{slug}"


async def _package(engine: Engine, caller: Caller, ref: EntityRef, budget_chars: int) -> dict[str, Any]:
    package = await find_package(engine, caller, ref.id)
    if package is None:
        raise NotFound(f"no package {ref.ref!r} in your catalog; packages are found by id, UUID or name leaf")
    parts = ref.fragment_parts
    if not parts:
        known = await known_capabilities(engine, ABSORB_CAPABILITIES) if (package.get("fork") or {}).get("listingAhead") else frozenset()
        detail = package_index(package, runtime=engine.settings.runtime_name, known=known)
        secrets = await package_secrets(engine, package)
        if secrets:
            detail["secrets"] = secrets
        return detail
    export = await package_export(engine, package, parts[0]) if len(parts) == 1 else None
    if export is not None:
        return export_detail(export)
    files = await package_files(engine, package)
    path = parts[0]
    if path not in files:
        exports = ", ".join(f"#{e['subpath']}" for e in package.get("exports", [])[:10]) or "none"
        listed = ", ".join(f"#{p}" for p in sorted(files)[:10]) or "none"
        raise FragmentNotFound(f"{ref.ref} has no export or file {path!r}; exports: {exports}; files: {listed}")
    file_ref = f"package:{package['package_id']}#{path}"
    body, part, is_toc = open_document(files[path], file_ref, parts[1:], budget_chars)
    return {"type": "package-file", "entity": ref.full, "package": package.get("entity"), "path": path, "part": part, "tableOfContents": is_toc, "text": body}


def package_index(package: Mapping[str, Any], *, runtime: str, known: frozenset[str]) -> dict[str, Any]:
    """The slim package index: summary, export subpaths and purposes, job/retriever names, Intent.

    ``known``: which of ``ABSORB_CAPABILITIES`` this catalog has (the absorb step names them only then)."""
    fork = package.get("fork") or {}
    detail: dict[str, Any] = {
        "type": "package",
        "entity": package.get("entity"),
        "title": package.get("name"),
        "name": package.get("name"),
        "summary": package.get("summary"),
        "tags": list(package.get("tags") or []),
        "hidden": bool(package.get("hidden")),
        "exports": [{"entity": f"{package.get('entity')}#{e['subpath']}", "subpath": e["subpath"], "purpose": e.get("purpose", "")} for e in package.get("exports") or []],
        "jobs": [j["name"] for j in package.get("jobs") or []],
        "retrievers": [r["name"] for r in package.get("retrievers") or []],
        "intent": package.get("intent") or "",
        "files": list(package.get("files") or []),
    }
    if fork.get("listingAhead"):
        detail["listingAhead"] = True
        detail["nextStep"] = absorb_step(str(fork.get("upstream")), runtime=runtime, known=known)
    return detail


def absorb_step(upstream: str, *, runtime: str, known: frozenset[str]) -> str:
    """The one-line step of an outdated fork; it names the platform's absorb calls only where this catalog has them."""
    if known >= set(ABSORB_CAPABILITIES):
        get, publish = (accessor({"entity_id": name}, runtime=runtime) for name in ABSORB_CAPABILITIES)
        return f"The community listing {upstream} is ahead of this fork: call {get} for {upstream}, then {publish} with absorbed_upstream_commit to absorb it."
    return f"The community listing {upstream} is ahead of this fork (its pin is not an ancestor of the fork tip): absorb the upstream commits into the fork before relying on it."


def export_detail(export: Mapping[str, Any]) -> dict[str, Any]:
    """One export's contract: import specifier, purpose, execute snippet, types, functions, example."""
    contract = export_contract(export)
    detail: dict[str, Any] = {
        "type": "package-export",
        "entity": export.get("entity"),
        "title": export.get("title"),
        "package": f"package:{export.get('package_id')}",
        "subpath": export.get("subpath"),
        "purpose": export.get("purpose") or "",
        **contract,
    }
    if len(export.get("functions") or []) > 1:  # `functions` only when the module exports several callables
        detail["functions"] = list(export["functions"])
    if export.get("referenced_types"):
        detail["referencedTypes"] = export["referenced_types"]
    if export.get("example"):
        detail["example"] = export["example"]
    return detail


async def _integration(engine: Engine, caller: Caller, ref: EntityRef) -> dict[str, Any]:
    _no_fragment(ref)
    record = await user_record(engine, caller, Kind.INTEGRATION, ref.id)
    if record is None:
        raise NotFound(f"no saved integration {ref.ref!r}; search to see your integrations")
    detail: dict[str, Any] = {
        "type": "integration",
        "entity": record.get("entity"),
        "title": record.get("title"),
        "summary": record.get("summary"),
        "provider": record.get("provider"),
        "authType": record.get("auth_type") or None,
        "tokenUrl": record.get("token_url") or None,
        "authorizeUrl": record.get("authorize_url") or None,
        "apiBaseUrl": record.get("api_base_url") or None,
        "clientId": record.get("client_id") or None,
        "requiredHosts": list(record.get("required_hosts") or []),
        "scopes": list(record.get("scopes") or []),
        "docsUrl": record.get("docs_url") or None,
        "lastRefresh": record.get("last_refresh"),
        "tokens": tokens_note(ref.id, runtime=engine.settings.runtime_name, known=await known_capabilities(engine, (FETCH_CAPABILITY,))),
        "relatedPackages": await related_packages(engine, caller, name_terms(str(record.get("provider")), ref.id)),
    }
    step = reconnect_step(record)
    if step:
        detail["nextStep"] = step
    return detail


def tokens_note(integration_id: str, *, runtime: str, known: frozenset[str]) -> str:
    """Where an integration's tokens are: never in an answer; the authenticated-fetch call is named when this catalog has it."""
    if FETCH_CAPABILITY in known:
        fetch = accessor({"entity_id": FETCH_CAPABILITY}, runtime=runtime)
        return f"Access and refresh tokens live on the connection and are never returned: call {fetch}('{integration_id}') inside execute."
    return f"Access and refresh tokens live on the connection and are never returned: execute code uses the connection by the integration's id ('{integration_id}')."


def reconnect_step(record: Mapping[str, Any]) -> str | None:
    refresh = record.get("last_refresh") or {}
    if refresh.get("status") == "reconnectable":
        return f"Reconnect {record.get('title')}: its last token refresh failed and needs the user to re-authorize ({refresh.get('message') or 'reconnect required'})."
    return None


async def _mcp_server(engine: Engine, caller: Caller, ref: EntityRef, runtime: str) -> dict[str, Any]:
    _no_fragment(ref)
    name = ref.id[4:] if ref.id.startswith("mcp:") else ref.id
    record = await user_record(engine, caller, Kind.MCP_SERVER, name)
    if record is None:
        raise NotFound(f"no connected MCP server {name!r}; search to see your MCP servers")
    tools = await list_domain(engine, caller, mcp_domain(name))
    detail: dict[str, Any] = {
        "type": "mcp-server",
        "entity": record.get("entity"),
        "title": name,
        "summary": record.get("summary"),
        "description": record.get("description") or "",
        "instructions": record.get("instructions") or "",
        "domain": mcp_domain(name),
        "toolCount": len(tools),
        "tools": [
            {"entity": t.get("entity"), "name": t.get("tool"), "summary": t.get("summary"), "callShape": call_shape(t, runtime=runtime)} for t in tools
        ],
    }
    connection = record.get("connection") or {}
    if connection.get("status") in ("disconnected", "degraded"):
        detail["connection"] = dict(connection)
        reason = connection.get("message") or connection["status"]
        detail["nextStep"] = f"Ask the user to reconnect the MCP server {name} ({reason}); its tools fail until it is connected again."
    return detail


async def _secret(engine: Engine, caller: Caller, ref: EntityRef) -> dict[str, Any]:
    _no_fragment(ref)
    record = await user_record(engine, caller, Kind.SECRET, ref.id)
    if record is None:
        raise NotFound(
            f"no secret reference {ref.ref!r}; package-scoped secret references are listed in their package's detail: "
            'search({ entity: "package:<id>" })'
        )
    return {
        "type": "secret",
        "entity": record.get("entity"),
        "title": ref.id,
        "summary": record.get("summary"),
        "description": record.get("description") or "",
        "provider": record.get("provider") or None,
        "hosts": list(record.get("hosts") or []),
        "expiresAt": record.get("expires_at") or None,
        "note": "Metadata only: secret values are never returned. Use the secret by name inside execute.",
    }


def failure(entity: str, exc: AgentSearchError) -> LookupFailure:
    return LookupFailure(entity, exc.code, exc.message)


def name_terms(*names: str) -> list[str]:
    """The whole-identifier term of each name (``home-assistant`` -> ``homeassistant``), as ``link_terms`` holds it."""
    return sorted({analyze(name)[0] for name in names if analyze(name)})


def looks_like_uuid(text: str) -> bool:
    return bool(_UUID.match(text))
