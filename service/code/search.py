"""One workspace code search, start to finish (one module: its passes share one context and fall back into each other).

1. ``parse``: the workspace the caller owns, its root still there, and the request checked against
   it (scope, regex), before the rate limit counts the search (``run_search``).
2. Revalidate the workspace if due (mtime and size, at most every ``revalidate_interval_s``).
3. Regex: the lexical regex pass, always (a regex search never runs semantically).
4. Otherwise the chunk-aware lexical pass over the scope, then, in hybrid mode, the semantic pass
   (query embedding against the scope's chunk vectors; its dense query and the lexical pass's
   BM25 query go to the store as one batch), RRF fusion of the two chunk lists, each
   weighed by how far it can be trusted for the query (``meta.fusion``), and the path-aware
   adjustments after fusion.
5. Render text-first output, results, notices and metadata.
6. ``search`` answers it for ``run_search``, within the request's ``Deadline``; the command line
   searches locally through ``search_workspace`` (no rate limit, no deadline).

Hybrid never hard-fails: no model, a failing endpoint or a scope too large to embed now give
lexical results with a notice saying why.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.auth import Caller
from service.code.lexical import (
    ChunkHit,
    QueryText,
    ranked_lexical,
    regex_search,
    shown_line_count,
)
from service.code.model import SURFACE_NAME, workspace_filter
from service.code.parsing import MAX_LIMIT, Mode, SearchRequest, parse_search_body
from service.code.pattern import regex_compile
from service.code.ranking import adjust, fuse, trust_of
from service.code.render import MAX_LINES_PER_CHUNK, ResultLine, hybrid_lines, lexical_lines, output_text, regex_lines
from service.code.scope import Scope, ScopeError, ScopeNotFound, resolve_scope
from service.code.semantic import (
    SCOPE_TOO_LARGE,
    WARMING_RUNNING,
    WARMING_SCHEDULED,
    ScopeState,
    cold_chunks,
    dense_query,
    embed_scope,
    embedder_for,
    prepare_scope,
    schedule_indexing,
    schedule_warming,
    scope_state,
)
from service.code.skipped import skip_reason
from service.code.state import WorkspaceRuntime, workspaces_of
from service.code.trigram import Within
from service.code.workspace import Workspace
from service.engine import explain
from service.engine.deadline import Deadline
from service.engine.embeddings import Embedder
from service.engine.search import LEXICAL_ONLY, embed_query_or_notice
from service.engine.store import Filter, Hit, Match, MatchAny, StoreError
from service.engine.surface import SearchAnswer, SurfaceSearch
from service.errors import EmbeddingUnavailable, InvalidRegex, NotFound, PathOutsideWorkspace
from service.ratelimit import Surface

if TYPE_CHECKING:
    from service.engine.runtime import Engine

log = logging.getLogger(__name__)

# A search revalidates inline for at most this long; a longer build continues in the index job.
INLINE_SYNC_BUDGET_S = 6.0
# How long a search waits for a revalidation already running before searching what is indexed.
WAIT_FOR_SYNC_S = 3.0
REGEX_BUDGET_S = 5.0
NO_FILE_IN_SCOPE = "no indexed file is in this path and glob scope"
MIN_DEPTH, MAX_DEPTH = 50, 300
# Time kept back from the request deadline for the lexical answer after a semantic pass gives up.
ANSWER_MARGIN_S = 2.0


@dataclass
class CodeResult:
    """One workspace search's result (``as_dict``: the answer body)."""

    output: str
    results: list[dict[str, Any]]
    notices: list[str]
    meta: dict[str, Any]
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"output": self.output, "results": self.results, "notices": self.notices, "meta": self.meta}


@dataclass
class _Context:
    engine: Engine
    workspace: Workspace
    runtime: WorkspaceRuntime
    request: SearchRequest
    scope: Scope
    flt: Filter | None  # the store's (dense) view of the scope; None: no indexed file in it
    within: Within  # the lexical index's
    background: bool
    deadline: float | None = None
    notices: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkspaceSearch:
    """A parsed search: the workspace it searches and the request, checked against it."""

    workspace: Workspace
    request: SearchRequest


async def parse(engine: Engine, caller: Caller, body: Any, target: str | None) -> WorkspaceSearch:
    """The workspace ``target`` if the caller owns it (404 otherwise, as for one that does not
    exist), the body, a root still there (409, not a scope that does not exist), the scope and the
    regex: bad input is refused before the rate limit counts the search."""
    workspaces = workspaces_of(engine)
    workspace = workspaces.owned((caller.user_tenant,), target or "")
    request = parse_search_body(body)
    workspaces.require_root(workspace)
    check_scope(workspace, request)
    check_regex(request)
    return WorkspaceSearch(workspace, request)


