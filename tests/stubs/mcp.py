"""Stub of a remote MCP server (the streamable HTTP transport, JSON answers): one tool, `echo`, whose
calls it records, so a test sees whether an agent called it and with which headers.

    from tests.stubs.mcp import McpStub
    with McpStub() as server:
        server.url             # the endpoint, http://127.0.0.1:<port>/mcp
        server.tool_calls()    # the arguments of every tools/call, in order
"""

from __future__ import annotations

from typing import Any

from ._base import RecordedRequest, Response, StubServer, serve_main

TOOL = "echo"
PROTOCOL_VERSION = "2025-06-18"


class McpStub(StubServer):
    name = "mcp"
    modes = ("ok",)

    @property
    def url(self) -> str:
        return self.base_url + "/mcp"

    def is_model_call(self, req: RecordedRequest) -> bool:
        return False

    def is_known(self, req: RecordedRequest) -> bool:
        return req.path.rstrip("/") == "/mcp"

    def rpc_calls(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.requests if isinstance(r.body, dict) and r.body.get("method") == method]

    def tool_calls(self) -> list[dict[str, Any]]:
        return [
            dict((r.body.get("params") or {}).get("arguments") or {}) for r in self.rpc_calls("tools/call")
        ]

    def handle(self, req: RecordedRequest) -> Response:
        if req.path.rstrip("/") != "/mcp":
            return Response(404, {"error": "not found"})
        if req.method == "GET":  # no server-initiated stream
            return Response(405, None)
        if req.method == "DELETE":
            return Response(200, None)
        body = req.body if isinstance(req.body, dict) else {}
        method, ident = body.get("method"), body.get("id")
        if ident is None:  # a notification
            return Response(202, None)
        headers = {"mcp-session-id": "stub-session"}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": (body.get("params") or {}).get("protocolVersion") or PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "harness-mcp-stub", "version": "1.0.0"},
            }
        elif method == "tools/list":
            result = {
                "tools": [
                    {
                        "name": TOOL,
                        "description": "Echo the text back.",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                            "required": ["text"],
                        },
                        "annotations": {"readOnlyHint": True},
                    }
                ]
            }
        elif method == "tools/call":
            text = str(((body.get("params") or {}).get("arguments") or {}).get("text", ""))
            result = {"content": [{"type": "text", "text": f"ECHO: {text}"}], "isError": False}
        elif method == "ping":
            result = {}
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            return Response(200, {"jsonrpc": "2.0", "id": ident, "error": error}, headers=headers)
        return Response(200, {"jsonrpc": "2.0", "id": ident, "result": result}, headers=headers)


def main(argv: list[str] | None = None) -> int:
    return serve_main(McpStub, argv)


if __name__ == "__main__":
    raise SystemExit(main())
