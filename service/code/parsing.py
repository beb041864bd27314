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

from service.code.workspace import SearchConfig
from service.engine.embeddings import LOCAL_PROVIDER
from service.errors import PathOutsideWorkspace, ValidationError
from service.settings import DEFAULT_MODEL, Settings, is_directory_name
from service.validation import Fields

MAX_QUERY_CHARS = 1_000
MAX_LIMIT = 200
DEFAULT_LIMIT = 20
MAX_PATH_CHARS = 4_096
_LOCAL_DIMENSIONS = {DEFAULT_MODEL: 384}


class Mode(StrEnum):
    """Search modes: ``hybrid`` (default) and ``lexical`` are public; ``semantic`` (dense only) is
    used by the benchmark to compare the passes."""

    HYBRID = "hybrid"
    LEXICAL = "lexical"
    SEMANTIC = "semantic"


PUBLIC_MODES = (Mode.HYBRID.value, Mode.LEXICAL.value)


@dataclass(frozen=True)
class SearchRequest:
    query: str
    path: str | None = None
    glob: str | None = None
    mode: Mode = Mode.HYBRID
    regex: bool = False
    ignore_case: bool = False
    limit: int = DEFAULT_LIMIT


def parse_search_body(data: Any) -> SearchRequest:
    fields = Fields(data)
    query = fields.str("query", required=True, max_length=MAX_QUERY_CHARS, non_empty=True)
    path = fields.str("path", max_length=MAX_PATH_CHARS)
    glob = fields.str("glob", max_length=MAX_PATH_CHARS)
    mode = fields.str("mode", default=Mode.HYBRID.value, max_length=20)
    if mode not in PUBLIC_MODES:
        raise ValidationError(f"mode must be one of {', '.join(PUBLIC_MODES)}, got {mode!r}")
    regex = fields.bool("regex")
    ignore_case = fields.bool("ignore_case")
    limit = fields.int("limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    fields.reject_unknown()
    return SearchRequest(query=query, path=path, glob=glob, mode=Mode(mode), regex=regex, ignore_case=ignore_case, limit=limit)


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
    """Seed 002: entries are exact directory names, not globs or relative paths."""
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
    """An HTTP caller may only put a cache under the data directory, the service's index_dir or an allowed workspace base."""
    resolved = index_dir.expanduser().resolve()
    configured = [settings.data_dir, *([settings.index_dir] if settings.index_dir is not None else []), *settings.allowed_roots]
    bases = [base.resolve() for base in configured]
    if not any(resolved == base or base in resolved.parents for base in bases):
        raise ValidationError(
            f"search.index_dir {str(index_dir)!r} must lie under the data directory, the service's index_dir "
            "or an allowed workspace base directory"
        )


def resolve_root(raw: str, settings: Settings, *, trusted: bool = False) -> Path:
    """The real path of a workspace root, which must be a directory under an allowed base.

    ``trusted`` (the local CLI) skips the allowed-base check: its caller owns the machine."""
    if "\0" in raw:
        raise ValidationError("root contains a NUL byte")
    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded):
        raise ValidationError(f"root {raw!r} must be an absolute path")
    try:
        resolved = Path(expanded).resolve()  # symlinks and '..' resolved before the check below
    except (RuntimeError, OSError):  # Python 3.11 reports a symlink loop as RuntimeError, later ones as OSError
        raise ValidationError(f"root {raw!r} is a symlink loop; register a real directory") from None
    if not trusted:
        bases = [base.resolve() for base in settings.allowed_roots]
        if not bases:
            raise PathOutsideWorkspace(
                "no allowed workspace base directories are configured; the operator sets AGENTSEARCH_ALLOWED_ROOTS or --allow-root"
            )
        if not any(resolved == base or base in resolved.parents for base in bases):
            raise PathOutsideWorkspace(
                f"root {raw!r} is not under an allowed workspace base directory (symlinks and '..' are resolved first); "
                "register a directory inside one"
            )
    try:
        is_dir = resolved.is_dir()
    except OSError as exc:  # a name longer than the file system allows, ...
        raise ValidationError(f"root {raw!r} is not an existing directory ({exc.strerror})") from None
    if not is_dir:
        raise ValidationError(f"root {raw!r} is not an existing directory")
    return resolved
