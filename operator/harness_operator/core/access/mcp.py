"""MCP servers: the ones an attempt gets (its provider's, then the run's), the CLI's configuration and the
tool names it allows, and the egress a remote server needs (pure)."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from harness_operator.api.v1alpha1 import (
    EgressRule,
    HarnessDefinitionSpec,
    HarnessRun,
    McpFormat,
    McpServer,
    McpSupport,
)
from harness_operator.contract.plan import AcpMcpServerPlan
from harness_operator.contract.variables import HEADER_VARIABLE

_BEARER = re.compile(r"Bearer \$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def compute_mcp_servers(run: HarnessRun, definition: HarnessDefinitionSpec) -> list[McpServer]:
    """The attempt's servers: its provider's, then the run's (a run's of the same name replaces it)."""
    own = {s.name for s in run.spec.mcp_servers}
    return [s for s in definition.mcp_servers if s.name not in own] + list(run.spec.mcp_servers)


def describe_mcp_unsupported(provider: str) -> str:
    return (
        f'spec.mcpServers: provider "{provider}" takes no MCP servers (its definition has no spec.mcp); use '
        "a provider that does (claude, codex, copilot, gemini, opencode, qwen and their ACP adapters), or "
        "drop them"
    )


def _headers(server: McpServer, support: McpSupport) -> dict[str, str]:
    """A remote server's headers, each `$(NAME)` written as the variable the CLI expands."""
    return {
        h.name: HEADER_VARIABLE.sub(lambda m: support.variable.format(name=m.group(1)), h.value)
        for h in server.headers
    }


def _server_config(server: McpServer, support: McpSupport) -> dict[str, Any]:
    """One server as the CLI's json or settings configuration writes it; a header's `$(NAME)` as the CLI's
    variable."""
    headers = _headers(server, support)
    where: dict[str, Any]
    if support.format == McpFormat.settings:
        where = {"httpUrl": server.url} if server.url else {}
        extra: dict[str, Any] = {"trust": True, "includeTools": list(server.tools)}
    else:
        where = {"type": "http", "url": server.url} if server.url else {"type": "stdio"}
        extra = {"tools": list(server.tools)} if support.list_tools else {}
    if server.command:
        where |= {"command": server.command[0], "args": server.command[1:]}
    return {**where, **({"headers": headers} if headers else {}), **extra}


def _toml(value: Any) -> str:
    """A TOML value: a JSON string (ASCII, its escapes TOML's too), list or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}={_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _codex_headers(server: McpServer) -> dict[str, Any]:
    """A remote server's headers as Codex sends them: literal, or whole from one variable (Authorization
    as `Bearer ` and a variable: its bearer token)."""
    out: dict[str, Any] = {}
    for header in server.headers:
        whole, bearer = HEADER_VARIABLE.fullmatch(header.value), _BEARER.fullmatch(header.value)
        if header.name.lower() == "authorization" and bearer:
            out["bearer_token_env_var"] = bearer.group(1)
        elif whole:
            out.setdefault("env_http_headers", {})[header.name] = whole.group(1)
        else:
            out.setdefault("http_headers", {})[header.name] = header.value
    return out


def _codex_server(server: McpServer) -> str:
    """`mcp_servers.NAME={...}`: the server, only its listed tools enabled and approved (nobody answers a
    prompt in a run), and required (a server that cannot be reached fails the attempt)."""
    if server.command:
        where: dict[str, Any] = {"command": server.command[0], "args": server.command[1:]}
    else:
        where = {"url": server.url, **_codex_headers(server)}
    table = {
        **where,
        "enabled_tools": list(server.tools),
        "default_tools_approval_mode": "approve",
        "required": True,
    }
    return f"mcp_servers.{server.name}={_toml(table)}"


def find_mcp_problem(servers: list[McpServer], support: McpSupport) -> str | None:
    """Why the CLI cannot take `servers` as they are written (None: it can)."""
    if support.format != McpFormat.codex:
        return None
    for server in servers:
        for header in server.headers:
            value = header.value
            bearer = header.name.lower() == "authorization" and _BEARER.fullmatch(value)
            if HEADER_VARIABLE.search(value) and not (HEADER_VARIABLE.fullmatch(value) or bearer):
                return (
                    f"spec.mcpServers {server.name!r}: header {header.name} mixes text and variables, which "
                    "this CLI cannot expand: write the value as $(NAME) alone (or Authorization as Bearer "
                    "$(NAME)), the variable holding the whole value"
                )
    return None


def build_mcp_arguments(servers: list[McpServer], definition: HarnessDefinitionSpec) -> list[str]:
    """The CLI's arguments that give it `servers` (none without servers or support): the configuration
    names a header's secret only as a variable the CLI reads."""
    support = definition.mcp
    if not servers or support is None or support.format in (McpFormat.settings, McpFormat.opencode):
        return []
    assert support.flag is not None  # the CRD's rule: a flag for the json and codex formats
    if support.format == McpFormat.codex:
        return [arg for s in servers for arg in (support.flag, _codex_server(s))] + list(support.args)
    config = {"mcpServers": {s.name: _server_config(s, support) for s in servers}}
    return [support.flag, json.dumps(config, sort_keys=True, separators=(",", ":")), *support.args]


