"""MCP servers: the ones an attempt gets (its provider's, then the run's), the CLI's configuration and the
tool names it allows, and the egress a remote server needs (pure)."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

from harness_operator.api.v1alpha1 import EgressRule, HarnessDefinitionSpec, HarnessRun, McpServer, McpSupport

_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def compute_mcp_servers(run: HarnessRun, definition: HarnessDefinitionSpec) -> list[McpServer]:
    """The attempt's servers: its provider's, then the run's (a run's of the same name replaces it)."""
    own = {s.name for s in run.spec.mcp_servers}
    return [s for s in definition.mcp_servers if s.name not in own] + list(run.spec.mcp_servers)


def describe_mcp_unsupported(provider: str) -> str:
    return (
        f'spec.mcpServers: provider "{provider}" takes no MCP servers (its definition has no spec.mcp); '
        "use a provider whose CLI does (claude), or drop them"
    )


def _server_config(server: McpServer, support: McpSupport) -> dict[str, Any]:
    """One server as the CLI's configuration writes it; a header's `$(NAME)` as the CLI's variable."""
    tools = {"tools": list(server.tools)} if support.list_tools else {}
    if server.command:
        return {"type": "stdio", "command": server.command[0], "args": server.command[1:], **tools}
    headers = {
        h.name: _VARIABLE.sub(lambda m: support.variable.format(name=m.group(1)), h.value)
        for h in server.headers
    }
    return {"type": "http", "url": server.url, **({"headers": headers} if headers else {}), **tools}


def build_mcp_arguments(servers: list[McpServer], definition: HarnessDefinitionSpec) -> list[str]:
    """The CLI's arguments that give it `servers` (none without servers or support): the JSON names a
    header's secret only as a variable the CLI expands."""
    support = definition.mcp
    if not servers or support is None:
        return []
    config = {"mcpServers": {s.name: _server_config(s, support) for s in servers}}
    return [support.flag, json.dumps(config, sort_keys=True, separators=(",", ":")), *support.args]


def build_mcp_tool_names(servers: list[McpServer], definition: HarnessDefinitionSpec) -> list[str]:
    """The servers' listed tools as the CLI names them."""
    support = definition.mcp
    if support is None:
        return []
    return [support.tool_name.format(server=s.name, tool=t) for s in servers for t in s.tools]


def compute_mcp_egress(servers: list[McpServer]) -> list[EgressRule]:
    """A remote server's host (or address) and port, as the attempt's egress must allow them."""
    rules = []
    for server in servers:
        if not server.url:
            continue
        parts = urlsplit(server.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            rules.append(EgressRule(host=host, ports=[port]))
        else:
            rules.append(EgressRule(cidr=f"{address}/{address.max_prefixlen}", ports=[port]))
    return rules
