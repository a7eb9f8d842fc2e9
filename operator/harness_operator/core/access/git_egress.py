"""How the clone and the publisher reach the run's own destinations (its git host, its forge's API): through
the egress gateway on a credential only they hold, directly where the attempt's rules open the address,
or not at all, which refuses the run; and what `validate` says of it (pure).

The NetworkPolicy is the pod's, so a host cannot be opened for one container by address: only the gateway
can, by proxy user. Without a gateway the run's own egress must open them, for the agent too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from harness_operator.api.v1alpha1 import EgressRule, HarnessDefinitionSpec, HarnessRun, NetworkPolicyMode
from harness_operator.core.access.egress import ROUTE_CILIUM, ROUTE_PUBLIC, compute_egress_rules
from harness_operator.core.access.forge_address import (
    PULL_REQUEST_FIELD,
    GitDestination,
    compute_git_destinations,
    describe_pull_request,
)
from harness_operator.core.access.mcp import compute_mcp_servers
from harness_operator.core.config import OperatorConfig

RESTRICTED = (NetworkPolicyMode.provider, NetworkPolicyMode.allowlist)
GATEWAY_FIX = (
    "or deploy the egress gateway (the chart's egressGateway.enabled: true), which opens it for the clone "
    "and the publisher only"
)


def network_mode(run: HarnessRun) -> NetworkPolicyMode:
    sandbox = run.spec.sandbox
    return sandbox.network_policy if sandbox else NetworkPolicyMode.provider


def is_opened_by_address(rules: Sequence[EgressRule], host: str, port: int) -> bool:
    """A CIDR rule holds `host` (an address, not a name) on `port`: the policy lets it through directly."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(
        rule.cidr and address in ipaddress.ip_network(rule.cidr, strict=False) and _port_ok(rule, port)
        for rule in rules
    )


def compute_git_grants(run: HarnessRun, rules: Sequence[EgressRule], config: OperatorConfig) -> list[str]:
    """host:ports the attempt's git credential opens at the gateway: the http(s) destinations its rules do
    not open by address. None without a gateway, or when the mode restricts nothing to open (`none` lets
    nothing out, `unrestricted` everything)."""
    if not config.egress_gateway_service or network_mode(run) not in RESTRICTED:
        return []
    return sorted(
        {
            d.address
            for d in compute_git_destinations(run)
            if d.proxied and not is_opened_by_address(rules, d.host, d.port)
        }
    )


def compute_git_no_proxy(run: HarnessRun, rules: Sequence[EgressRule]) -> list[str]:
    """The destinations' hosts the attempt's rules open by address: reached directly, never proxied
    (Python's urllib reads no CIDR in NO_PROXY, so the address itself is listed)."""
    return sorted(
        {d.host for d in compute_git_destinations(run) if is_opened_by_address(rules, d.host, d.port)}
    )


def find_git_egress_problem(
    run: HarnessRun, rules: Sequence[EgressRule], route: str, config: OperatorConfig
) -> str | None:
    """Why the clone or the publisher of an attempt with `rules` (enforced by `route`) cannot reach one of
    the run's destinations, with the rule that fixes it; None when each is reachable. Under `none` the
    run asked for no network at all, and under `unrestricted` everything is open: both are left alone."""
    if network_mode(run) not in RESTRICTED:
        return None
    granted = set(compute_git_grants(run, rules, config))
    for dest in compute_git_destinations(run):
        if dest.address in granted or _is_opened(rules, route, dest):
            continue
        if dest.proxied:
            return (
                f"{dest.field}: {_who(run)} must reach {dest.address} ({dest.url}), which "
                f"the attempt's egress does not open: add {_host_rule(dest)} to spec.sandbox.egress "
                f"(networkPolicy: allowlist) or to the definition's egress, {GATEWAY_FIX}"
            )
        return (
            f"{dest.field}: {dest.url} is reached over {dest.scheme} ({dest.address}), which no HTTP proxy "
            "carries, so the egress gateway cannot open it and the attempt's egress does not: "
            f"{_direct_fix(dest, bool(config.egress_gateway_service))}, or use the repository's https URL"
        )
    return None


# What validate says: (field, message, whether it is a warning rather than a note).
Said = tuple[str, str, bool]


