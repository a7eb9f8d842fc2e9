"""A local MCP server on stdio (newline-delimited JSON-RPC), for a run's `mcpServers[].command`: one tool,
`echo`, whose calls it appends to the file named by its first argument, so a test sees that the CLI
started it and the agent called it.

    python3 tests/fakes/mcp_stdio.py /tmp/calls.jsonl
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "annotations": {"readOnlyHint": True},
    }
]


def answer(request: dict, log: str) -> dict | None:
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        return None  # a notification
    params = request.get("params") or {}
    if method == "initialize":
        result: dict = {
            "protocolVersion": params.get("protocolVersion") or "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "harness-mcp-stdio", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        arguments = params.get("arguments") or {}
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(arguments) + "\n")
        result = {"content": [{"type": "text", "text": f"ECHO: {arguments.get('text', '')}"}]}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> int:
    log = sys.argv[1]
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), log)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
