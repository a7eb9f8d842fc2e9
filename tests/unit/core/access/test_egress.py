"""Host-name egress: routes, the gateway's grant and credential, the sandbox's proxy env and policy,
Cilium's FQDN policy; golden YAML where an object is built."""

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.unit.core.pod.test_job import golden

from harness_operator.api.v1alpha1 import EgressRule, HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.plan import load_plan
from harness_operator.core.access.egress import ROUTE_CILIUM, ROUTE_GATEWAY, ROUTE_NONE, ROUTE_PUBLIC
from harness_operator.core.attempt import decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.pod.egress_grant import (
    PROXY_URL_ENVS,
    build_egress_grant,
    build_proxy_token,
    build_proxy_urls,
    compute_host_grants,
    grant_name,
    proxy_user,
)
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.network_policy import build_fqdn_policy, build_network_policy
from harness_operator.core.pod.run_data import build_plan_secret
from harness_operator.core.resolve.resolution import AttemptTarget

GATEWAY = OperatorConfig(
    egress_gateway_service="harness-operator-egress.harness-system.svc",
    egress_gateway_namespace="harness-system",
    egress_gateway_key="k3y",
)
CILIUM = OperatorConfig(fqdn_policy="cilium")
NOW = datetime(2026, 12, 1, tzinfo=UTC)
PLAIN = OperatorConfig(fqdn_policy="none")
DEFINITION = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "credentials": [
            {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "anthropic", "key": "api-key"}}
        ],
        "egress": [{"host": "api.anthropic.com", "ports": [443]}, {"cidr": "10.20.0.0/16", "ports": [8443]}],
    }
)
CIDR_ONLY = HarnessDefinitionSpec.model_validate(
    {"binary": "codex", "egress": [{"cidr": "10.20.0.0/16", "ports": [8443]}]}
)


def make_run(sandbox: dict[str, Any] | None = None, **spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1"},
            "spec": {"provider": "claude", "prompt": "Review.", "sandbox": sandbox or {}, **spec},
        }
    )


def target(index: int = 1, definition: HarnessDefinitionSpec = DEFINITION) -> AttemptTarget:
    return AttemptTarget(index=index, provider="claude", definition=definition, position=1)


ALLOW_HOST = {"networkPolicy": "allowlist", "egress": [{"host": "Git.Example.Internal.", "ports": [443, 22]}]}
ROUTES = [
    # (sandbox, definition, config, route)
    ({}, DEFINITION, GATEWAY, ROUTE_GATEWAY),
    ({}, DEFINITION, CILIUM, ROUTE_CILIUM),
    ({}, DEFINITION, PLAIN, ROUTE_PUBLIC),
    ({}, DEFINITION, OperatorConfig(), ROUTE_PUBLIC),  # auto, before detection: not Cilium
    ({}, CIDR_ONLY, GATEWAY, ROUTE_NONE),
    (ALLOW_HOST, CIDR_ONLY, GATEWAY, ROUTE_GATEWAY),  # allowlist: the run's rules, not the definition's
    ({"networkPolicy": "allowlist", "egress": []}, DEFINITION, GATEWAY, ROUTE_NONE),
    ({"networkPolicy": "none"}, DEFINITION, GATEWAY, ROUTE_NONE),
    ({"networkPolicy": "unrestricted"}, DEFINITION, GATEWAY, ROUTE_NONE),
]


@pytest.mark.parametrize(("sandbox", "definition", "config", "route"), ROUTES)
def test_route_follows_mode_rules_and_config(
    sandbox: dict[str, Any], definition: HarnessDefinitionSpec, config: OperatorConfig, route: str
) -> None:
    assert decide_attempt(make_run(sandbox), target(1, definition), config).route == route


@pytest.mark.parametrize(
    ("rules", "grants"),
    [
        ([{"host": "api.anthropic.com", "ports": [443]}], ["api.anthropic.com:443"]),
        ([{"host": "A.example.", "ports": [443, 80]}], ["a.example:443", "a.example:80"]),
        ([{"host": "any.example"}], ["any.example:*"]),
        ([{"cidr": "10.0.0.0/8", "ports": [443]}], []),
        ([{"host": "x.example", "ports": [1]}, {"host": "x.example", "ports": [1]}], ["x.example:1"]),
    ],
)
def test_host_grants(rules: list[dict[str, Any]], grants: list[str]) -> None:
    assert compute_host_grants([EgressRule.model_validate(r) for r in rules]) == grants


