"""Whether an attempt waits for its network policy before its agent starts, and on which address (pure).

Enforcers (kube-router, and plain NetworkPolicy engines generally) program a pod's rules once they see
its IP, after the pod has started; an agent that connects at once gets out first. So the runner probes
an address the attempt's policy denies, the API server, and starts the agent only once it is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from harness_operator.api.v1alpha1 import EgressRule, HarnessRun, NetworkPolicyMode
from harness_operator.contract.plan import ConfinementProbe
from harness_operator.core.access.egress import ROUTE_PUBLIC
from harness_operator.core.config import AWAIT_OFF, AWAIT_REQUIRE, OperatorConfig, split_address


def find_api_server_address(env: Mapping[str, str], kubeconfig_host: str) -> str:
    """host:port of the API server as a sandbox pod reaches it: the in-cluster Service when the operator
    runs in a pod, else the server its kubeconfig names (an operator run as a process)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if host and port:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    parts = urlsplit(kubeconfig_host)
    if not parts.hostname:
        return ""
    if parts.hostname == "localhost" or _is_loopback(parts.hostname):
        # A pod's loopback is its own: a probe there is refused at once, confined or not.
        raise ValueError(
            f"the kubeconfig names the API server at {parts.hostname}, a loopback address sandbox pods "
            "cannot reach, so it cannot show their network policy is enforced: set "
            "HARNESS_API_SERVER_ADDRESS to host:port as pods reach it (the `kubernetes` Service's, "
            "e.g. 10.96.0.1:443), or HARNESS_AWAIT_NETWORK_POLICY=off"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_opened_by(rule: EgressRule, route: str, host: str, port: int) -> bool:
    """Whether `rule` lets the attempt reach host:port (so a refusal there cannot prove confinement)."""
    if rule.ports and port not in rule.ports:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True  # a name: the policy sees only addresses, so nothing here proves it denied
    if rule.cidr:
        return address in ipaddress.ip_network(rule.cidr, strict=False)
    # A host rule without gateway or Cilium opens its ports to every public address.
    return route == ROUTE_PUBLIC and address.is_global


def compute_confinement(
    run: HarnessRun, rules: Sequence[EgressRule], route: str, config: OperatorConfig
) -> ConfinementProbe | None:
    """The probe for this attempt, or None: waiting is off, the mode allows everything, or one of its
    rules opens the API server's address (then no refusal will ever come)."""
    if config.await_network_policy == AWAIT_OFF or not config.api_server_address:
        return None
    sandbox = run.spec.sandbox
    if sandbox is not None and sandbox.network_policy == NetworkPolicyMode.unrestricted:
        return None
    host, port = split_address(config.api_server_address)
    if any(is_opened_by(rule, route, host, port) for rule in rules):
        return None
    return ConfinementProbe(
        host=host,
        port=port,
        timeout_seconds=config.await_network_policy_seconds,
        required=config.await_network_policy == AWAIT_REQUIRE,
    )
