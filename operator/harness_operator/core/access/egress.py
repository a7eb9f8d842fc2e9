"""What an attempt may reach by host name and how its host rules are enforced: through the egress
gateway, by Cilium's FQDN policy, or not by name (pure).

A run whose effective egress names a host reaches it only through the egress gateway the chart deploys
(Squid, `gateway/`) when there is one (egress_grant.py gives the attempt its way through); the attempt's
NetworkPolicy allows DNS, the gateway and the CIDR rules only.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_operator.api.v1alpha1 import (
    EgressRule,
    HarnessDefinitionSpec,
    HarnessRun,
    McpServer,
    NetworkPolicyMode,
)
from harness_operator.core.access.mcp import compute_mcp_egress
from harness_operator.core.config import FQDN_CILIUM, OperatorConfig

# How `host:` rules of one attempt are enforced.
ROUTE_NONE = "none"  # no host rule, or a mode without rules (none, unrestricted)

ROUTE_GATEWAY = "gateway"  # through the egress gateway, by name

ROUTE_CILIUM = "cilium"  # a CiliumNetworkPolicy with toFQDNs

ROUTE_PUBLIC = "public"  # not by name: the host's ports to every public address (a Warning Event)


def compute_egress_rules(
    run: HarnessRun, definition: HarnessDefinitionSpec, servers: list[McpServer]
) -> list[EgressRule]:
    """The attempt's declared destinations: the definition's (provider) or the run's (allowlist), and its
    remote MCP `servers`'."""
    sandbox = run.spec.sandbox
    mode = sandbox.network_policy if sandbox else NetworkPolicyMode.provider
    mcp = compute_mcp_egress(servers)
    if mode == NetworkPolicyMode.provider:
        return [*definition.egress, *mcp]
    if mode == NetworkPolicyMode.allowlist:
        return [*(sandbox.egress if sandbox else []), *mcp]
    return []


def compute_route(rules: Sequence[EgressRule], config: OperatorConfig) -> str:
    """How an attempt's host rules are enforced (ROUTE_*)."""
    if not any(rule.host for rule in rules):
        return ROUTE_NONE
    if config.egress_gateway_service:
        return ROUTE_GATEWAY
    return ROUTE_CILIUM if config.fqdn_policy == FQDN_CILIUM else ROUTE_PUBLIC