def test_token_is_stable_per_run_uid_and_attempt_and_keyed() -> None:
    token = build_proxy_token("k3y", "uid-1", 1)
    assert token == build_proxy_token("k3y", "uid-1", 1)  # a restarted operator derives the same
    assert len({token, build_proxy_token("k3y", "uid-2", 1), build_proxy_token("k3y", "uid-1", 2)}) == 3
    assert token != build_proxy_token("other", "uid-1", 1)


def test_grant_names_are_distinct_and_fit_squids_user_name() -> None:
    assert grant_name("team-a", "review") == "team-a.review"
    long = grant_name("team-a", "r" * 253)
    assert len(long) <= 100 and long != grant_name("team-a", "r" * 252)
    assert len(proxy_user(make_run(), 12)) < 128


def test_grant_golden_and_holds_only_the_token_hash() -> None:
    run = make_run()
    grant = build_egress_grant(run, decide_attempts(run, [target(1), target(2, CIDR_ONLY)], GATEWAY), GATEWAY)
    golden("egress-grant", grant)
    assert grant is not None
    data = json.loads(grant["data"]["grant.json"])
    token = build_proxy_token("k3y", "uid-1", 1)
    assert token not in grant["data"]["grant.json"]
    assert data["attempts"] == {
        "1": {"tokenSha256": hashlib.sha256(token.encode()).hexdigest(), "hosts": ["api.anthropic.com:443"]}
    }
    assert grant["metadata"]["namespace"] == "harness-system"
    assert "ownerReferences" not in grant["metadata"]  # none can cross namespaces


def test_no_grant_and_no_proxy_without_the_gateway() -> None:
    for config in (CILIUM, PLAIN):
        assert build_egress_grant(make_run(), decide_attempts(make_run(), [target()], config), config) is None
        assert build_proxy_urls(make_run(), decide_attempts(make_run(), [target()], config), config) == {}
    assert (
        build_egress_grant(make_run(), decide_attempts(make_run(), [target(1, CIDR_ONLY)], GATEWAY), GATEWAY)
        is None
    )


def test_proxy_url_carries_the_attempts_credential_and_goes_only_in_the_plan_secret() -> None:
    run = make_run()
    urls = build_proxy_urls(run, decide_attempts(run, [target(1), target(2, CIDR_ONLY)], GATEWAY), GATEWAY)
    token = build_proxy_token("k3y", "uid-1", 1)
    assert urls == {
        "proxy-url-1": f"http://team-a.review.1:{token}@harness-operator-egress.harness-system.svc:3128"
    }
    secret = build_plan_secret(run, [{"attempt": 1}, {"attempt": 2}], urls)
    assert secret["stringData"]["proxy-url-1"] == urls["proxy-url-1"]
    job = build_job(run, decide_attempt(run, target(1), GATEWAY), GATEWAY)
    assert token not in json.dumps(job)  # the pod spec names the Secret key, never the value
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    for name in PROXY_URL_ENVS:
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "review-plan", "key": "proxy-url-1"}


def test_a_runs_own_proxy_grant_cannot_replace_the_gateways() -> None:
    run = make_run(credentials=[{"env": "HTTPS_PROXY", "secretKeyRef": {"name": "mine", "key": "url"}}])
    env = build_job(run, decide_attempt(run, target(), GATEWAY), GATEWAY)["spec"]["template"]["spec"][
        "containers"
    ][0]["env"]
    https = [e for e in env if e["name"] == "HTTPS_PROXY"]
    assert https == [
        {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "review-plan", "key": "proxy-url-1"}}}
    ]
    plan = load_plan(
        json.dumps(
            build_plans(run, decide_attempts(run, [target()], GATEWAY), "Review.", None, NOW, GATEWAY)[0]
        )
    )
    assert set(PROXY_URL_ENVS) <= set(plan.credential_envs)  # passed to the agent, and redacted
    assert not set(PROXY_URL_ENVS) & set(plan.optional_credential_envs)


