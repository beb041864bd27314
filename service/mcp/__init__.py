"""The MCP server: the three searches (and the two tools their answers point at) as Model Context Protocol tools, over Streamable HTTP and stdio.

    jsonrpc.py   JSON-RPC 2.0 messages, error codes and error bodies
    schemas.py   the tools' JSON Schemas, taken from ``openapi.yaml``
    tools.py     the tool definitions (``search``, ``code_search``, ``action_search``)
    results.py   answers and failures as MCP tool results
    backends.py  running a tool on the engine in this process (HTTP front end, embedded stdio)
    remote.py    running a tool against a remote service's ``/v1`` API (``agentsearch mcp --url``)
    server.py    the protocol: initialize and version negotiation, ping, tools/list, tools/call
    sessions.py  ``Mcp-Session-Id``: signed ids, termination kept in Redis
    http.py      the ``/mcp`` endpoint (Streamable HTTP transport)
    stdio.py     ``agentsearch mcp``: the same server over stdin/stdout

Nothing is imported here, so ``service.middleware`` can import ``jsonrpc`` without a cycle.
"""