async def search(engine: Engine, caller: Caller, request: WorkspaceSearch, deadline: Deadline) -> SearchAnswer:
    """The answer body (output, results, notices, meta); the semantic pass gives up in time for a
    lexical answer within ``deadline``."""
    result = await search_workspace(engine, request.workspace, request.request, deadline_s=deadline.remaining_s())
    for phase, duration_ms in result.timings_ms.items():
        deadline.add(phase, duration_ms)
    return SearchAnswer(body=result.as_dict())


def check_scope(workspace: Workspace, request: SearchRequest) -> Scope:
    try:
        return resolve_scope(workspace.root, request.path, request.glob)
    except ScopeNotFound as exc:
        raise NotFound(str(exc)) from None
    except ScopeError as exc:
        raise PathOutsideWorkspace(str(exc)) from None


def check_regex(request: SearchRequest) -> re.Pattern[str] | None:
    if not request.regex:
        return None
    try:
        return regex_compile(request.query, ignore_case=request.ignore_case)
    except ValueError as exc:
        raise InvalidRegex(f"{exc}; fix the pattern (Python re syntax) or search without regex") from None


async def search_workspace(
    engine: Engine,
    workspace: Workspace,
    request: SearchRequest,
    *,
    background: bool = True,
    sync_budget_s: float | None = INLINE_SYNC_BUDGET_S,
    deadline_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CodeResult:
    """Search one workspace (no rate limit: ``search`` is the caller's door). ``background``: may enqueue index and warm jobs (a server, not the CLI);
    ``deadline_s``: the time the whole search may take (the semantic pass gives up in time for a
    lexical answer)."""
    answer_by = None if deadline_s is None else time.monotonic() + deadline_s - ANSWER_MARGIN_S
    scope = check_scope(workspace, request)
    compiled = check_regex(request)
    workspaces = workspaces_of(engine)
    started = time.perf_counter()
    deadline = None if sync_budget_s is None else time.monotonic() + sync_budget_s
    fresh = await workspaces.revalidate(workspace, deadline=deadline, wait_s=WAIT_FOR_SYNC_S, progress=progress)
    if fresh.report is not None and not fresh.report.complete and background:
        await schedule_indexing(engine, workspace)
    runtime = await workspaces.runtime(workspace)
    runtime.trigram.reload()  # 0.1 ms: sees commits of a revalidation in another process (a separate worker)
    flt, within = scope_filter(runtime, scope)
    ctx = _Context(engine, runtime.workspace, runtime, request, scope, flt, within, background, answer_by, notices=[*request.notices, *fresh.notices])
    ctx.timings["revalidate"] = _ms(started)
    ctx.meta["index"] = {
        "files": runtime.cache.file_count(),
        "chunks": runtime.cache.chunk_count(),
        "revalidated": fresh.report is not None,
        "changed_files": (fresh.report.files_added + fresh.report.files_changed + fresh.report.files_deleted) if fresh.report else 0,
    }
    lines = await _regex(ctx, compiled) if compiled is not None else await _ranked(ctx)
    if not lines:
        _explain_empty(ctx)
    return _answer(ctx, lines)


def scope_filter(runtime: WorkspaceRuntime, scope: Scope) -> tuple[Filter | None, Within]:
    """The scope as the store filters it (None when no indexed file is in it) and as the lexical index does."""
    base = workspace_filter(runtime.workspace)
    if scope.glob is not None:
        paths = tuple(p for p in runtime.cache.paths() if scope.contains(p))
        return (base.and_(MatchAny("path", paths)) if paths else None), Within(paths=paths)
    if not scope.prefix:
        return base, Within()
    within = Within(path=scope.prefix) if scope.is_file else Within(directory=scope.prefix)
    return base.and_(Match("path" if scope.is_file else "dirs", scope.prefix)), within


async def _regex(ctx: _Context, compiled: re.Pattern[str]) -> list[ResultLine]:
    started = time.perf_counter()
    request = ctx.request
    outcome = await regex_search(
        ctx.runtime,
        ctx.scope,
        compiled,
        limit=request.limit,
        budget_s=REGEX_BUDGET_S,
        max_file_bytes=ctx.engine.settings.max_file_bytes,
        matchers=workspaces_of(ctx.engine).matchers,
    )
    ctx.timings["regex"] = _ms(started)
    if outcome.timed_out:
        ctx.notices.append(f"regex search stopped after {REGEX_BUDGET_S:g}s; results are partial, narrow path or glob or simplify the pattern")
    elif outcome.error is not None:
        log.warning("regex matching failed", extra={"workspace": ctx.workspace.id, "error": outcome.error})
        ctx.notices.append("regex search stopped early (the pattern needed more memory than allowed); results are partial, simplify the pattern")
    if outcome.truncated:
        _note_cut(ctx, len(outcome.matches), None, "matching lines")
    if request.mode is not Mode.LEXICAL:
        ctx.meta["fallback"] = "regex"
    ctx.meta.update(
        mode=Mode.LEXICAL.value,
        source_mix={"lexical": len(outcome.matches), "semantic": 0, "merged": 0},
        match_counts={
            "lines": len(outcome.matches),
            "files": len({m.path for m in outcome.matches}),
            "chunks": len({m.chunk.key for m in outcome.matches if m.chunk is not None}),
            "files_scanned": outcome.files_scanned,
            "files_ruled_out": outcome.files_ruled_out,
            "trigram_candidates": outcome.candidates,
            "truncated": outcome.truncated,
        },
    )
    return regex_lines(outcome.matches)


async def _ranked(ctx: _Context) -> list[ResultLine]:
    request = ctx.request
    query = QueryText.of(request.query)
    depth = min(max(request.limit * 3, MIN_DEPTH), MAX_DEPTH)
    lexical: list[ChunkHit] = []
    semantic: list[ChunkHit] | None = None
    if ctx.flt is not None:
        if request.mode is Mode.LEXICAL:
            started = time.perf_counter()
            lexical = await ranked_lexical(ctx.runtime, ctx.within, ctx.scope, query, depth)
            ctx.timings["lexical"] = _ms(started)
        else:
            lexical, semantic = await _semantic(ctx, query, depth)
    else:
        ctx.notices.append(NO_FILE_IN_SCOPE)
    used = request.mode if semantic is not None else Mode.LEXICAL
    if lexical and semantic:
        trust = trust_of(lexical, semantic)
        ctx.meta["fusion"] = trust.as_dict()
        fused = adjust(fuse(lexical, semantic, trust))
    else:
        fused = adjust(fuse(lexical, semantic or []))
    _explain(fused)
    if used is Mode.LEXICAL:
        # Every chunk shows a line at least: the first ``limit`` chunks hold the lines shown, the rest are only counted.
        lines, available = lexical_lines(fused[: request.limit], query, request.limit)
        available += sum(shown_line_count(hit.chunk, query, MAX_LINES_PER_CHUNK) for hit in fused[request.limit :])
        _note_cut(ctx, len(lines), available, "matching lines")
    else:
        lines, available = hybrid_lines(fused, query, request.limit)
        _note_cut(ctx, len(lines), available, "matching chunks")
    shown = {(line.path, line.start_line) for line in lines}
    ctx.meta.update(
        mode=used.value,
        source_mix={source: sum(1 for line in lines if line.source == source) for source in ("lexical", "semantic", "merged")},
        match_counts={
            "lexical_chunks": len(lexical),
            "literal_chunks": sum(1 for hit in lexical if hit.exact),
            "semantic_chunks": len(semantic or []),
            "chunks": len(shown),
            "files": len({path for path, _ in shown}),
            "lines": len(lines),
            "truncated": available > len(lines),
        },
    )
    return lines


def _explain(hits: list[ChunkHit]) -> None:
    """Each chunk's evidence, for an explained search (results name a chunk by ``path:start_line``)."""
    explanation = explain.current()
    if explanation is None:
        return
    for hit in hits:
        explanation.note(
            f"{hit.chunk.path}:{hit.chunk.start_line}",
            {
                "bm25": None if hit.lexical_rank is None else round(hit.bm25, 4),
                "lexicalRank": hit.lexical_rank,
                "literal": hit.exact,
                "coverage": round(hit.coverage, 4),
                "cosine": None if hit.semantic_rank is None else round(hit.semantic_score, 4),
                "semanticRank": hit.semantic_rank,
                "fused": round(hit.fused, 6),
                "pathWeight": hit.weight,
                "category": hit.category,
            },
        )


async def _semantic(ctx: _Context, query: QueryText, depth: int) -> tuple[list[ChunkHit], list[ChunkHit] | None]:
    """The lexical and semantic chunk lists of a hybrid (or semantic) search: both store queries in one
    batch. No semantic list (None, with a notice) when the query cannot be embedded or the dense
    search failed: then the lexical pass alone, in semantic mode too (the same fallback hybrid has)."""
    assert ctx.flt is not None
    records = ctx.engine.records(SURFACE_NAME)
    prepared = await _query_vector(ctx, ctx.request.query)
    started = time.perf_counter()
    if prepared is not None:
        embedder, vector, embedded_now = prepared
        with_lexical = ctx.request.mode is not Mode.SEMANTIC
        # The lexical pass runs in its thread while the store answers the dense one.
        lexical_pass = asyncio.ensure_future(ranked_lexical(ctx.runtime, ctx.within, ctx.scope, query, depth)) if with_lexical else None
        try:
            dense = await dense_query(ctx.engine, embedder, vector, ctx.flt, depth)
            found = await records.search_batch([dense])
        except StoreError as exc:
            log.warning("semantic pass failed", extra={"workspace": ctx.workspace.id, "error": str(exc)})
            _fallback(ctx, "semantic_failed", f"semantic search failed on the index; {LEXICAL_ONLY}")
        except BaseException:
            if lexical_pass is not None:
                lexical_pass.cancel()
            raise
        else:
            ctx.timings["semantic"] = _ms(started)
            ctx.meta["embedded_now"] = embedded_now
            started = time.perf_counter()
            lexical = await lexical_pass if lexical_pass is not None else []
            ctx.timings["lexical"] = _ms(started)
            return lexical, _semantic_ranking(ctx, found[0])
        if lexical_pass is not None:
            lexical = await lexical_pass
            ctx.timings["lexical"] = _ms(started)
            return lexical, None
    lexical = await ranked_lexical(ctx.runtime, ctx.within, ctx.scope, query, depth)
    ctx.timings["lexical"] = _ms(started)
    return lexical, None


async def _query_vector(ctx: _Context, query: str) -> tuple[Embedder, list[float], int] | None:
    """The scope embedded (a small cold one now), then the query's vector with its embedder and how
    many chunks were embedded now; or None with a notice (lexical fallback)."""
    assert ctx.flt is not None
    engine, workspace = ctx.engine, ctx.workspace
    try:
        embedder = embedder_for(engine, workspace)
    except EmbeddingUnavailable as exc:
        _unavailable(ctx, exc)
        return None
    if embedder is None:
        notices: list[str] = []
        await embed_query_or_notice(None, query, notices)
        _fallback(ctx, "embeddings_not_configured", notices[0])
        return None
    workspaces = workspaces_of(engine)
    within = ctx.within
    state = await scope_state(workspaces, ctx.flt, ctx.runtime.cache.count_under(within.path or within.directory, within.paths))
    limit = engine.settings.semantic_scope_limit
    ctx.meta["scope"] = {"chunks": state.chunks, "embedded": state.embedded, "unembedded": state.unembedded, "limit": limit}
    if state.unembedded > limit:
        await _warm_after_fallback(ctx, await cold_chunks(workspaces, ctx.flt, state))
        _fallback(ctx, "scope_too_large", SCOPE_TOO_LARGE)
        return None
    started = time.perf_counter()
    budget = None if ctx.deadline is None else max(ctx.deadline - time.monotonic(), 0.0)
    try:
        embedded_now, vector, notices = await asyncio.wait_for(_embed(ctx, embedder, query, state, limit), timeout=budget)
    except TimeoutError:
        _fallback(
            ctx,
            "embeddings_too_slow",
            f"embedding did not finish in time (the model may still be loading); {LEXICAL_ONLY}, chunks embedded so far stay embedded",
        )
        return None
    except EmbeddingUnavailable as exc:
        _unavailable(ctx, exc)
        return None
    if vector is None:
        _fallback(ctx, "embeddings_unavailable", notices[0])
        return None
    ctx.timings["embed"] = _ms(started)
    return embedder, vector, embedded_now


def _semantic_ranking(ctx: _Context, hits: list[Hit]) -> list[ChunkHit]:
    """The scope's chunks ranked by cosine to the query (the dense hits' chunks, from the cache)."""
    keyed = {str(hit.payload.get("key")): hit.score for hit in hits}
    chunks = ctx.runtime.cache.by_keys(list(keyed))
    ranked: list[ChunkHit] = []
    for key, score in keyed.items():
        chunk = chunks.get(key)
        if chunk is not None and ctx.scope.contains(chunk.path):
            ranked.append(ChunkHit(chunk=chunk, semantic_rank=len(ranked) + 1, semantic_score=score))
    return ranked


async def _embed(ctx: _Context, embedder: Embedder, query: str, state: ScopeState, limit: int) -> tuple[int, list[float] | None, list[str]]:
    """Embed the scope's chunks that have no vector yet (at most ``limit``), then the query (None
    with the notice saying why)."""
    assert ctx.flt is not None
    embedded_now = 0
    if state.unembedded:
        await prepare_scope(ctx.engine, ctx.workspace, ctx.runtime.cache, ctx.within, ctx.flt, state.chunks)
        embedded_now = await embed_scope(ctx.engine, embedder, ctx.flt, limit)
    notices: list[str] = []
    return embedded_now, await embed_query_or_notice(embedder, query, notices), notices


async def _warm_after_fallback(ctx: _Context, cold: int) -> None:
    """A cold broad fallback schedules background warming of the tracked workspace."""
    workspace = ctx.workspace
    if workspace.warm and not cold:
        ctx.notices.append(WARMING_RUNNING)
        ctx.meta["warming"] = True
        return
    if not ctx.background:
        ctx.notices.append("run `agentsearch index PATH --embed` to embed the workspace so hybrid search covers every scope")
        return
    scheduled = await schedule_warming(ctx.engine, workspace)
    ctx.meta["warming"] = scheduled
    if scheduled:
        ctx.notices.append(WARMING_RUNNING if workspace.warm else WARMING_SCHEDULED)


def _unavailable(ctx: _Context, exc: EmbeddingUnavailable) -> None:
    """The model failed outside the query's embedding (building it, embedding the scope): the same
    notice as a failed query embedding."""
    _fallback(ctx, "embeddings_unavailable", f"embeddings unavailable ({exc}); {LEXICAL_ONLY}")
    return None


def _fallback(ctx: _Context, reason: str, notice: str) -> None:
    ctx.meta["fallback"] = reason
    ctx.notices.insert(0, notice)
    return None


def _note_cut(ctx: _Context, shown: int, available: int | None, what: str) -> None:
    """Results cut at ``limit`` say so: how many more there are (when known) and how to see them."""
    if available is not None and available <= shown:
        return
    more = f"{available - shown} more {what} were found" if available is not None else f"more {what} exist"
    if ctx.request.limit < MAX_LIMIT:
        how = f"narrow path or glob, or raise limit (up to {MAX_LIMIT})"
    else:
        how = "narrow path or glob"
    ctx.notices.append(f"results cut at limit {ctx.request.limit}: {more}; {how} to see them")


def _explain_empty(ctx: _Context) -> None:
    """An empty answer scoped to a ``path`` inside skipped content says which rule skipped it
    (in place of the plain "no indexed file" notice)."""
    if not ctx.scope.prefix:
        return
    settings = ctx.engine.settings
    reason = skip_reason(
        ctx.scope.root,
        ctx.scope.prefix,
        workspace_skip_dirs=ctx.workspace.search.skip_dirs,
        service_skip_dirs=settings.skip_dirs,
        max_file_bytes=settings.max_file_bytes,
    )
    if reason is None:
        return
    if NO_FILE_IN_SCOPE in ctx.notices:
        ctx.notices.remove(NO_FILE_IN_SCOPE)
    ctx.notices.append(f"{reason}; search an indexed path, or change that rule to index it")


def _answer(ctx: _Context, lines: list[ResultLine]) -> CodeResult:
    ctx.meta.setdefault("fallback", None)
    ctx.meta.setdefault("warming", ctx.workspace.warm)
    ctx.meta["requested_mode"] = ctx.request.mode.value
    ctx.meta["regex"] = ctx.request.regex
    ctx.meta["query_scope"] = {"path": ctx.scope.prefix or ".", "glob": ctx.scope.glob}
    ctx.meta["timings_ms"] = {name: round(ms, 2) for name, ms in ctx.timings.items()}
    results = [line.as_dict() for line in lines]
    return CodeResult(
        output=output_text(lines, notices=ctx.notices), results=results, notices=ctx.notices, meta=ctx.meta, timings_ms=ctx.timings
    )


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


SEARCH = SurfaceSearch(rate_limit=Surface.CODE, parse=parse, search=search, deadline_advice="narrow path or glob")

__all__ = ["SEARCH", "CodeResult", "check_regex", "check_scope", "parse", "scope_filter", "search", "search_workspace"]
