"""The tools: the three searches, ``search`` (catalog), ``code_search`` (a workspace's code) and
``action_search``, and two helpers their answers point at: ``waiting_summary`` (everything waiting
on the user, whose first few the catalog's Waiting block shows) and ``register_workspace`` (what
``code_search`` on an unregistered root asks for).

Each tool's schemas are the HTTP contract's (see ``schemas.py``); the descriptions are written for
the model that picks a tool: what it finds, when to use it rather than the other two, and what
the next call looks like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

from service.mcp.schemas import contract_schema


class ToolName(StrEnum):
    SEARCH = "search"
    CODE_SEARCH = "code_search"
    ACTION_SEARCH = "action_search"
    WAITING_SUMMARY = "waiting_summary"
    REGISTER_WORKSPACE = "register_workspace"


@dataclass(frozen=True)
class ToolDef:
    name: ToolName
    title: str
    description: str
    input_schema: dict[str, Any] = field(hash=False)
    output_schema: dict[str, Any] = field(hash=False)
    read_only: bool = True

    def listing(self, *, structured: bool) -> dict[str, Any]:
        """The ``tools/list`` entry; ``structured``: the protocol version knows ``outputSchema`` and titles."""
        entry: dict[str, Any] = {
            "name": self.name.value,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {"title": self.title, "readOnlyHint": self.read_only, "idempotentHint": True, "openWorldHint": False},
        }
        if structured:
            entry["title"] = self.title
            entry["outputSchema"] = self.output_schema
        return entry


SEARCH_DESCRIPTION = """\
Find what can do a task on this platform: built-in capabilities (grouped by domain), official \
guides, the user's saved packages and their exports, integrations, connected MCP servers and \
their tools, and secret references (names and metadata only, never values).

Use it first whenever you need to know whether a capability, package, integration or secret \
exists, or how to call one. Not for source code in a workspace (use code_search) nor for which \
connected service account can run an API action (use action_search).

- `query`: a short task phrase ("send an email to Kent"), not a keyword list. Results are ranked; \
each hit has an `entity` ref such as `capability:emailSend` or `package:home-controls#./lights`, \
why it matched, and for the top hits an inlined call shape or call contract.
- An empty or broad query ("what can you do with email") returns the domain index; `domain` \
with a query ranks only that domain, without one it lists the domain in curated order, 50 a \
page: pass the answer's `nextCursor` back as `cursor` (same `domain`) for the next page.
- Next step: call search again with `entity` set to a hit's ref (or a list of 1-10 refs) for \
its detail: the execute snippet and types of a capability, a package's exports, a guide's \
markdown. Open one heading with `guide:{id}#{slug}` and lines with `#L165` or `#L165-L180`.
- When results look thin, rephrase the query or browse the domain index; `entity` only opens a \
known ref. A result with isError says what to fix; on `rateLimit`, wait `retryAfterSeconds`."""

CODE_SEARCH_DESCRIPTION = """\
Search the source code of a registered workspace (a directory tree) by meaning and by text. \
Hybrid mode (default) merges chunk-level lexical and semantic matches; source files rank above \
docs, tests and generated code. Use it to find where something is defined, called or handled. \
Not for platform capabilities or packages (use search) nor for service actions (use action_search).

- `workspace`: the workspace id (`ws_` + 20 hex digits) returned when it was registered, or the \
absolute path of its root.
- `query`: what you look for, in words ("where are passwords hashed") or as an identifier. With \
`regex: true` it is a Python regular expression (always lexical).
- Narrow with `path` (a directory or file inside the workspace; "." for all) first, then a \
simple `glob` (`*.go`, `internal/*.go`, `pkg/*_test.go`; no `**`).
- The answer is text-first: one `path:line:snippet` per match in every mode (which pass found \
it is in the structured results), then `notice:` lines. Next step: read the file at \
that line. A notice that the semantic scope is too large means the answer is lexical: narrow \
`path` or `glob` for meaning-based matches."""

ACTION_SEARCH_DESCRIPTION = """\
Find which connected service instance and action can do something for the caller: each result \
is one (service instance, action) pair it can call, ranked by relevance, with the action's risk \
(read, write, delete), tier and auth state. Use it when you do not yet know which service or \
account can do what you need. Not for platform capabilities or packages (use search) nor for \
code (use code_search).

- `query`: what you want done ("send an email", "list repositories"). An empty string lists \
every callable instance without actions (browse mode).
- Next step: call the action with `service` exactly as returned (the instance name, e.g. \
`gmail_work`), never the `template` key; rows of one template are sibling accounts.
- `include_catalog: true` also lists templates with no configured instance as \
`setup_required: true` rows: the user must set those up before they can be called.
- `exclude`: comma-separated instance names or template keys to drop (services already tried)."""

WAITING_SUMMARY_DESCRIPTION = """\
Everything waiting on the signed-in user: expired secrets, integrations that need reconnecting, \
disconnected MCP servers and other items the platform reported. Ranked search shows the first \
three as its Waiting block; this lists them all. No inputs.

