"""An attempt decided once (core/attempt.py): its options from its chain entry, its definition as a routed
attempt sees it, its model route, egress and their route, its confinement probe, MCP servers and tool
policy, for each mode and configuration."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import EgressRule, HarnessDefinitionSpec, HarnessRun
from harness_operator.core.access.egress import ROUTE_CILIUM, ROUTE_GATEWAY, ROUTE_NONE, ROUTE_PUBLIC
from harness_operator.core.attempt import decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.resolution import AttemptTarget

MODEL_GATEWAY = {
    "model_gateway_service": "models.harness-system.svc",
    "model_gateway_vendors": ("anthropic",),
    "model_gateway_key": "k",
    "model_gateway_namespace": "harness-system",
}
EGRESS_GATEWAY = {
    "egress_gateway_service": "egress.harness-system.svc",
    "egress_gateway_key": "k",
    "egress_gateway_namespace": "harness-system",
}
PROBING = {"api_server_address": "10.96.0.1:443", "await_network_policy": "require"}
CLAUDE = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "credentials": [{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "a", "key": "k"}}],
        "egress": [{"host": "api.anthropic.com", "ports": [443]}],
        "modelRoute": {
            "vendor": "anthropic",
            "env": [{"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"}],
        },
        "mcp": {"flag": "--mcp-config", "toolName": "mcp__{server}__{tool}"},
        "mcpServers": [{"name": "docs", "url": "https://mcp.docs.example/mcp", "tools": ["search"]}],
        "tools": {"deny": ["WebFetch"]},
    }
)
CODEX = HarnessDefinitionSpec.model_validate({"binary": "codex", "egress": [{"cidr": "10.20.0.0/16"}]})


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1"},
            "spec": {"provider": "claude", "prompt": "Review.", **spec},
        }
    )


def config(*parts: dict[str, Any]) -> OperatorConfig:
    settings: dict[str, Any] = {"fqdn_policy": "none", "await_network_policy": "off"}
    for part in parts:
        settings.update(part)
    return OperatorConfig(**settings)


def test_each_attempt_takes_its_providers_options_and_field() -> None:
    run = make_run(**{"with": {"model": "a"}, "fallback": [{"provider": "codex", "with": {"effort": "low"}}]})
    run.spec.retry = None
    targets = [AttemptTarget(1, "claude", CLAUDE, 1), AttemptTarget(2, "codex", CODEX, 2)]
    first, second = decide_attempts(run, targets, config())
    assert (first.options, first.options_field) == ({"model": "a"}, "spec.with")
    assert (second.options, second.options_field) == ({"effort": "low"}, "spec.fallback[0].with")
    assert (second.index, second.provider, second.position) == (2, "codex", 2)


@pytest.mark.parametrize(
    ("sandbox", "parts", "routed", "credentials", "egress", "route"),
    [
        # Not routed: the definition as it is; its host rule by the chosen enforcement.
        ({}, [], False, ["ANTHROPIC_API_KEY"], ["api.anthropic.com", "mcp.docs.example"], ROUTE_PUBLIC),
        ({}, [EGRESS_GATEWAY], False, ["ANTHROPIC_API_KEY"], ["api.anthropic.com", "mcp.docs.example"], ROUTE_GATEWAY),
        ({}, [{"fqdn_policy": "cilium"}], False, ["ANTHROPIC_API_KEY"], ["api.anthropic.com", "mcp.docs.example"], ROUTE_CILIUM),
        # Routed under provider mode: no vendor key and no egress of its own; the MCP server's stays.
        ({}, [MODEL_GATEWAY], True, [], ["mcp.docs.example"], ROUTE_PUBLIC),
        ({}, [MODEL_GATEWAY, EGRESS_GATEWAY], True, [], ["mcp.docs.example"], ROUTE_GATEWAY),
        # Routed under allowlist: the run's egress decides, the definition's is kept but not used.
        ({"networkPolicy": "allowlist", "egress": [{"cidr": "10.0.0.0/8"}]}, [MODEL_GATEWAY], True, [], [None, "mcp.docs.example"], ROUTE_PUBLIC),
        # No rules in these modes: nothing to route.
        ({"networkPolicy": "none"}, [EGRESS_GATEWAY], False, ["ANTHROPIC_API_KEY"], [], ROUTE_NONE),
        ({"networkPolicy": "unrestricted"}, [EGRESS_GATEWAY], False, ["ANTHROPIC_API_KEY"], [], ROUTE_NONE),
    ],
)  # fmt: skip
def test_the_route_and_what_a_routed_attempt_sees(
    sandbox: dict[str, Any],
    parts: list[dict[str, Any]],
    routed: bool,
    credentials: list[str],
    egress: list[str | None],
    route: str,
) -> None:
    attempt = decide_attempt(make_run(sandbox=sandbox), AttemptTarget(1, "claude", CLAUDE, 1), config(*parts))
    assert (attempt.model_route is not None) == routed
    assert [c.env for c in attempt.definition.credentials] == credentials
    assert [rule.host for rule in attempt.egress] == egress
    assert attempt.route == route
    assert attempt.definition.model_route == CLAUDE.model_route  # a routed attempt keeps its route
    assert [s.name for s in attempt.mcp_servers] == ["docs"]
    assert attempt.tool_policy is not None and attempt.tool_policy.deny == ["WebFetch"]


def test_a_run_that_sets_the_routes_variables_is_not_routed() -> None:
    run = make_run(env=[{"name": "ANTHROPIC_API_KEY", "value": "mine"}])
    attempt = decide_attempt(run, AttemptTarget(1, "claude", CLAUDE, 1), config(MODEL_GATEWAY))
    assert attempt.model_route is None and attempt.definition == CLAUDE


@pytest.mark.parametrize(
    ("definition", "sandbox", "waits"),
    [
        (CLAUDE, {}, True),
        (CODEX, {}, True),  # 10.20.0.0/16 does not open the API server's address
        (CODEX.model_copy(update={"egress": [EgressRule(cidr="10.0.0.0/8")]}), {}, False),
        (CLAUDE, {"networkPolicy": "unrestricted"}, False),
    ],
)
def test_the_probe_is_decided_from_the_attempts_own_rules(
    definition: HarnessDefinitionSpec, sandbox: dict[str, Any], waits: bool
) -> None:
    attempt = decide_attempt(make_run(sandbox=sandbox), AttemptTarget(1, "p", definition, 1), config(PROBING))
    assert (attempt.confinement is not None) == waits
    if waits:
        assert attempt.confinement is not None
        assert (attempt.confinement.host, attempt.confinement.port) == ("10.96.0.1", 443)


def test_no_probe_when_waiting_is_off() -> None:
    attempt = decide_attempt(make_run(), AttemptTarget(1, "claude", CLAUDE, 1), config())
    assert attempt.confinement is None
