"""An attempt of a HarnessRun, decided once from the run, its resolved provider and the operator's
configuration (pure); every builder of the attempt's plan, pod, policies and gateway grants takes it.

A routed attempt (its model traffic through the model gateway) sees its definition without credential
grants (the gateway holds the vendor's key) and, under `networkPolicy: provider`, without egress of its
own: the gateway's rule is added to its policy. Everything below is worked out from that definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness_operator.api.v1alpha1 import (
    EgressRule,
    HarnessDefinitionSpec,
    HarnessRun,
    McpServer,
    ModelRoute,
    NetworkPolicyMode,
    ToolPolicy,
)
from harness_operator.contract.plan import ConfinementProbe
from harness_operator.core.access.confinement import compute_confinement
from harness_operator.core.access.egress import compute_egress_rules, compute_route
from harness_operator.core.access.mcp import compute_mcp_servers
from harness_operator.core.access.model_route import compute_model_route
from harness_operator.core.access.tool_policy import compute_tool_policy
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.resolution import AttemptTarget, compute_provider_chain


@dataclass(frozen=True)
class Attempt:
    """One attempt: which provider with which options (`with`, written at `options_field`), the
    definition as the attempt sees it, and how it runs: its model route (None: not routed), its declared
    egress and how their host rules are enforced (egress.ROUTE_*), the probe it waits on before its agent
    starts, its MCP servers and its tool policy."""

    index: int
    provider: str
    position: int
    namespaced: bool
    options: dict[str, Any]
    options_field: str
    definition: HarnessDefinitionSpec
    model_route: ModelRoute | None
    egress: list[EgressRule]
    route: str
    confinement: ConfinementProbe | None
    mcp_servers: list[McpServer]
    tool_policy: ToolPolicy | None


def decide_attempt(run: HarnessRun, target: AttemptTarget, config: OperatorConfig) -> Attempt:
    """The attempt `target` resolved, decided for this run and configuration."""
    model_route = compute_model_route(run, target.definition, config)
    definition = target.definition if model_route is None else as_routed(run, target.definition)
    entry = compute_provider_chain(run.spec)[target.position - 1]
    servers = compute_mcp_servers(run, definition)
    egress = compute_egress_rules(run, definition, servers)
    route = compute_route(egress, config)
    return Attempt(
        index=target.index,
        provider=target.provider,
        position=target.position,
        namespaced=target.namespaced,
        options=entry.options,
        options_field=entry.options_field,
        definition=definition,
        model_route=model_route,
        egress=egress,
        route=route,
        confinement=compute_confinement(run, egress, route, config),
        mcp_servers=servers,
        tool_policy=compute_tool_policy(run.spec.tools, definition),
    )


def decide_attempts(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> list[Attempt]:
    """Every attempt of the run, in order."""
    return [decide_attempt(run, target, config) for target in targets]


def as_routed(run: HarnessRun, definition: HarnessDefinitionSpec) -> HarnessDefinitionSpec:
    """The definition a routed attempt sees: no credential grants (vendor keys, another vendor's too) and,
    under `provider` mode, no egress of its own."""
    update: dict[str, Any] = {"credentials": []}
    mode = run.spec.sandbox.network_policy if run.spec.sandbox else NetworkPolicyMode.provider
    if mode == NetworkPolicyMode.provider:
        update["egress"] = []
    return definition.model_copy(update=update)