Each item has a status (`block`: calls that need it fail until the user acts; `degraded`) and the \
step the user must take. An agent cannot clear these itself: tell the user."""

REGISTER_WORKSPACE_DESCRIPTION = """\
Register a directory as a code workspace so code_search can search it, or update the search \
settings of one already registered. Use it when code_search says no workspace is registered at a \
path.

- `root`: the absolute path of the directory; it must lie under one of the base directories this \
service allows you, else the answer says which ones are allowed.
- `search` (optional): skip_dirs, embeddings_model, embeddings_dimensions, prewarm_embeddings.
- Next step: call code_search with `workspace` set to the returned `id` (or the root path). The \
index builds in the background; searches answer meanwhile. Registering the same root again \
returns the same id."""

_REGISTER_INPUTS = {
    "root": "Absolute path of the directory to register, under a base directory this service allows you.",
}

_SEARCH_INPUTS = {
    "query": "A short task phrase. Empty or broad: the domain index. Only the first 2,000 characters are searched (a notice says so).",
    "domain": "A domain id (email, jobs, mcp:home) to scope to; without query, lists that domain. Unknown ids are refused with the valid ones.",
    "entity": "A ref `{type}:{id}[#fragment]` from a hit (types capability, guide, integration, mcp-server, package, secret), or a list of 1-10. Not combined with query or domain.",
    "limit": "Most ranked hits (default 10) or listing page size (default 50); over 50 answers 50, with a notice.",
    "cursor": "A domain listing's nextCursor, with the same domain and no query: the next page.",
    "maxResponseSize": "Markdown budget in characters (500-200000): low-ranked hits are trimmed.",
    "includeHiddenPackages": "Also rank hidden saved packages (default false).",
}
_CODE_INPUTS = {
    "query": "Words, an identifier, or (with regex) a Python regular expression. Words past 1,000 characters are not searched (a notice says so).",
    "path": "'.' (default, the whole workspace) or a directory or file inside it, relative to its root.",
    "glob": "A basename glob (*.go) or a relative one (internal/*.go); no **.",
    "mode": "hybrid (default: lexical + semantic) or lexical (text only).",
    "limit": "Most result lines (default 20); over 200 answers 200, with a notice.",
}
_WORKSPACE_INPUT = {
    "workspace": {
        "type": "string",
        "minLength": 1,
        "maxLength": 4096,
        "description": "The workspace id (ws_ + 20 hex digits) or the absolute path of its registered root.",
    }
}
_ACTION_INPUTS = {
    "query": "What you want done. Empty string: browse mode (every callable instance, no actions). Only the first 1,000 characters are searched (a notice says so).",
    "include_catalog": "Also list un-connected templates as setup_required rows (default false).",
    "exclude": "Comma-separated instance names or template keys to omit, e.g. 'stripe_test,gmail' (a trailing comma is fine).",
    "limit": "Most results (default 20; over 100 answers 100, with a notice); browse mode is not truncated.",
}


@cache
def tools() -> tuple[ToolDef, ...]:
    return (
        ToolDef(
            ToolName.SEARCH,
            "Search capabilities, packages, guides and integrations",
            SEARCH_DESCRIPTION,
            contract_schema("CatalogSearchRequest", descriptions=_SEARCH_INPUTS),
            contract_schema("CatalogStructured"),
        ),
        ToolDef(
            ToolName.CODE_SEARCH,
            "Search a workspace's code",
            CODE_SEARCH_DESCRIPTION,
            contract_schema("WorkspaceSearchRequest", descriptions=_CODE_INPUTS, extra=_WORKSPACE_INPUT),
            contract_schema("WorkspaceSearchAnswer"),
        ),
        ToolDef(
            ToolName.ACTION_SEARCH,
            "Search the service actions the caller can run",
            ACTION_SEARCH_DESCRIPTION,
            contract_schema("ActionSearchRequest", descriptions=_ACTION_INPUTS),
            contract_schema("ActionSearchResponse"),
        ),
        ToolDef(
            ToolName.WAITING_SUMMARY,
            "List everything waiting on the user",
            WAITING_SUMMARY_DESCRIPTION,
            {"type": "object", "properties": {}, "additionalProperties": False},
            contract_schema("CatalogWaitingList"),
        ),
        ToolDef(
            ToolName.REGISTER_WORKSPACE,
            "Register a directory for code search",
            REGISTER_WORKSPACE_DESCRIPTION,
            contract_schema("WorkspaceRegistration", descriptions=_REGISTER_INPUTS),
            contract_schema("WorkspaceState"),
            read_only=False,
        ),
    )


def tool_names() -> str:
    """``search, code_search, ... and register_workspace``: the tool names for a message."""
    names = [tool.name.value for tool in tools()]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def tool_named(name: str) -> ToolDef | None:
    return next((tool for tool in tools() if tool.name.value == name), None)
