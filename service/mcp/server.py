"""The MCP protocol, apart from any transport: version negotiation, ping, tools/list, tools/call.

Protocol versions are the handshake-era ones (``initialize``): 2024-11-05 to 2025-11-25. A
client asking for one of them gets it; any other request gets the newest, and the client
decides whether it can speak that. Before 2025-06-18 there is no ``structuredContent`` nor
``outputSchema``: those clients get the text content alone, which carries the same substance.
Other methods (``server/discover`` of the 2026 protocol, resources, prompts, logging) answer
"method not found", which is how a client learns this server does not offer them.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

from service.errors import AgentSearchError
from service.mcp.backends import SearchBackend, ToolError
from service.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    Message,
    RpcError,
    error_message,
    result_message,
)
from service.mcp.results import (
    CallToolResult,
    action_result,
    catalog_result,
    code_result,
    error_result,
    for_version,
    registered_result,
    waiting_result,
)
from service.mcp.tools import ToolName, tool_named, tool_names, tools
from service.validation import Fields

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION = SUPPORTED_VERSIONS[0]
STRUCTURED_SINCE = "2025-06-18"
SERVER_NAME = "agentsearch"

INSTRUCTIONS = (
    "agentsearch finds things for an agent, by meaning. `search`: what on this platform can do a task "
    "(capabilities, guides, packages and exports, integrations, MCP servers, secret names); open a hit "
    "with search({entity: ref}). `code_search`: where something lives in a registered code workspace. "
    "`action_search`: which connected service account and action can do it; call the action with the "
    "`service` it names. `waiting_summary`: everything waiting on the user (expired secrets, reconnects); "
    "`register_workspace`: make a directory searchable by `code_search`. Results with isError say what to fix."
)


def negotiate(requested: Any) -> str:
    """The version to speak: the client's when supported, else our newest."""
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def has_structured_output(version: str) -> bool:
    return SUPPORTED_VERSIONS.index(version) <= SUPPORTED_VERSIONS.index(STRUCTURED_SINCE)


def server_version() -> str:
    try:
        return importlib.metadata.version("agentsearch")
    except importlib.metadata.PackageNotFoundError:
        return "0"


async def answer(message: Message, backend: SearchBackend, version: str) -> dict[str, Any] | None:
    """The reply to one message (``None`` for notifications and responses, which get none)."""
    if not message.is_request:
        return None  # initialized, cancelled (each HTTP request ends on its own), responses to us
    assert message.id is not None and message.method is not None
    try:
        return result_message(message.id, await _result(message.method, message.params, backend, version))
    except RpcError as exc:
        return error_message(message.id, exc)
    except Exception:  # a defect, never the caller's input: still a JSON-RPC answer, not a bare HTTP 500
        log.exception("MCP request failed", extra={"method": message.method})
        return error_message(message.id, RpcError(INTERNAL_ERROR, "the server failed to answer this request; retry, and report it if it persists"))


async def _result(method: str, params: dict[str, Any], backend: SearchBackend, version: str) -> dict[str, Any]:
    if method == "initialize":
        return initialize_result(params)
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [tool.listing(structured=has_structured_output(version)) for tool in tools()]}
    if method == "tools/call":
        return await call_tool(params, backend, version)
    raise RpcError(METHOD_NOT_FOUND, f"method {method!r} is not offered; this server answers initialize, ping, tools/list and tools/call")


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str) or not requested:
        raise RpcError(INVALID_PARAMS, f"initialize needs params.protocolVersion, a string such as {LATEST_VERSION!r}")
    return {
        "protocolVersion": negotiate(requested),
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": SERVER_NAME, "title": "agentsearch", "version": server_version()},
        "instructions": INSTRUCTIONS,
    }


async def call_tool(params: dict[str, Any], backend: SearchBackend, version: str) -> CallToolResult:
    """Unknown tools and malformed params are protocol errors; bad arguments are tool errors."""
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, f"tools/call needs params.name, one of {tool_names()}")
    tool = tool_named(name)
    if tool is None:
        raise RpcError(INVALID_PARAMS, f"unknown tool {name[:100]!r}; the tools are {tool_names()}")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object holding the tool's inputs")
    result = await run_tool(tool.name, backend, arguments)
    return for_version(result, structured=has_structured_output(version))


async def run_tool(name: ToolName, backend: SearchBackend, arguments: dict[str, Any]) -> CallToolResult:
    catalog = name is ToolName.SEARCH
    try:
        if catalog:
            return catalog_result(await backend.catalog_search(arguments))
        if name is ToolName.CODE_SEARCH:
            workspace = Fields(arguments).str("workspace", required=True, non_empty=True, max_length=4096)
            rest = {key: value for key, value in arguments.items() if key != "workspace"}
            return code_result(await backend.code_search(workspace, rest))
        if name is ToolName.WAITING_SUMMARY:
            Fields(arguments).reject_unknown()  # it takes no inputs
            return waiting_result(await backend.waiting_summary())
        if name is ToolName.REGISTER_WORKSPACE:
            return registered_result(await backend.register_workspace(arguments))
        return action_result(await backend.action_search(arguments))
    except AgentSearchError as exc:
        return error_result(exc.code, exc.message, details=exc.details, catalog=catalog)
    except ToolError as exc:
        return error_result(exc.code, exc.message, details=exc.details, catalog=catalog)
