"""Capability domains: per-domain stats, the domain index, curated listings and broad-query detection.

Built-in domains live in the global tenant as ``domain`` records that carry their capability count
and sample names, refreshed whenever a capability or domain is written or deleted (a broad query
then reads a handful of records, not every capability). Connected MCP servers add one ``mcp:<name>``
domain each, visible to their owner only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.auth import GLOBAL_TENANT, Caller
from service.catalog.cursor import listing_key
from service.catalog.keys import Kind, mcp_domain, record_key, server_of_domain
from service.catalog.state import catalog_index, catalog_state
from service.engine.analyzer import STOPWORDS, analyze, terms_text
from service.engine.records import IndexRecord, RecordIndex
from service.engine.store import Filter, Match, MatchAny
from service.errors import UnknownDomain

if TYPE_CHECKING:
    from service.engine.runtime import Engine

SAMPLE_NAMES = 3
# Built-in domains change only when an admin writes capabilities; other front ends see a write
# within this many seconds (this process at once: its writes drop the cache).
BUILTIN_CACHE_S = 5.0
_PAGE = 1024
# Words that only ask what exists ("what can you do", "list capabilities", "show me everything").
# A query made of these, stopwords and domain ids alone is exploratory; any other word is a task.
_DISCOVERY_WORDS = (
    "what can could you do does kody list lists show me all available capability capabilities tool tools "
    "feature features function functions help everything anything things stuff domain domains overview browse "
    "explore able there are your my options skills abilities kinds types supported support offer offers "
    "provide provides tell about else have has hi hello menu catalog index"
)
DISCOVERY_TERMS = frozenset(term for word in _DISCOVERY_WORDS.split() for term in analyze(word)) | STOPWORDS


@dataclass(frozen=True)
class BuiltinDomains:
    """The built-in domain rows with their ids and analyzed terms, computed once per cache fill."""

    rows: tuple[DomainRow, ...]
    ids: frozenset[str]
    terms: frozenset[str]
    loaded_at: float

    @classmethod
    def of(cls, rows: Sequence[DomainRow]) -> BuiltinDomains:
        ids = frozenset(row.id for row in rows)
        terms = frozenset(term for domain in ids for term in analyze(domain))
        return cls(tuple(rows), ids, terms, time.monotonic())


@dataclass(frozen=True)
class DomainRow:
    id: str
    description: str
    capability_count: int
    samples: tuple[str, ...]
    source: str  # builtin | mcp

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "domain",
            "entity": None,
            "domain": self.id,
            "description": self.description,
            "capabilityCount": self.capability_count,
            "samples": list(self.samples),
            "source": self.source,
        }


async def _scroll(index: RecordIndex, flt: Filter) -> list[Mapping[str, Any]]:
    return [point.payload async for point in index.scroll_all(flt, page=_PAGE)]


def _curated(payloads: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Curated order: ``order``, then id, then record key (a total order, so listing pages are stable)."""
    return sorted(payloads, key=listing_key)


# ---- stats ------------------------------------------------------------------------------------------


async def refresh_domain_stats(index: RecordIndex, domains: Iterable[str], added: Mapping[str, Sequence[tuple[int, str]]] | None = None) -> None:
    """Recount the capabilities of ``domains`` and store count and samples on each domain record.

    ``added`` maps a domain to the (order, id) of capabilities just written to it: their samples are
    merged with the stored ones, so a bulk load costs one count per domain rather than a scan. A
    domain without ``added`` (deletes, moves, a re-described domain) is scanned in full.
    """
    added = added or {}
    for domain in sorted(set(domains)):
        flt = Filter(must=(Match("tenant", GLOBAL_TENANT), Match("kind", Kind.CAPABILITY.value), Match("domain", domain)))
        count = await index.count(flt)
        key = record_key(GLOBAL_TENANT, Kind.DOMAIN, domain)
        existing = await index.get(key)
        if existing is None:
            if count == 0:
                continue
            await index.write([_undeclared_domain(domain)])
            existing = {}
        elif count == 0 and not existing.get("declared"):
            await index.delete([key])
            continue
        previous = existing.get("sample_orders")
        if domain in added and previous is not None:
            merged = {str(i): int(o) for o, i in previous}
            merged.update({str(i): int(o) for o, i in added[domain]})
            samples = sorted((o, i) for i, o in merged.items())[:SAMPLE_NAMES]
        else:
            capabilities = _curated(await _scroll(index, flt))[:SAMPLE_NAMES]
            samples = [(int(c.get("order", 1_000_000)), str(c.get("entity_id"))) for c in capabilities]
        stats = {"capability_count": count, "samples": [i for _, i in samples], "sample_orders": [[o, i] for o, i in samples]}
        await index.set_payload([key], stats)
    await index.flush()
    catalog_state(index.engine).builtin_domains = None


def _undeclared_domain(domain: str) -> IndexRecord:
    """A domain record for a domain that capabilities name but no ``domain`` entity described yet."""
    payload = {"entity_type": "domain", "entity_id": domain, "domain": domain, "title": domain, "description": "", "order": 1_000_000, "declared": False}
    return IndexRecord(key=record_key(GLOBAL_TENANT, Kind.DOMAIN, domain), tenant=GLOBAL_TENANT, kind=Kind.DOMAIN.value, embed_text=domain, terms=terms_text(domain), payload=payload)


