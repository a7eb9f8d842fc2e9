"""An attempt's way through the egress gateway: its grant in the gateway's namespace, its proxy credentials
and the sandbox's proxy environment (pure).

Its proxy credentials are derived from the operator's key and the run's UID; the gateway learns which
host:ports each opens from the run's grant ConfigMap in its own namespace. An attempt has two: the
sandbox's (its egress rules) and the git one (`<attempt>-git`), which opens only the run's own git host
and forge API and which only the clone and the publisher hold, so the agent never reaches the repository's
host by the run's say-so alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

from harness_operator.api.v1alpha1 import GROUP, EgressRule, EnvVar, HarnessRun
from harness_operator.contract.plan import AttemptPlan
from harness_operator.core.access.egress import ROUTE_GATEWAY
from harness_operator.core.access.git_egress import compute_git_grants
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import fit_name, label_value, run_labels

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
# The git credential's slot in the grant: `<attempt>-git` (gateway/rules.py reads the same shape).
GIT_SLOT_SUFFIX = "-git"
# The sandbox's proxy URL as the publisher holds it: not to use, only to refuse a change that holds it.
SANDBOX_PROXY_ENV = "HARNESS_SANDBOX_PROXY_URL"


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


def proxy_user(run: HarnessRun, slot: int | str) -> str:
    """The proxy user of one credential: the grant's name, a dot and its slot (attempt, or git_slot)."""
    return f"{grant_name(run.metadata['namespace'], run.metadata['name'])}.{slot}"


def git_slot(attempt: int) -> str:
    """The slot of the attempt's git credential (the clone's and the publisher's)."""
    return f"{attempt}{GIT_SLOT_SUFFIX}"


def build_proxy_token(key: str, run_uid: str, slot: int | str) -> str:
    """A proxy password: an HMAC of the run's UID and the slot, so a restarted operator derives the same
    one (the plan Secret is immutable) and a run recreated under the same name gets another."""
    return hmac.new(key.encode(), f"{run_uid}/{slot}".encode(), hashlib.sha256).hexdigest()


def proxy_url_key(slot: int | str) -> str:
    """The plan Secret's key holding one credential's proxy URL."""
    return f"proxy-url-{slot}"


def has_git_credential(run: HarnessRun, attempt: Attempt, config: OperatorConfig) -> bool:
    """Whether the attempt's clone and publisher reach one of the run's git destinations through the
    gateway on the git credential (git_egress.compute_git_grants)."""
    return bool(compute_git_grants(run, attempt.egress, config))


def _slots(run: HarnessRun, attempt: Attempt, config: OperatorConfig) -> list[tuple[str, list[str]]]:
    """(slot, host:ports granted) of each credential the attempt has at the gateway."""
    slots = []
    if attempt.route == ROUTE_GATEWAY:
        slots.append((str(attempt.index), compute_host_grants(attempt.egress)))
    git = compute_git_grants(run, attempt.egress, config)
    if git:
        slots.append((git_slot(attempt.index), git))
    return slots


def build_proxy_urls(run: HarnessRun, attempts: Sequence[Attempt], config: OperatorConfig) -> dict[str, str]:
    """Plan Secret entries: the proxy URL of each credential an attempt has at the gateway."""
    urls = {}
    address = f"{config.egress_gateway_service}:{config.egress_gateway_port}"
    for target in attempts:
        for slot, _ in _slots(run, target, config):
            token = build_proxy_token(config.egress_gateway_key, run.metadata["uid"], slot)
            urls[proxy_url_key(slot)] = f"http://{proxy_user(run, slot)}:{token}@{address}"
    return urls


def build_egress_grant(
    run: HarnessRun, attempts: Sequence[Attempt], config: OperatorConfig
) -> dict[str, Any] | None:
    """The gateway's grant for the run: per credential (slot), the hash of its proxy password and the
    host:ports it opens. In the gateway's namespace (no owner reference can cross namespaces): the
    operator deletes it when the run ends. None when no attempt goes through the gateway."""
    granted = {}
    for attempt in attempts:
        for slot, hosts in _slots(run, attempt, config):
            token = build_proxy_token(config.egress_gateway_key, run.metadata["uid"], slot)
            granted[slot] = {"tokenSha256": hashlib.sha256(token.encode()).hexdigest(), "hosts": hosts}
    if not granted:
        return None
    ns, name = run.metadata["namespace"], run.metadata["name"]
    grant = {"namespace": ns, "run": name, "uid": run.metadata["uid"], "attempts": granted}
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


def build_proxy_env(secret_name: str, slot: int | str) -> list[dict[str, Any]]:
    """The Job's proxy variables, each from the plan Secret: the credential never shows in the pod."""
    ref = {"name": secret_name, "key": proxy_url_key(slot)}
    return [{"name": name, "valueFrom": {"secretKeyRef": dict(ref)}} for name in PROXY_URL_ENVS]
