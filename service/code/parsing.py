"""Request bodies of workspace code search: registering a workspace and searching it, validated.

Every refusal is a ``ValidationError`` (400) or ``PathOutsideWorkspace`` whose message says what
to fix; nothing is read from or written to the index before a body has passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from service.code.roots import check_not_protected, protected_dirs, resolve_local_root
from service.code.workspace import SearchConfig
from service.errors import ValidationError
from service.settings import DEFAULT_MODEL, LOCAL_PROVIDER, Settings, is_directory_name
from service.validation import BODY_BOUNDED, Fields, bounded_text

# A longer word query is searched by its first MAX_QUERY_CHARS characters, cut at a word boundary,
# with a notice; a longer regex is refused (a cut pattern is another pattern).
MAX_QUERY_CHARS = 1_000
MAX_LIMIT = 200  # a larger limit is clamped to it, with a notice
DEFAULT_LIMIT = 20
MAX_PATH_CHARS = 4_096
_LOCAL_DIMENSIONS = {DEFAULT_MODEL: 384}
STORE_DIR = "index"  # the embedded store's directory under the data directory


class Mode(StrEnum):
    """Search modes: ``hybrid`` (default) and ``lexical`` are public; ``semantic`` (dense only) is
    used by the benchmark to compare the passes."""

    HYBRID = "hybrid"
    LEXICAL = "lexical"
    SEMANTIC = "semantic"


# ``semantic`` is the model's ranking alone, with no lexical pass: what an evaluation compares hybrid with.
PUBLIC_MODES = (Mode.HYBRID.value, Mode.LEXICAL.value, Mode.SEMANTIC.value)


@dataclass(frozen=True)
class SearchRequest:
    query: str
    path: str | None = None
    glob: str | None = None
    mode: Mode = Mode.HYBRID
    regex: bool = False
    ignore_case: bool = False
    limit: int = DEFAULT_LIMIT
    # What parsing changed in the request (a query cut to its prefix, a limit clamped): the answer's first notices.
    notices: tuple[str, ...] = ()


def parse_search_body(data: Any) -> SearchRequest:
    fields = Fields(data)
    query = fields.str("query", required=True, max_length=BODY_BOUNDED, non_empty=True)
    path = fields.str("path", max_length=MAX_PATH_CHARS)
    glob = fields.str("glob", max_length=MAX_PATH_CHARS)
    mode = fields.str("mode", default=Mode.HYBRID.value, max_length=20)
    if mode not in PUBLIC_MODES:
        raise ValidationError(f"mode must be one of {', '.join(PUBLIC_MODES)}, got {mode!r}")
    regex = fields.bool("regex")
    ignore_case = fields.bool("ignore_case")
    limit, limit_notice = fields.clamped_int("limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    fields.reject_unknown()
    if regex and len(query) > MAX_QUERY_CHARS:
        raise ValidationError(f"query is {len(query):,} characters; a regex may have at most {MAX_QUERY_CHARS:,} (a cut pattern would be another pattern): shorten it")
    query, query_notice = bounded_text(query, MAX_QUERY_CHARS)
    notices = tuple(n for n in (query_notice, limit_notice) if n)
    return SearchRequest(query=query, path=path, glob=glob, mode=Mode(mode), regex=regex, ignore_case=ignore_case, limit=limit, notices=notices)


def parse_register_body(data: Any, settings: Settings) -> tuple[str, SearchConfig]:
    """The raw root and the validated search settings of ``POST /v1/workspaces``."""
    fields = Fields(data)
    root = fields.str("root", required=True, max_length=MAX_PATH_CHARS, non_empty=True)
    search_fields = fields.obj("search")
    fields.reject_unknown()
    if search_fields is None:
        config = SearchConfig(prewarm_embeddings=settings.prewarm_embeddings)
    else:
        config = parse_search_config(search_fields, settings)
    if config.index_dir is not None:
        check_index_dir(Path(config.index_dir), settings)
    return root, config


def parse_search_config(fields: Fields, settings: Settings) -> SearchConfig:
    skip_dirs = fields.str_list("skip_dirs", max_items=200, max_length=255)
    for name in skip_dirs:
        check_skip_dir(name)
    model = fields.str("embeddings_model", max_length=200)
    dimensions = fields.int("embeddings_dimensions", minimum=1, maximum=8192)
    # Omitted: the service's default (its own model then applies, which the settings check requires).
    prewarm_given = fields.data.get("prewarm_embeddings") is not None
    prewarm = fields.bool("prewarm_embeddings", default=settings.prewarm_embeddings)
    index_dir = fields.str("index_dir", max_length=MAX_PATH_CHARS)
    fields.reject_unknown()
    if prewarm_given and prewarm and not model:
        raise ValidationError(
            "search: prewarm_embeddings requires embeddings_model to be set; name a model (provider_id/model_id) "
            "or drop prewarm_embeddings"
        )
    if model is not None:
        check_model(model, dimensions, settings)
    elif dimensions is not None:
        raise ValidationError("search.embeddings_dimensions needs search.embeddings_model (the dimensions of which model?)")
    if index_dir is not None and not os.path.isabs(os.path.expanduser(index_dir)):
        raise ValidationError(f"search.index_dir {index_dir!r} must be an absolute path")
    return SearchConfig(
        skip_dirs=tuple(dict.fromkeys(skip_dirs)),
        embeddings_model=model,
        embeddings_dimensions=dimensions,
        prewarm_embeddings=prewarm,
        index_dir=os.path.expanduser(index_dir) if index_dir else None,
    )


def check_skip_dir(name: str) -> None:
    """``skip_dirs`` entries are exact directory names, not globs or relative paths."""
    if not is_directory_name(name):
        raise ValidationError(
            f"search.skip_dirs entry {name!r} is not a directory name; entries are exact names like 'coverage', "
            "not globs or relative paths"
        )


def check_model(model: str, dimensions: int | None, settings: Settings) -> None:
    provider, sep, model_id = model.partition("/")
    if not sep or not provider or not model_id:
        raise ValidationError(f"search.embeddings_model {model!r} must have the form provider_id/model_id (e.g. {DEFAULT_MODEL})")
    if provider == LOCAL_PROVIDER:
        if model not in _LOCAL_DIMENSIONS:
            raise ValidationError(f"search.embeddings_model: unknown local model {model!r}; available: {', '.join(_LOCAL_DIMENSIONS)}")
        if dimensions is not None and dimensions != _LOCAL_DIMENSIONS[model]:
            raise ValidationError(f"search.embeddings_dimensions: {model} has {_LOCAL_DIMENSIONS[model]} dimensions; omit it or give that")
        return
    if settings.provider(provider) is None:
        configured = ", ".join([LOCAL_PROVIDER, *(p.id for p in settings.providers)])
        raise ValidationError(f"search.embeddings_model: provider {provider!r} is not configured; configured providers: {configured}")


def check_index_dir(index_dir: Path, settings: Settings) -> None:
    """A caller's cache lives under the data directory or the service's ``index_dir`` (never in
    someone's tree, never in the embedded store's directory), in a directory or where one can be made."""
    resolved = _real(index_dir.expanduser())
    data_dir = _real(settings.data_dir)
    places = [data_dir, *([_real(settings.index_dir)] if settings.index_dir is not None else [])]
    if not any(resolved == place or place in resolved.parents for place in places):
        service_index = str(settings.index_dir) if settings.index_dir is not None else "unset"
        raise ValidationError(
            f"search.index_dir {str(index_dir)!r} must lie under the data directory ({settings.data_dir}) or the "
            f"service's index_dir ({service_index}); omit it to keep the cache beside the workspace's registry entry"
        )
    store = data_dir / STORE_DIR
    if resolved == store or store in resolved.parents or (settings.qdrant_path is not None and _real(settings.qdrant_path) in (resolved, *resolved.parents)):
        raise ValidationError(f"search.index_dir {str(index_dir)!r} is inside the embedded store's directory; name another directory")
    if not _is_or_can_be_directory(resolved):
        raise ValidationError(f"search.index_dir {str(index_dir)!r} is not a directory (a file is in the way); name a directory")


def _is_or_can_be_directory(path: Path) -> bool:
    """Whether ``path`` is a directory, or its nearest existing ancestor is one (it can be made)."""
    try:
        existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
        return existing.is_dir()
    except OSError:  # a name longer than the file system allows, ...
        return False


def _real(path: Path) -> Path:
    try:
        return path.absolute().resolve()
    except (RuntimeError, OSError):  # a symlink loop: compared as written, which lies under no allowed place
        return path.absolute()


def resolve_root(raw: str, settings: Settings, *, trusted: bool = False) -> Path:
    """The real path of a workspace root named by the machine's owner (``trusted``: the CLI, the
    stdio MCP server): any directory but the service's own. A caller's root is resolved against
    its own bases by ``registration.register_workspace``."""
    if not trusted:
        raise ValueError("a caller's root is resolved against its bases: use service.code.registration.register_workspace")
    root = resolve_local_root(raw)
    check_not_protected(raw, root, protected_dirs(settings), may_hold=True)
    return root
