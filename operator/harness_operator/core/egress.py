"""Egress by host name: the gateway's per-run grant and credential, the sandbox's proxy environment, and
Cilium's FQDN policy where there is no gateway (pure).

A run whose effective egress names a host reaches it only through the egress gateway the chart deploys
(Squid, `gateway/`): its attempt gets a proxy credential derived from the operator's key and the run's
UID, the gateway learns which host:ports that credential opens from a grant ConfigMap in its own
namespace, and the attempt's NetworkPolicy allows DNS, the gateway and the CIDR rules only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness_operator.api.v1alpha1 import (
    GROUP,
    EgressRule,
    EnvVar,
    HarnessDefinitionSpec,
    HarnessRun,
    NetworkPolicyMode,
)
from harness_operator.contract.plan import AttemptPlan
from harness_operator.core.config import FQDN_CILIUM, OperatorConfig
from harness_operator.core.mcp import compute_mcp_egress, compute_mcp_servers, find_mcp_destination_problem
from harness_operator.core.naming import LABEL_ATTEMPT, fit_name, label_value, run_labels

if TYPE_CHECKING:
    from harness_operator.core.resolution import AttemptTarget

# Every spelling the agent CLIs read: curl reads only the lowercase http_proxy, Node and Go both.
PROXY_URL_ENVS = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
NO_PROXY_ENVS = ("NO_PROXY", "no_proxy")
# Node.js (22.21+, 24.5+) sends fetch() and http(s) through HTTPS_PROXY only with this set.
NODE_PROXY_ENV = "NODE_USE_ENV_PROXY"
LOOPBACK = ("localhost", "127.0.0.1", "::1")
LABEL_GRANT = f"{GROUP}/egress-grant"
LABEL_RUN_NAMESPACE = f"{GROUP}/run-namespace"
GRANT_KEY = "grant.json"
# Squid keeps at most 128 bytes of a user name; ours is the grant's name, a dot and the attempt.
MAX_GRANT_NAME = 100

# How `host:` rules of one attempt are enforced.
ROUTE_NONE = "none"  # no host rule, or a mode without rules (none, unrestricted)
ROUTE_GATEWAY = "gateway"  # through the egress gateway, by name
ROUTE_CILIUM = "cilium"  # a CiliumNetworkPolicy with toFQDNs
ROUTE_PUBLIC = "public"  # not by name: the host's ports to every public address (a Warning Event)


def compute_egress_rules(run: HarnessRun, definition: HarnessDefinitionSpec) -> list[EgressRule]:
    """The attempt's declared destinations: the definition's (provider) or the run's (allowlist), and its
    remote MCP servers'."""
    sandbox = run.spec.sandbox
    mode = sandbox.network_policy if sandbox else NetworkPolicyMode.provider
    mcp = compute_mcp_egress(compute_mcp_servers(run, definition))
    if mode == NetworkPolicyMode.provider:
        return [*definition.egress, *mcp]
    if mode == NetworkPolicyMode.allowlist:
        return [*(sandbox.egress if sandbox else []), *mcp]
    return []


