"""An attempt's NetworkPolicy by sandbox.networkPolicy, and Cilium's FQDN policy where Cilium enforces
host names (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_operator.api.v1alpha1 import (
    EgressRule,
    HarnessRun,
    NetworkPolicyMode,
)
from harness_operator.core.access.egress import ROUTE_CILIUM, ROUTE_GATEWAY
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import (
    LABEL_ATTEMPT,
    attempt_labels,
    network_policy_name,
    run_labels,
)
from harness_operator.core.objects.ownership import build_child_meta
from harness_operator.core.pod.egress_grant import has_git_credential

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


def build_network_policy(run: HarnessRun, attempt: Attempt, config: OperatorConfig) -> dict[str, Any]:
    """One attempt's policy: ingress denied; egress by sandbox.networkPolicy with that provider's egress."""
    name = run.metadata["name"]
    sandbox = run.spec.sandbox
    mode = sandbox.network_policy if sandbox else NetworkPolicyMode.provider
    if mode == NetworkPolicyMode.none:
        egress: list[dict[str, Any]] = []
    elif mode == NetworkPolicyMode.unrestricted:
        egress = [{}]
    else:
        rules, route = attempt.egress, attempt.route
        if route in (ROUTE_GATEWAY, ROUTE_CILIUM):  # names are enforced there, not by address here
            rules = [r for r in rules if not r.host]
        egress = [build_dns_rule(config), *(build_egress_rule(r) for r in rules)]
        if route == ROUTE_GATEWAY or has_git_credential(run, attempt, config):
            # The clone and the publisher reach the run's git host and forge API through it, too.
            egress.insert(1, build_gateway_egress_rule(config))
        if attempt.model_route is not None:
            egress.insert(1, build_gateway_peer_rule(config))
    selector = {**run_labels(name), LABEL_ATTEMPT: str(attempt.index)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": build_child_meta(
            run,
            network_policy_name(name, attempt.index),
            attempt_labels(name, attempt.index, attempt.provider),
        ),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


def build_fqdn_policy(run: HarnessRun, attempt: Attempt, config: OperatorConfig) -> dict[str, Any] | None:
    """Without an egress gateway, on Cilium: the attempt's host rules as a CiliumNetworkPolicy."""
    name = run.metadata["name"]
    meta = build_child_meta(
        run, network_policy_name(name, attempt.index), attempt_labels(name, attempt.index, attempt.provider)
    )
    return build_cilium_policy(run, attempt, config, meta)


def build_gateway_egress_rule(config: OperatorConfig) -> dict[str, Any]:
    """NetworkPolicy egress to the gateway's pods, on its port only."""
    return build_peer_rule(
        config.egress_gateway_namespace, config.egress_gateway_pod_labels, config.egress_gateway_port
    )


def build_peer_rule(namespace: str, pod_labels: Mapping[str, str], port: int) -> dict[str, Any]:
    """NetworkPolicy egress to the pods with these labels in that namespace, on one TCP port."""
    return {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": dict(pod_labels)},
            }
        ],
        "ports": [{"protocol": "TCP", "port": port}],
    }


def build_cilium_policy(
    run: HarnessRun, attempt: Attempt, config: OperatorConfig, metadata: dict[str, Any]
) -> dict[str, Any] | None:
    """Without a gateway, on Cilium: the host rules as toFQDNs, with DNS through Cilium's DNS proxy
    (which is how it learns the names' addresses). Cilium adds it to the NetworkPolicy's allows."""
    if attempt.route != ROUTE_CILIUM:
        return None
    dns_namespace = config.dns_namespace_labels.get("kubernetes.io/metadata.name", "kube-system")
    dns_peer = {
        "matchLabels": {
            "k8s:io.kubernetes.pod.namespace": dns_namespace,
            **{f"k8s:{k}": v for k, v in config.dns_pod_labels.items()},
        }
    }
    egress: list[dict[str, Any]] = [
        {
            "toEndpoints": [dns_peer],
            "toPorts": [
                {"ports": [{"port": "53", "protocol": "ANY"}], "rules": {"dns": [{"matchPattern": "*"}]}}
            ],
        }
    ]
    for rule in attempt.egress:
        if not rule.host:
            continue
        entry: dict[str, Any] = {"toFQDNs": [{"matchName": rule.host.lower().rstrip(".")}]}
        if rule.ports:
            entry["toPorts"] = [{"ports": [{"port": str(p), "protocol": "TCP"} for p in rule.ports]}]
        egress.append(entry)
    selector = {**run_labels(run.metadata["name"]), LABEL_ATTEMPT: str(attempt.index)}
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": metadata,
        "spec": {"endpointSelector": {"matchLabels": selector}, "egress": egress},
    }


def build_gateway_peer_rule(config: OperatorConfig) -> dict[str, Any]:
    """NetworkPolicy egress to the model gateway's pods, on its vendors' port only."""
    return build_peer_rule(
        config.model_gateway_namespace, config.model_gateway_pod_labels, config.model_gateway_port
    )
