"""One catalog search, start to finish: the body parsed, then the answer kind it asks for.

    entity refs          -> entity detail (each ref on its own)
    domain, no query     -> the domain's capabilities in curated order
    empty / broad query  -> the domain index
    exact package name   -> the package, alone (never competing with semantic hits)
    anything else        -> ranked hits (+ memories, Jev rerank telemetry, the Waiting block)

``run_search`` (``service.engine.surface``) runs it: the rate limit first (over it, the 429 answer
with its ``rateLimit`` object), then ``search`` under a ``Deadline`` checked before each phase; past
it, the ``Search did not finish within 20s`` answer, and the abandoned search stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.auth import Caller
from service.catalog.answers import (
    SearchContext,
    answer,
    domain_index_answer,
    domain_listing_answer,
    entity_answer,
    exact_package_answer,
)
from service.catalog.cursor import ListingCursor
from service.catalog.domains import cached_builtin_domains, domain_index, is_broad, mcp_domain_row, require_domain
from service.catalog.model import SearchRequest
from service.catalog.ranked import ranked_answer
from service.catalog.refs import parse_entity_param
from service.engine.deadline import Deadline
from service.engine.surface import SearchAnswer, SurfaceSearch
from service.errors import ValidationError
from service.ratelimit import RateLimitExceeded, Surface
from service.validation import BODY_BOUNDED, Fields, bounded_text

if TYPE_CHECKING:
    from service.engine.runtime import Engine

MAX_LIMIT = 50
MIN_RESPONSE_SIZE = 500
MAX_RESPONSE_SIZE = 200_000
# A longer query is searched by its first MAX_QUERY characters, cut at a word boundary, with a notice.
MAX_QUERY = 2_000
# The served ranking, or one channel alone: what an evaluation compares the served ranking with.
RANKINGS = ("served", "lexical", "dense")
DEADLINE_STEP = "Retry once, then shorten the query or pass `domain`."


async def parse(engine: Engine, caller: Caller, body: Any, target: str | None) -> SearchRequest:
    """The search body, validated (catalog search takes no target)."""
    return parse_body(body)


def parse_body(body: Any) -> SearchRequest:
    """Validate the search body; 400 with what to fix (nothing is searched on bad input)."""
    fields = Fields(body)
    query, query_notice = _bounded_query(fields.str("query", max_length=BODY_BOUNDED))
    domain = fields.str("domain", max_length=200)
    raw_entity = fields.raw("entity")
    limit, limit_notice = fields.clamped_int("limit", minimum=1, maximum=MAX_LIMIT)
    max_size = fields.int("maxResponseSize", minimum=MIN_RESPONSE_SIZE, maximum=MAX_RESPONSE_SIZE)
    include_hidden = fields.bool("includeHiddenPackages")
    raw_cursor = fields.str("cursor", max_length=4_000)
    ranking = fields.str("ranking", max_length=20)
    ranking = "served" if ranking is None else ranking
    fields.reject_unknown()
    if ranking not in RANKINGS:
        raise ValidationError(f"ranking must be one of {', '.join(RANKINGS)} (served is the default); got {ranking!r}")
    if domain is not None and not domain.strip():
        raise ValidationError("domain must not be empty; omit it to search every domain")
    entity = None
    if raw_entity is not None:
        if query is not None or domain is not None or raw_cursor is not None:
            raise ValidationError("entity cannot be combined with query, domain or cursor: look up refs, or search, in separate calls")
        entity = parse_entity_param(raw_entity)
    cursor = None
    if raw_cursor is not None:
        if domain is None:
            raise ValidationError("cursor pages a domain listing: pass it with the same domain, as the listing's nextCursor gave it")
        cursor = ListingCursor.decode(raw_cursor, domain.strip())
    notices = tuple(n for n in (query_notice, limit_notice) if n)
    return SearchRequest(query, domain.strip() if domain else None, entity, limit, max_size, include_hidden, cursor, ranking, notices)


def _bounded_query(query: str | None) -> tuple[str | None, str | None]:
    """The query as searched: over MAX_QUERY characters, its prefix cut at a word boundary, and the notice."""
    return (None, None) if query is None else bounded_text(query, MAX_QUERY)


async def search(engine: Engine, caller: Caller, request: SearchRequest, deadline: Deadline) -> SearchAnswer:
    """The answer kind ``request`` asks for (see the module doc)."""
    ctx = SearchContext(engine, caller, request, deadline)
    if request.entity is not None:
        return await entity_answer(ctx, request.entity)
    query = (request.query or "").strip()
    domain = request.domain
    with deadline.phase("rowAndRegistryLoad"):
        builtins = await cached_builtin_domains(engine)
        row = await require_domain(engine, caller, domain, builtins) if domain is not None else None
        named_mcp = await mcp_domain_row(engine, caller, query) if query.startswith("mcp:") else None
    if row is not None:
        if not query or is_broad(query, builtins, row.id):
            return await domain_listing_answer(ctx, row)
        if request.cursor is not None:
            raise ValidationError("cursor pages a domain listing, and a query ranks the domain instead: drop cursor, or the query")
        return await ranked_answer(ctx, query, row)
    if is_broad(query, builtins, named_mcp.id if named_mcp else None):
        with deadline.phase("rowAndRegistryLoad"):
            rows = await domain_index(engine, caller)
        return domain_index_answer(ctx, query, rows)
    if request.ranking == "served":
        with deadline.phase("identityResolution"):
            exact = await exact_package_answer(ctx, query)
        if exact is not None:
            return exact
    return await ranked_answer(ctx, query, None)


def rate_limited(exceeded: RateLimitExceeded, deadline: Deadline) -> SearchAnswer:
    """Over the caller's catalog rate limit: 429 with its headers, and the ``rateLimit`` object in the answer."""
    error = exceeded.error()
    doc = {
        "kind": "error",
        "error": {"code": error.code, "message": error.message},
        "rateLimit": exceeded.as_dict(),
        "nextStep": f"Back off for {exceeded.retry_after_s}s before searching again.",
    }
    return answer(deadline, doc, status=error.status, error=error, headers=error.headers)


def past_deadline(deadline_s: float, deadline: Deadline) -> SearchAnswer:
    """The search did not finish within the request deadline of ``deadline_s``: an ``isError`` answer (status 200) saying what to do."""
    message = f"Search did not finish within {deadline_s:g}s. {DEADLINE_STEP}"
    return answer(deadline, {"kind": "error", "error": {"code": "deadline_exceeded", "message": message}, "nextStep": DEADLINE_STEP})


SEARCH = SurfaceSearch(
    rate_limit=Surface.CATALOG,
    parse=parse,
    search=search,
    deadline_advice="shorten the query or pass domain",
    rate_limited=rate_limited,
    past_deadline=past_deadline,
)