def build_mcp_home_files(servers: list[McpServer], definition: HarnessDefinitionSpec) -> dict[str, str]:
    """The settings file that gives the CLI `servers` (settings format; none otherwise), to be merged with
    the home's other files."""
    support = definition.mcp
    if not servers or support is None or support.format != McpFormat.settings:
        return {}
    assert support.file is not None  # the CRD's rule: a file for the settings format
    config = {"mcpServers": {s.name: _server_config(s, support) for s in servers}}
    return {support.file: json.dumps(config, sort_keys=True)}


def _opencode_server(server: McpServer, support: McpSupport) -> dict[str, Any]:
    if server.command:
        return {"type": "local", "command": list(server.command)}
    headers = _headers(server, support)
    return {"type": "remote", "url": server.url, **({"headers": headers} if headers else {})}


def build_mcp_env(servers: list[McpServer], definition: HarnessDefinitionSpec) -> dict[str, str]:
    """The variable whose JSON configuration gives the CLI `servers` (opencode format; none otherwise),
    to be merged with what else it holds: each server's tools switched off but those it lists (in this
    order: the last matching rule wins)."""
    support = definition.mcp
    if not servers or support is None or support.format != McpFormat.opencode:
        return {}
    assert support.env is not None  # the CRD's rule: a variable for the opencode format
    tools: dict[str, bool] = {}
    for server in servers:
        tools[support.tool_name.format(server=server.name, tool="*")] = False
        tools |= {support.tool_name.format(server=server.name, tool=t): True for t in server.tools}
    config = {"mcp": {s.name: _opencode_server(s, support) for s in servers}, "tools": tools}
    return {support.env: json.dumps(config)}


def compute_raw_json_variables(servers: list[McpServer], definition: HarnessDefinitionSpec) -> list[str]:
    """The variables the CLI pastes unescaped into the JSON text of its configuration (opencode format:
    OpenCode replaces {env:NAME} before it parses), which the runner checks before the agent starts."""
    support = definition.mcp
    if support is None or support.format != McpFormat.opencode:
        return []
    return header_variables(servers)


def header_variables(servers: Sequence[McpServer]) -> list[str]:
    """The variables the servers' headers name (`$(NAME)`), sorted."""
    return sorted({m.group(1) for s in servers for h in s.headers for m in HEADER_VARIABLE.finditer(h.value)})


def build_mcp_tool_names(servers: list[McpServer], definition: HarnessDefinitionSpec) -> list[str]:
    """The servers' listed tools as the CLI names them."""
    support = definition.mcp
    if support is None:
        return []
    return [support.tool_name.format(server=s.name, tool=t) for s in servers for t in s.tools]


# Where no MCP server may be unless the platform allows it (the chart's mcp.allowedCIDRs): loopback,
# link-local (metadata services), private, shared (CGNAT), documentation, benchmarking, multicast and
# reserved ranges, and the IPv6 ones that embed an IPv4 address (NAT64, 6to4). The chart's admission
# policy refuses the same (templates/_admission.tpl mcpRefusedCIDRs; a unit test compares).
MCP_REFUSED_CIDRS = tuple(
    ipaddress.ip_network(c)
    for c in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "100::/64",
        "2001:db8::/32",
        "2002::/16",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)