# ---- the index ------------------------------------------------------------------------------------------


def _user_tenants(caller: Caller) -> tuple[str, ...]:
    return tuple(t for t in caller.tenants if t != GLOBAL_TENANT)


async def builtin_domains(engine: Engine) -> list[DomainRow]:
    records = _curated(await _scroll(catalog_index(engine), Filter(must=(Match("tenant", GLOBAL_TENANT), Match("kind", Kind.DOMAIN.value)))))
    rows = []
    for record in records:
        count = int(record.get("capability_count", 0))
        if count == 0:
            continue
        samples = tuple(str(s) for s in record.get("samples", []))
        description = str(record.get("description") or "") or f"{count} capabilities such as {', '.join(samples)}"
        rows.append(DomainRow(str(record["entity_id"]), description, count, samples, "builtin"))
    return rows


async def cached_builtin_domains(engine: Engine) -> BuiltinDomains:
    state = catalog_state(engine)
    cached = state.builtin_domains
    if isinstance(cached, BuiltinDomains) and time.monotonic() - cached.loaded_at < BUILTIN_CACHE_S:
        return cached
    fresh = BuiltinDomains.of(await builtin_domains(engine))
    state.builtin_domains = fresh
    return fresh


def _server_row(server: Mapping[str, Any]) -> DomainRow:
    samples = tuple(str(name) for name in (server.get("tool_samples") or [])[:SAMPLE_NAMES])
    return DomainRow(mcp_domain(str(server["server"])), str(server.get("summary") or ""), int(server.get("tool_count", 0)), samples, "mcp")


async def mcp_domain_row(engine: Engine, caller: Caller, domain: str) -> DomainRow | None:
    """The caller's ``mcp:<name>`` domain, by key (no scan of every server)."""
    name = server_of_domain(domain)
    if name is None:
        return None
    keys = [record_key(t, Kind.MCP_SERVER, name) for t in _user_tenants(caller)]
    found = await catalog_index(engine).get_many(keys)
    server = next((found[k] for k in keys if k in found), None)
    return _server_row(server) if server is not None else None


async def mcp_domains(engine: Engine, caller: Caller) -> list[DomainRow]:
    servers = await _scroll(catalog_index(engine), Filter(must=(MatchAny("tenant", _user_tenants(caller)), Match("kind", Kind.MCP_SERVER.value))))
    return [_server_row(server) for server in sorted(servers, key=lambda s: str(s.get("server")))]


async def domain_index(engine: Engine, caller: Caller) -> list[DomainRow]:
    """Every domain the caller can use: built-ins in curated order, then its MCP servers."""
    return [*(await cached_builtin_domains(engine)).rows, *await mcp_domains(engine, caller)]


async def require_domain(engine: Engine, caller: Caller, domain: str, builtins: BuiltinDomains) -> DomainRow:
    """The domain row of ``domain``; UnknownDomain listing the caller's valid domains otherwise."""
    for row in builtins.rows:
        if row.id == domain:
            return row
    found = await mcp_domain_row(engine, caller, domain)
    if found is not None:
        return found
    rows = [*builtins.rows, *await mcp_domains(engine, caller)]
    valid = ", ".join(row.id for row in rows) or "(none yet: ingest capabilities or connect an MCP server)"
    raise UnknownDomain(f"unknown domain {domain!r}; available domains: {valid}", details={"domains": [row.id for row in rows]})


async def list_domain(engine: Engine, caller: Caller, domain: str) -> list[Mapping[str, Any]]:
    """The domain's capabilities (or MCP tools) in curated order."""
    server = server_of_domain(domain)
    if server is not None:
        flt = Filter(must=(MatchAny("tenant", _user_tenants(caller)), Match("kind", Kind.MCP_TOOL.value), Match("server", server)))
    else:
        flt = Filter(must=(Match("tenant", GLOBAL_TENANT), Match("kind", Kind.CAPABILITY.value), Match("domain", domain)))
    return _curated(await _scroll(catalog_index(engine), flt))


# ---- broad queries ----------------------------------------------------------------------------------------


def is_broad(query: str, builtins: BuiltinDomains, mcp_domain_id: str | None = None) -> bool:
    """True for an empty query, a bare domain id, or one made only of discovery words and built-in domain ids."""
    text = query.strip()
    if not text or text.lower() in builtins.ids or text == mcp_domain_id:
        return True
    terms = analyze(text)
    return all(term in DISCOVERY_TERMS or term in builtins.terms for term in terms)


def mentioned_domains(query: str, rows: Sequence[DomainRow]) -> list[str]:
    """Domains a broad query names ("what can you do with email" -> email), to list them first."""
    terms = set(analyze(query))
    return [row.id for row in rows if row.id.lower() in query.lower().split() or (set(analyze(row.id)) and set(analyze(row.id)) <= terms)]