def find_mcp_destinations_problem(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> str | None:
    """Why an attempt's remote MCP server may not be reached from this cluster (its URL would open that
    way out, under every mode: core/mcp.find_mcp_destination_problem, the platform's allowances from
    `config`); None when every one may. The operator refuses such a run before any attempt."""
    for target in targets:
        problem = find_mcp_destination_problem(
            run, target.provider, target.definition, config.mcp_allowed_cidrs, config.mcp_allowed_hosts
        )
        if problem is not None:
            return problem
    return None


def compute_route(run: HarnessRun, definition: HarnessDefinitionSpec, config: OperatorConfig) -> str:
    """How this attempt's host rules are enforced (ROUTE_*)."""
    if not any(rule.host for rule in compute_egress_rules(run, definition)):
        return ROUTE_NONE
    if config.egress_gateway_service:
        return ROUTE_GATEWAY
    return ROUTE_CILIUM if config.fqdn_policy == FQDN_CILIUM else ROUTE_PUBLIC


def compute_host_grants(rules: Sequence[EgressRule]) -> list[str]:
    """`host:port` for each host rule and port (`host:*` when the rule names no port), sorted, lowercase."""
    grants = {
        f"{rule.host.lower().rstrip('.')}:{port}"
        for rule in rules
        if rule.host
        for port in ([str(p) for p in rule.ports] or ["*"])
    }
    return sorted(grants)


def grant_name(namespace: str, run_name: str) -> str:
    """The grant ConfigMap in the gateway's namespace; also the proxy user name without the attempt."""
    return fit_name(f"{namespace}.{run_name}", "", MAX_GRANT_NAME)


def proxy_user(run: HarnessRun, attempt: int) -> str:
    return f"{grant_name(run.metadata['namespace'], run.metadata['name'])}.{attempt}"


def build_proxy_token(key: str, run_uid: str, attempt: int) -> str:
    """The attempt's proxy password: an HMAC of the run's UID, so a restarted operator derives the same
    one (the plan Secret is immutable) and a run recreated under the same name gets another."""
    return hmac.new(key.encode(), f"{run_uid}/{attempt}".encode(), hashlib.sha256).hexdigest()


def proxy_url_key(attempt: int) -> str:
    """The plan Secret's key holding the attempt's proxy URL (with its credential)."""
    return f"proxy-url-{attempt}"


def build_proxy_urls(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> dict[str, str]:
    """Plan Secret entries: the proxy URL of each attempt that goes through the gateway."""
    urls = {}
    for target in targets:
        if compute_route(run, target.definition, config) != ROUTE_GATEWAY:
            continue
        token = build_proxy_token(config.egress_gateway_key, run.metadata["uid"], target.index)
        address = f"{config.egress_gateway_service}:{config.egress_gateway_port}"
        urls[proxy_url_key(target.index)] = f"http://{proxy_user(run, target.index)}:{token}@{address}"
    return urls


def build_egress_grant(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> dict[str, Any] | None:
    """The gateway's grant for the run: per attempt, the hash of its proxy password and the host:ports
    it opens. In the gateway's namespace (no owner reference can cross namespaces): the operator deletes
    it when the run ends. None when no attempt goes through the gateway."""
    attempts = {}
    for target in targets:
        if compute_route(run, target.definition, config) != ROUTE_GATEWAY:
            continue
        token = build_proxy_token(config.egress_gateway_key, run.metadata["uid"], target.index)
        attempts[str(target.index)] = {
            "tokenSha256": hashlib.sha256(token.encode()).hexdigest(),
            "hosts": compute_host_grants(compute_egress_rules(run, target.definition)),
        }
    if not attempts:
        return None
    ns, name = run.metadata["namespace"], run.metadata["name"]
    grant = {"namespace": ns, "run": name, "uid": run.metadata["uid"], "attempts": attempts}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": grant_name(ns, name),
            "namespace": config.egress_gateway_namespace,
            "labels": {**run_labels(name), LABEL_GRANT: "true", LABEL_RUN_NAMESPACE: label_value(ns)},
        },
        "data": {GRANT_KEY: json.dumps(grant, sort_keys=True)},
    }


def build_no_proxy(rules: Sequence[EgressRule]) -> str:
    """Loopback and the CIDR destinations, which the policy lets the sandbox reach directly."""
    return ",".join([*LOOPBACK, *(rule.cidr for rule in rules if rule.cidr)])


def with_gateway(plan: AttemptPlan, rules: Sequence[EgressRule]) -> AttemptPlan:
    """The plan of an attempt that goes through the gateway: the proxy URLs are credentials (passed
    through and redacted by the runner), NO_PROXY and Node's switch plain env. A run's own grant or env
    of these names is dropped: ours win."""
    ours = {*PROXY_URL_ENVS, *NO_PROXY_ENVS, NODE_PROXY_ENV}
    no_proxy = build_no_proxy(rules)
    env = [e for e in plan.env if e.name not in ours]
    env += [EnvVar(name=n, value=no_proxy) for n in NO_PROXY_ENVS] + [EnvVar(name=NODE_PROXY_ENV, value="1")]
    return plan.model_copy(
        update={
            "env": sorted(env, key=lambda e: e.name),
            "credential_envs": sorted({*plan.credential_envs, *PROXY_URL_ENVS}),
            "optional_credential_envs": sorted(set(plan.optional_credential_envs) - set(PROXY_URL_ENVS)),
        }
    )


def build_proxy_env(secret_name: str, attempt: int) -> list[dict[str, Any]]:
    """The Job's proxy variables, each from the plan Secret: the credential never shows in the pod."""
    ref = {"name": secret_name, "key": proxy_url_key(attempt)}
    return [{"name": name, "valueFrom": {"secretKeyRef": dict(ref)}} for name in PROXY_URL_ENVS]


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
    run: HarnessRun, target: AttemptTarget, config: OperatorConfig, metadata: dict[str, Any]
) -> dict[str, Any] | None:
    """Without a gateway, on Cilium: the host rules as toFQDNs, with DNS through Cilium's DNS proxy
    (which is how it learns the names' addresses). Cilium adds it to the NetworkPolicy's allows."""
    if compute_route(run, target.definition, config) != ROUTE_CILIUM:
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
    for rule in compute_egress_rules(run, target.definition):
        if not rule.host:
            continue
        entry: dict[str, Any] = {"toFQDNs": [{"matchName": rule.host.lower().rstrip(".")}]}
        if rule.ports:
            entry["toPorts"] = [{"ports": [{"port": str(p), "protocol": "TCP"} for p in rule.ports]}]
        egress.append(entry)
    selector = {**run_labels(run.metadata["name"]), LABEL_ATTEMPT: str(target.index)}
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": metadata,
        "spec": {"endpointSelector": {"matchLabels": selector}, "egress": egress},
    }
