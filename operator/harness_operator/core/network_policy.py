"""An attempt's NetworkPolicy by sandbox.networkPolicy, and Cilium's FQDN policy where Cilium enforces
host names (pure)."""

from __future__ import annotations

from typing import Any

from harness_operator.api.v1alpha1 import (
    EgressRule,
    HarnessRun,
    NetworkPolicyMode,
)
from harness_operator.core.config import OperatorConfig
from harness_operator.core.egress import (
    ROUTE_CILIUM,
    ROUTE_GATEWAY,
    build_cilium_policy,
    build_gateway_egress_rule,
    compute_egress_rules,
    compute_route,
)
from harness_operator.core.model_route import build_gateway_peer_rule, compute_model_route
from harness_operator.core.naming import (
    LABEL_ATTEMPT,
    attempt_labels,
    network_policy_name,
    run_labels,
)
from harness_operator.core.ownership import build_child_meta
from harness_operator.core.resolution import AttemptTarget

# Egress to a named host cannot be expressed in a NetworkPolicy; it is allowed on the host's ports to
# public addresses only, so a sandbox can never reach the cluster, the node or a metadata service.
PRIVATE_RANGES = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "127.0.0.0/8",
]


def build_dns_rule(config: OperatorConfig) -> dict[str, Any]:
    return {
        "to": [
            {
                "namespaceSelector": {"matchLabels": dict(config.dns_namespace_labels)},
                "podSelector": {"matchLabels": dict(config.dns_pod_labels)},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def build_egress_rule(rule: EgressRule) -> dict[str, Any]:
    """One declared destination as a NetworkPolicy egress rule."""
    block = {"cidr": rule.cidr} if rule.cidr else {"cidr": "0.0.0.0/0", "except": PRIVATE_RANGES}
    out: dict[str, Any] = {"to": [{"ipBlock": block}]}
    if rule.ports:
        out["ports"] = [{"protocol": "TCP", "port": port} for port in rule.ports]
    return out


def build_network_policy(run: HarnessRun, target: AttemptTarget, config: OperatorConfig) -> dict[str, Any]:
    """One attempt's policy: ingress denied; egress by sandbox.networkPolicy with that provider's egress."""
    name = run.metadata["name"]
    sandbox = run.spec.sandbox
    mode = sandbox.network_policy if sandbox else NetworkPolicyMode.provider
    if mode == NetworkPolicyMode.none:
        egress: list[dict[str, Any]] = []
    elif mode == NetworkPolicyMode.unrestricted:
        egress = [{}]
    else:
        rules = compute_egress_rules(run, target.definition)
        route = compute_route(run, target.definition, config)
        if route in (ROUTE_GATEWAY, ROUTE_CILIUM):  # names are enforced there, not by address here
            rules = [r for r in rules if not r.host]
        egress = [build_dns_rule(config), *(build_egress_rule(r) for r in rules)]
        if route == ROUTE_GATEWAY:
            egress.insert(1, build_gateway_egress_rule(config))
        if compute_model_route(run, target.definition, config) is not None:
            egress.insert(1, build_gateway_peer_rule(config))
    selector = {**run_labels(name), LABEL_ATTEMPT: str(target.index)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": build_child_meta(
            run, network_policy_name(name, target.index), attempt_labels(name, target.index, target.provider)
        ),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


def build_fqdn_policy(
    run: HarnessRun, target: AttemptTarget, config: OperatorConfig
) -> dict[str, Any] | None:
    """Without an egress gateway, on Cilium: the attempt's host rules as a CiliumNetworkPolicy."""
    name = run.metadata["name"]
    meta = build_child_meta(
        run, network_policy_name(name, target.index), attempt_labels(name, target.index, target.provider)
    )
    return build_cilium_policy(run, target, config, meta)