def test_plan_through_the_gateway_sets_no_proxy_and_nodes_switch() -> None:
    run = make_run(env=[{"name": "NO_PROXY", "value": "*"}])
    plan = load_plan(
        json.dumps(
            build_plans(run, decide_attempts(run, [target()], GATEWAY), "Review.", None, NOW, GATEWAY)[0]
        )
    )
    env = {e.name: e.value for e in plan.env}
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1,10.20.0.0/16"
    assert env["NODE_USE_ENV_PROXY"] == "1"
    direct = load_plan(
        json.dumps(build_plans(run, decide_attempts(run, [target()], PLAIN), "Review.", None, NOW, PLAIN)[0])
    )
    assert {e.name: e.value for e in direct.env}["NO_PROXY"] == "*"
    assert "HTTPS_PROXY" not in direct.credential_envs


def test_network_policy_through_the_gateway_golden() -> None:
    """DNS, the gateway's pods on its port, and the CIDR rules: no public address on the host's port."""
    policy = build_network_policy(make_run(), decide_attempt(make_run(), target(), GATEWAY), GATEWAY)
    golden("networkpolicy-gateway", policy)
    assert "0.0.0.0/0" not in json.dumps(policy)


def test_network_policy_on_cilium_leaves_host_rules_to_the_fqdn_policy() -> None:
    policy = build_network_policy(make_run(), decide_attempt(make_run(), target(), CILIUM), CILIUM)
    assert "0.0.0.0/0" not in json.dumps(policy)
    golden(
        "ciliumnetworkpolicy",
        build_fqdn_policy(make_run(), decide_attempt(make_run(), target(), CILIUM), CILIUM),
    )


def test_without_gateway_or_cilium_the_host_rule_stays_public_only() -> None:
    policy = build_network_policy(make_run(), decide_attempt(make_run(), target(), PLAIN), PLAIN)
    assert policy == build_network_policy(
        make_run(), decide_attempt(make_run(), target(), OperatorConfig()), OperatorConfig()
    )
    assert "0.0.0.0/0" in json.dumps(policy)
    assert build_fqdn_policy(make_run(), decide_attempt(make_run(), target(), PLAIN), PLAIN) is None
    assert build_fqdn_policy(make_run(), decide_attempt(make_run(), target(), GATEWAY), GATEWAY) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HARNESS_EGRESS_GATEWAY_SERVICE": "gw"}, "HARNESS_EGRESS_GATEWAY_KEY"),
        ({"HARNESS_FQDN_POLICY": "calico"}, "HARNESS_FQDN_POLICY"),
    ],
)
def test_config_refuses_an_incomplete_gateway(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OperatorConfig.from_env(env)


def test_config_reads_the_gateway_from_env() -> None:
    config = OperatorConfig.from_env(
        {
            "HARNESS_EGRESS_GATEWAY_SERVICE": "gw.ns.svc",
            "HARNESS_EGRESS_GATEWAY_NAMESPACE": "ns",
            "HARNESS_EGRESS_GATEWAY_KEY": "k3y-value",
            "HARNESS_EGRESS_GATEWAY_POD_LABELS": "app=gw",
            "HARNESS_EGRESS_GATEWAY_PORT": "3129",
        }
    )
    assert (config.egress_gateway_port, config.egress_gateway_pod_labels) == (3129, {"app": "gw"})
    assert "k3y-value" not in repr(config)


def test_the_git_clone_goes_through_the_gateway_with_the_git_credential() -> None:
    run = make_run(workspace={"git": {"url": "https://git.example.internal/a.git"}})
    init = build_job(run, decide_attempt(run, target(), GATEWAY), GATEWAY)["spec"]["template"]["spec"][
        "initContainers"
    ][0]
    env = {e["name"]: e for e in init["env"]}
    assert env["https_proxy"]["valueFrom"]["secretKeyRef"] == {
        "name": "review-plan",
        "key": "proxy-url-1-git",
    }
    assert env["NO_PROXY"]["value"] == "localhost,127.0.0.1,::1,10.20.0.0/16"
    direct = build_job(run, decide_attempt(run, target(), PLAIN), PLAIN)["spec"]["template"]["spec"][
        "initContainers"
    ][0]
    assert not {e["name"] for e in direct["env"]} & {*PROXY_URL_ENVS, "NO_PROXY"}
