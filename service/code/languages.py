"""The languages the chunker parses: each tree-sitter grammar, the declarations its nodes are, the extensions that pick it.

Grammars load from the official wheels on first use; a ``Parser`` is made per thread (it is not
safe to share). ``ChunkKind`` names what each declaration node is, and what chunks outside
declarations are.
"""

from __future__ import annotations

import importlib
import posixpath
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from tree_sitter import Language, Parser


class ChunkKind(StrEnum):
    """What a chunk holds: a declaration (the kind a grammar's node maps to) or code outside them."""

    FUNCTION = "function"
    METHOD = "method"
    CLASS = "class"
    TYPE = "type"
    IMPL = "impl"
    MODULE = "module"
    PREAMBLE = "preamble"
    GAP = "gap"
    WINDOW = "window"


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    """What declarations look like in one tree-sitter grammar."""

    name: str
    grammar: str  # "module:function" of the grammar wheel, e.g. "tree_sitter_python:language"
    declarations: Mapping[str, ChunkKind]
    comments: frozenset[str] = frozenset({"comment"})
    # Nodes that wrap one declaration and belong to its chunk: decorators, export, template<>.
    wrappers: frozenset[str] = frozenset()
    # Nodes whose children are declarations at the same level: #ifdef, extern "C" { }.
    transparent: frozenset[str] = frozenset()
    # ``const f = () => ...``: a variable declaration whose value has one of these types.
    variable_declarations: frozenset[str] = frozenset()
    function_values: Mapping[str, ChunkKind] = field(default_factory=dict)


_F, _M, _C, _T = ChunkKind.FUNCTION, ChunkKind.METHOD, ChunkKind.CLASS, ChunkKind.TYPE
_JS_DECLARATIONS: Mapping[str, ChunkKind] = {
    "function_declaration": _F,
    "generator_function_declaration": _F,
    "class_declaration": _C,
    "method_definition": _M,
}
_JS_FUNCTION_VALUES: Mapping[str, ChunkKind] = {
    "arrow_function": _F,
    "function_expression": _F,
    "function": _F,
    "generator_function": _F,
    "class": _C,
}
_TS_DECLARATIONS: Mapping[str, ChunkKind] = {
    **_JS_DECLARATIONS,
    "abstract_class_declaration": _C,
    "interface_declaration": _T,
    "type_alias_declaration": _T,
    "enum_declaration": _T,
    "function_signature": _F,
    "method_signature": _M,
    "abstract_method_signature": _M,
    "internal_module": ChunkKind.MODULE,
    "module": ChunkKind.MODULE,
}
_C_DECLARATIONS: Mapping[str, ChunkKind] = {
    "function_definition": _F,
    "struct_specifier": _T,
    "union_specifier": _T,
    "enum_specifier": _T,
    "type_definition": _T,
}
_PREPROCESSOR = frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"})


def _javascript_like(
    name: str, grammar: str, declarations: Mapping[str, ChunkKind], wrappers: frozenset[str]
) -> LanguageSpec:
    return LanguageSpec(
        name,
        grammar,
        declarations,
        wrappers=wrappers,
        variable_declarations=frozenset({"lexical_declaration", "variable_declaration"}),
        function_values=_JS_FUNCTION_VALUES,
    )


_TS_WRAPPERS = frozenset({"export_statement", "ambient_declaration", "expression_statement"})
_LANGUAGES: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        "python",
        "tree_sitter_python:language",
        {"function_definition": _F, "class_definition": _C},
        wrappers=frozenset({"decorated_definition"}),
    ),
    _javascript_like(
        "javascript", "tree_sitter_javascript:language", _JS_DECLARATIONS, frozenset({"export_statement"})
    ),
    _javascript_like("typescript", "tree_sitter_typescript:language_typescript", _TS_DECLARATIONS, _TS_WRAPPERS),
    _javascript_like("tsx", "tree_sitter_typescript:language_tsx", _TS_DECLARATIONS, _TS_WRAPPERS),
    LanguageSpec(
        "go",
        "tree_sitter_go:language",
        {"function_declaration": _F, "method_declaration": _M, "type_declaration": _T},
    ),
    LanguageSpec(
        "rust",
        "tree_sitter_rust:language",
        {
            "function_item": _F,
            "function_signature_item": _F,
            "macro_definition": _F,
            "struct_item": _T,
            "enum_item": _T,
            "union_item": _T,
            "type_item": _T,
            "trait_item": _T,
            "impl_item": ChunkKind.IMPL,
            "mod_item": ChunkKind.MODULE,
        },
        # #[derive(...)] sits above its item the way a comment does.
        comments=frozenset({"line_comment", "block_comment", "attribute_item"}),
    ),
    LanguageSpec(
        "java",
        "tree_sitter_java:language",
        {
            "class_declaration": _C,
            "enum_declaration": _C,
            "record_declaration": _C,
            "interface_declaration": _T,
            "annotation_type_declaration": _T,
            "method_declaration": _M,
            "constructor_declaration": _M,
            "compact_constructor_declaration": _M,
        },
        comments=frozenset({"line_comment", "block_comment"}),
        transparent=frozenset({"enum_body_declarations"}),
    ),
    LanguageSpec("c", "tree_sitter_c:language", _C_DECLARATIONS, transparent=_PREPROCESSOR),
    LanguageSpec(
        "cpp",
        "tree_sitter_cpp:language",
        {
            **_C_DECLARATIONS,
            "class_specifier": _C,
            "namespace_definition": ChunkKind.MODULE,
        },
        wrappers=frozenset({"template_declaration"}),
        transparent=_PREPROCESSOR | {"linkage_specification", "declaration_list"},
    ),
    LanguageSpec(
        "ruby",
        "tree_sitter_ruby:language",
        {
            "method": _F,
            "singleton_method": _F,
            "class": _C,
            "singleton_class": _C,
            "module": ChunkKind.MODULE,
        },
    ),
)
_BY_NAME = {spec.name: spec for spec in _LANGUAGES}
_EXTENSIONS: Mapping[str, str] = {
    **dict.fromkeys((".py", ".pyi"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), "javascript"),
    **dict.fromkeys((".ts", ".mts", ".cts"), "typescript"),
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    **dict.fromkeys((".c", ".h"), "c"),
    **dict.fromkeys((".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx"), "cpp"),
    **dict.fromkeys((".rb", ".rake"), "ruby"),
}


def language_for_path(path: str) -> LanguageSpec | None:
    """The grammar for a file, by extension; None for languages chunked by windows only."""
    extension = posixpath.splitext(path)[1].lower()
    name = _EXTENSIONS.get(extension)
    return _BY_NAME[name] if name else None


@cache
def _grammar(spec_name: str) -> Language:
    module_name, function_name = _BY_NAME[spec_name].grammar.split(":")
    module = importlib.import_module(module_name)
    return Language(getattr(module, function_name)())


_parsers = threading.local()  # a Parser is not safe to share between threads


def parser_for(spec: LanguageSpec) -> Parser:
    """This thread's parser for the language."""
    cache: dict[str, Parser] = _parsers.__dict__.setdefault("by_language", {})
    parser = cache.get(spec.name)
    if parser is None:
        parser = cache[spec.name] = Parser(_grammar(spec.name))
    return parser


__all__ = ["ChunkKind", "LanguageSpec", "language_for_path", "parser_for"]