# Names inside the cluster or of a metadata service (besides single-label names, which resolve through
# the resolver's search path into the cluster): refused unless allowed by name.
MCP_REFUSED_NAMES = ("metadata.google.internal", "metadata.azure.internal", "instance-data.ec2.internal")
# A dotted DNS name whose last label starts with a letter: never a numeric or hex spelling of an address
# (`2852039166`, `0xa9fea9fe`), which a resolver would take as one.
_DNS_NAME = re.compile(r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
MCP_ALLOW_FIX = (
    "use the server's public DNS name, or ask the platform team to allow it (chart value mcp.allowedCIDRs "
    "or mcp.allowedHosts)"
)


def is_allowed_mcp_host(host: str, allowed_cidrs: Sequence[str], allowed_hosts: Sequence[str]) -> bool:
    """May an MCP server be at `host` (a URL's host, lowercase)? A public address, or a DNS name outside
    the cluster and the metadata services, or one the platform allows."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        allowed = [ipaddress.ip_network(c, strict=False) for c in allowed_cidrs]
        if any(address in network for network in allowed):
            return True
        return not any(address in network for network in MCP_REFUSED_CIDRS)
    if any(host.endswith(p[1:]) if p.startswith("*.") else host == p for p in allowed_hosts):
        return True
    return bool(
        _DNS_NAME.fullmatch(host)
        and not host.endswith((".localhost", ".cluster.local"))
        and ".svc." not in f".{host}."
        and host not in MCP_REFUSED_NAMES
    )


def mcp_url_host(url: str) -> str | None:
    """The host an MCP server's URL names, as its egress rule opens it (None: no host can be read)."""
    try:
        return urlsplit(url).hostname or None
    except ValueError:  # a bracketed host that is no IPv6 address
        return None


def find_mcp_destination_problem(
    run: HarnessRun,
    provider: str,
    definition: HarnessDefinitionSpec,
    allowed_cidrs: Sequence[str],
    allowed_hosts: Sequence[str],
) -> str | None:
    """Why one of the attempt's remote MCP servers may not be reached from this cluster's sandboxes (None:
    every one may), naming its field: the run's, or its provider's definition's it does not replace."""
    own = {s.name for s in run.spec.mcp_servers}
    fields = [(f"spec.mcpServers[{i}].url", s) for i, s in enumerate(run.spec.mcp_servers)] + [
        (f'provider "{provider}": its definition\'s spec.mcpServers[{i}].url', s)
        for i, s in enumerate(definition.mcp_servers)
        if s.name not in own
    ]
    for field, server in fields:
        if not server.url:
            continue
        host = mcp_url_host(server.url)
        if host is None:
            return f'{field}: "{server.url}" names no host that can be read; write it as https://HOST[:PORT]/PATH'
        if is_allowed_mcp_host(host, allowed_cidrs, allowed_hosts):
            continue
        try:
            ipaddress.ip_address(host)
        except ValueError:
            what = (
                f'names host "{host}", which MCP servers may not use in this cluster (a name inside the '
                "cluster or of a metadata service: single-label, localhost, *.svc, *.cluster.local; or not a "
                "DNS name)"
            )
        else:
            what = (
                f"points at {host}, an address MCP servers may not use in this cluster (loopback, link-local "
                "such as metadata services, private, shared or reserved: the node, pods and Services)"
            )
        return f'{field}: "{server.url}" {what}; {MCP_ALLOW_FIX}'
    return None


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


def build_acp_mcp_servers(
    servers: list[McpServer], definition: HarnessDefinitionSpec, denied: Sequence[str]
) -> tuple[list[AcpMcpServerPlan], list[str]]:
    """An ACP agent's servers, each behind its gate (acp format; none otherwise), and the listed tools as
    the agent names them; a tool `denied` names (as the agent does) is not let through."""
    support = definition.mcp
    if not servers or support is None or support.format != McpFormat.acp:
        return [], []
    plans, names = [], []
    for server in servers:
        named = {t: support.tool_name.format(server=server.name, tool=t) for t in server.tools}
        tools = [t for t in server.tools if named[t] not in denied]
        args = [f"--tool={t}" for t in tools]
        if server.url:
            headers = [a for h in server.headers for a in ("--header", f"{h.name}: {h.value}")]
            args += ["--url", server.url, *headers]
        else:
            args += ["--", *(server.command or [])]
        plans.append(AcpMcpServerPlan(name=server.name, gate_args=args, env=header_variables([server])))
        names += [named[t] for t in tools]
    return plans, names