def describe_git_egress(run: HarnessRun, rules_by_provider: Sequence[Sequence[EgressRule]]) -> list[Said]:
    """What `validate` says of the clone's and the publisher's way out, offline (it cannot know whether
    the cluster has an egress gateway): one sentence per destination; `rules_by_provider` is each
    attempt's declared egress (at least one)."""
    if not rules_by_provider:
        return []
    mode = network_mode(run)
    said = []
    seen = set()
    for dest in compute_git_destinations(run):
        if dest.address in seen:  # the forge's API on the git host: said once
            continue
        seen.add(dest.address)
        where = f"{_who(run)} {'reach' if _publishes(run) else 'reaches'} {dest.address}"
        if mode == NetworkPolicyMode.unrestricted:
            said.append((dest.field, f"{where} directly (networkPolicy unrestricted)", False))
        elif mode == NetworkPolicyMode.none:
            why = "networkPolicy none lets nothing out; use provider or allowlist"
            said.append((dest.field, f"{where} not at all: {why}", True))
        elif all(is_opened_by_address(rules, dest.host, dest.port) for rules in rules_by_provider):
            said.append((dest.field, f"{where} directly (a cidr rule opens it)", False))
        elif dest.proxied:
            message = (
                f"{where} through the egress gateway, which opens it for no other container; without a "
                "gateway the "
                f"operator refuses the run unless its egress opens it ({_host_rule(dest)} in "
                "spec.sandbox.egress, networkPolicy: allowlist)"
            )
            said.append((dest.field, message, False))
        elif all(_is_opened(rules, "", dest) for rules in rules_by_provider):
            said.append((dest.field, f"{where} directly over {dest.scheme} (a cidr rule opens it)", False))
        else:
            message = (
                f"{where} over {dest.scheme}, which the egress gateway (an HTTP proxy) cannot carry: the "
                f"operator refuses the run unless its egress opens it: add {_cidr_rule(dest)} to "
                f"spec.sandbox.egress (networkPolicy: allowlist; without a gateway {_host_rule(dest)} also "
                "does), or use the repository's https URL"
            )
            said.append((dest.field, message, True))
    return said


def describe_publish(run: HarnessRun, definitions: Sequence[HarnessDefinitionSpec]) -> list[Said]:
    """Everything `validate` says of a run's repository: where its pull request goes, and the way out of
    the clone and the publisher with the declared egress of each provider's `definitions`."""
    pull_request = describe_pull_request(run)
    said: list[Said] = [(PULL_REQUEST_FIELD, pull_request, False)] if pull_request else []
    rules = [compute_egress_rules(run, d, compute_mcp_servers(run, d)) for d in definitions]
    return said + describe_git_egress(run, rules)


def _is_opened(rules: Sequence[EgressRule], route: str, dest: GitDestination) -> bool:
    """The attempt's own rules open the destination: a CIDR rule holding its address, a CIDR rule on its
    port when it is a name (the policy cannot tell: it is let through), or, where the policy enforces host
    rules by address or FQDN (no gateway), a host rule naming it."""
    for rule in rules:
        if not _port_ok(rule, dest.port):
            continue
        if rule.cidr:
            try:
                address = ipaddress.ip_address(dest.host)
            except ValueError:
                return True
            if address in ipaddress.ip_network(rule.cidr, strict=False):
                return True
        elif route in (ROUTE_PUBLIC, ROUTE_CILIUM) and (rule.host or "").lower().rstrip(".") == dest.host:
            return True
    return False


def _publishes(run: HarnessRun) -> bool:
    return run.spec.workspace is not None and run.spec.workspace.publish is not None


def _who(run: HarnessRun) -> str:
    return "the clone and the publisher" if _publishes(run) else "the clone"


def _port_ok(rule: EgressRule, port: int) -> bool:
    return not rule.ports or port in rule.ports


def _host_rule(dest: GitDestination) -> str:
    return f"{{host: {dest.host}, ports: [{dest.port}]}}"


def _cidr_rule(dest: GitDestination) -> str:
    try:
        address = ipaddress.ip_address(dest.host)
    except ValueError:
        return f"{{cidr: <{dest.host}'s address>/32, ports: [{dest.port}]}}"
    return f"{{cidr: {address}/{address.max_prefixlen}, ports: [{dest.port}]}}"


def _direct_fix(dest: GitDestination, gateway: bool) -> str:
    """The rule that opens an ssh or git:// remote: a CIDR rule through a gateway, else a host rule too."""
    cidr = f"add {_cidr_rule(dest)} to spec.sandbox.egress (networkPolicy: allowlist)"
    return cidr if gateway else f"{cidr} or {_host_rule(dest)}"
