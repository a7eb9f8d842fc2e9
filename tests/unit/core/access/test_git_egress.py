"""The run's own destinations (git host, forge API): through the gateway on a credential only the clone and
the publisher hold, directly where a CIDR rule opens them, or refused with the rule that fixes it; and the
gateway's decisions on the grant the operator builds."""

import json
from typing import Any

import pytest
from tests.unit.core.access.test_egress import CIDR_ONLY, CILIUM, DEFINITION, GATEWAY, PLAIN, make_run, target

from harness_operator.api.v1alpha1 import EgressRule, HarnessDefinitionSpec, HarnessRun
from harness_operator.core.access.egress import ROUTE_NONE
from harness_operator.core.access.git_egress import (
    compute_git_grants,
    describe_git_egress,
    describe_publish,
    find_git_egress_problem,
)
from harness_operator.core.attempt import decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.egress_grant import (
    PROXY_URL_ENVS,
    SANDBOX_PROXY_ENV,
    build_egress_grant,
    build_proxy_token,
    build_proxy_urls,
)
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.network_policy import build_network_policy
from harness_operator.core.pod.publish import check_git_egress
from harness_operator.core.resolve.resolution import Rejection
from harness_operator.gateway.helper import answer
from harness_operator.gateway.rules import is_authentic, is_granted, parse_grant

GIT = "https://git.example.com/git/acme/payments.git"
GITEA = {"forge": "gitea"}
NO_EGRESS = HarnessDefinitionSpec.model_validate({"binary": "claude"})


def publishing(
    url: str = GIT, sandbox: dict[str, Any] | None = None, pr: dict[str, Any] | None = None
) -> HarnessRun:
    """The README's publish example: an ordinary git URL, a pull request, no hand-written egress."""
    workspace = {"git": {"url": url, "ref": "main"}, "publish": {"pullRequest": pr or GITEA}}
    return make_run(sandbox, workspace=workspace)


def pod(run: HarnessRun, definition: HarnessDefinitionSpec, config: OperatorConfig) -> dict[str, Any]:
    return build_job(run, decide_attempt(run, target(1, definition), config), config)["spec"]["template"][
        "spec"
    ]


def refs(container: dict[str, Any]) -> dict[str, str]:
    """Each variable from a Secret: name -> key."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}


def gateway_view(run: HarnessRun, definition: HarnessDefinitionSpec) -> dict[str, Any]:
    grant = build_egress_grant(run, decide_attempts(run, [target(1, definition)], GATEWAY), GATEWAY)
    assert grant is not None
    return {grant["metadata"]["name"]: parse_grant(grant["data"]["grant.json"])}


def test_no_hand_written_egress_the_git_credential_opens_the_git_host_and_api_only() -> None:
    run = publishing()
    attempt = decide_attempt(run, target(1, NO_EGRESS), GATEWAY)
    assert attempt.route == ROUTE_NONE  # the agent has no host rule: before, nothing went via the gateway
    data = json.loads(build_egress_grant(run, [attempt], GATEWAY)["data"]["grant.json"])  # type: ignore[index]
    assert list(data["attempts"]) == ["1-git"]
    assert data["attempts"]["1-git"]["hosts"] == ["git.example.com:443"]  # Gitea's API is on the same host
    urls = build_proxy_urls(run, [attempt], GATEWAY)
    token = build_proxy_token("k3y", "uid-1", "1-git")
    assert urls == {
        "proxy-url-1-git": f"http://team-a.review.1-git:{token}@harness-operator-egress.harness-system.svc:3128"
    }
    spec = pod(run, NO_EGRESS, GATEWAY)
    clone, publisher = spec["initContainers"]
    runner, agent = spec["containers"]
    for container in (clone, publisher):
        assert {refs(container)[name] for name in PROXY_URL_ENVS} == {"proxy-url-1-git"}
    # Neither the runner (which sets the agent's environment) nor the agent holds it, nor mounts it.
    assert "-git" not in json.dumps([runner, agent])
    plan = next(v for v in spec["volumes"] if v["name"] == "plan")
    assert plan["secret"]["items"] == [{"key": "attempt-1.json", "path": "plan.json"}]
    assert token not in json.dumps(spec)
    # The pod may reach the gateway's pods, and nothing new by address.
    policy = build_network_policy(run, attempt, GATEWAY)
    gateway = {"kubernetes.io/metadata.name": "harness-system"}
    assert any(
        p["namespaceSelector"]["matchLabels"] == gateway
        for r in policy["spec"]["egress"]
        for p in r.get("to", [])
    )
    assert "0.0.0.0/0" not in json.dumps(policy)


def test_the_gateway_lets_the_git_user_reach_the_git_host_and_the_agent_user_not() -> None:
    run = publishing(pr={"forge": "github"}, url="https://github.com/acme/payments.git")
    grants = gateway_view(run, DEFINITION)
    git_user, agent_user = "team-a.review.1-git", "team-a.review.1"
    assert is_authentic(grants, git_user, build_proxy_token("k3y", "uid-1", "1-git"))
    assert not is_authentic(grants, git_user, build_proxy_token("k3y", "uid-1", 1))  # the agent's password
    assert is_authentic(grants, agent_user, build_proxy_token("k3y", "uid-1", 1))
    assert is_granted(grants, git_user, "github.com", "443") and is_granted(
        grants, git_user, "api.github.com", "443"
    )
    assert not is_granted(grants, git_user, "api.anthropic.com", "443")  # only its own destinations
    assert not is_granted(grants, agent_user, "github.com", "443")  # the agent's egress is what it was
    assert not is_granted(grants, agent_user, "api.github.com", "443")
    assert is_granted(grants, agent_user, "api.anthropic.com", "443")

    class Store:
        def current(self, user: str) -> dict[str, Any]:
            return grants

    # Squid's helper, line by line as Squid sends it
    assert answer("acl", Store(), f"{git_user} github.com 443 -") == "OK"
    assert answer("acl", Store(), f"{agent_user} github.com 443 -") == "ERR"


def test_with_the_agents_own_gateway_route_the_publisher_keeps_its_url_only_to_refuse_it() -> None:
    spec = pod(publishing(), DEFINITION, GATEWAY)
    clone, publisher = spec["initContainers"]
    runner = spec["containers"][0]
    assert refs(runner)["HTTPS_PROXY"] == "proxy-url-1"
    assert refs(clone)["HTTPS_PROXY"] == refs(publisher)["HTTPS_PROXY"] == "proxy-url-1-git"
    assert refs(publisher)[SANDBOX_PROXY_ENV] == "proxy-url-1"
    plan = json.loads(next(e["value"] for e in publisher["env"] if e["name"] == "HARNESS_PUBLISH_PLAN"))
    assert SANDBOX_PROXY_ENV in plan["secretEnvs"] and "HTTPS_PROXY" in plan["secretEnvs"]


def test_a_cidr_rule_holding_the_address_goes_direct() -> None:
    """The e2e's publish runs: the git host is an address the run's own CIDR rule opens."""
    url = "http://172.18.0.1:8080/git/acme/widgets.git"
    sandbox = {"networkPolicy": "allowlist", "egress": [{"cidr": "172.18.0.1/32", "ports": [8080]}]}
    run = publishing(url, sandbox, {"forge": "github", "apiURL": "http://172.18.0.1:9000"})
    rules = decide_attempt(run, target(1, NO_EGRESS), GATEWAY).egress
    assert compute_git_grants(run, rules, GATEWAY) == ["172.18.0.1:9000"]  # the API's port is not opened
    clone = pod(run, NO_EGRESS, GATEWAY)["initContainers"][0]
    no_proxy = next(e["value"] for e in clone["env"] if e["name"] == "NO_PROXY")
    assert no_proxy == "localhost,127.0.0.1,::1,172.18.0.1/32,172.18.0.1"
    sandbox["egress"].append({"cidr": "172.18.0.0/16", "ports": [9000]})
    run = publishing(url, sandbox, {"forge": "github", "apiURL": "http://172.18.0.1:9000"})
    assert compute_git_grants(run, decide_attempt(run, target(1, NO_EGRESS), GATEWAY).egress, GATEWAY) == []
    assert build_egress_grant(run, decide_attempts(run, [target(1, NO_EGRESS)], GATEWAY), GATEWAY) is None


@pytest.mark.parametrize("sandbox", [{"networkPolicy": "unrestricted"}, {"networkPolicy": "none"}])
def test_modes_that_restrict_nothing_to_open_get_no_git_credential(sandbox: dict[str, Any]) -> None:
    run = publishing(sandbox=sandbox)
    assert build_egress_grant(run, decide_attempts(run, [target(1, NO_EGRESS)], GATEWAY), GATEWAY) is None
    assert not set(refs(pod(run, NO_EGRESS, GATEWAY)["initContainers"][0])) & set(PROXY_URL_ENVS)


def test_a_git_daemon_url_through_a_gateway_route_keeps_the_sandboxs_proxy_for_the_clone() -> None:
    run = publishing(
        "git://172.18.0.1:9500/r.git", pr={"forge": "gitea", "apiURL": "http://172.18.0.1:3000/api/v1"}
    )
    clone = pod(run, DEFINITION, GATEWAY)["initContainers"][0]
    assert refs(clone)["HTTPS_PROXY"] == "proxy-url-1-git"  # the API needs the git credential
    run = make_run(workspace={"git": {"url": "git://172.18.0.1:9500/r.git"}})
    assert refs(pod(run, DEFINITION, GATEWAY)["initContainers"][0])["HTTPS_PROXY"] == "proxy-url-1"


ALLOW = "allowlist"
# sandbox, definition, config, the problem's start (None: admitted), the fix it names
PROBLEMS: list[tuple[dict[str, Any], HarnessDefinitionSpec, OperatorConfig, str | None, str | None]] = [
    ({}, NO_EGRESS, GATEWAY, None, None),  # the gateway opens both for the clone and the publisher
    (
        {},
        NO_EGRESS,
        PLAIN,
        "spec.workspace.git.url: the clone and the publisher must reach git.example.com:443",
        "add {host: git.example.com, ports: [443]} to spec.sandbox.egress",
    ),
    ({}, NO_EGRESS, CILIUM, "spec.workspace.git.url", "egressGateway.enabled: true"),
    (
        {"networkPolicy": ALLOW, "egress": [{"host": "git.example.com", "ports": [443]}]},
        NO_EGRESS,
        PLAIN,
        None,
        None,
    ),
    (
        {"networkPolicy": ALLOW, "egress": [{"host": "GIT.example.com.", "ports": [443]}]},
        NO_EGRESS,
        CILIUM,
        None,
        None,
    ),
    (
        {"networkPolicy": ALLOW, "egress": [{"host": "git.example.com", "ports": [22]}]},
        NO_EGRESS,
        PLAIN,
        "spec.workspace.git.url",
        None,
    ),
    (
        {"networkPolicy": ALLOW, "egress": [{"cidr": "0.0.0.0/0", "ports": [443]}]},
        NO_EGRESS,
        PLAIN,
        None,
        None,
    ),
    ({"networkPolicy": "unrestricted"}, NO_EGRESS, PLAIN, None, None),
    ({"networkPolicy": "none"}, NO_EGRESS, PLAIN, None, None),  # no network asked for: left as it was
]


@pytest.mark.parametrize(("sandbox", "definition", "config", "problem", "fix"), PROBLEMS)
def test_without_a_gateway_the_run_is_refused_naming_the_missing_rule(
    sandbox: dict[str, Any],
    definition: HarnessDefinitionSpec,
    config: OperatorConfig,
    problem: str | None,
    fix: str | None,
) -> None:
    run = publishing(sandbox=sandbox)
    attempt = decide_attempt(run, target(1, definition), config)
    found = find_git_egress_problem(run, attempt.egress, attempt.route, config)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found
        assert fix is None or fix in found


def test_the_forge_api_on_another_host_is_named_on_its_own_field() -> None:
    sandbox = {"networkPolicy": ALLOW, "egress": [{"host": "git.example.com", "ports": [443]}]}
    run = publishing(sandbox=sandbox, pr={"forge": "gitlab", "apiURL": "https://api.example.com/api/v4"})
    attempt = decide_attempt(run, target(1, NO_EGRESS), PLAIN)
    found = find_git_egress_problem(run, attempt.egress, attempt.route, PLAIN)
    assert found is not None
    assert found.startswith(
        "spec.workspace.publish.pullRequest: the clone and the publisher must reach api.example.com:443"
    )


@pytest.mark.parametrize(
    ("url", "sandbox", "config", "problem"),
    [
        # ssh and git:// cannot go through an HTTP proxy: a host rule opens them only without a gateway
        (
            "git@git.example.com:acme/w.git",
            {"networkPolicy": ALLOW, "egress": [{"host": "git.example.com", "ports": [22]}]},
            GATEWAY,
            "{cidr: <git.example.com's address>/32, ports: [22]}",
        ),
        (
            "git@git.example.com:acme/w.git",
            {"networkPolicy": ALLOW, "egress": [{"host": "git.example.com", "ports": [22]}]},
            PLAIN,
            None,
        ),
        (
            "git://172.18.0.1:9500/r.git",
            {"networkPolicy": ALLOW, "egress": []},
            GATEWAY,
            "{cidr: 172.18.0.1/32, ports: [9500]}",
        ),
        (
            "git://172.18.0.1:9500/r.git",
            {"networkPolicy": ALLOW, "egress": []},
            PLAIN,
            "or {host: 172.18.0.1, ports: [9500]}",
        ),
        # how the e2e and integration runs clone git://: a CIDR rule on the daemon's port
        (
            "git://172.18.0.1:9500/r.git",
            {"networkPolicy": ALLOW, "egress": [{"cidr": "172.18.0.1/32", "ports": [9500]}]},
            GATEWAY,
            None,
        ),
        (
            "git://172.18.0.1:9500/r.git",
            {"networkPolicy": ALLOW, "egress": [{"cidr": "172.19.0.0/16", "ports": [9500]}]},
            GATEWAY,
            "{cidr: 172.18.0.1/32",
        ),
        ("/srv/git/r.git", {"networkPolicy": ALLOW, "egress": []}, PLAIN, None),
    ],
)
def test_ssh_and_git_daemon_remotes_need_a_hand_written_rule(
    url: str, sandbox: dict[str, Any], config: OperatorConfig, problem: str | None
) -> None:
    run = make_run(sandbox, workspace={"git": {"url": url}})
    attempt = decide_attempt(run, target(1, CIDR_ONLY), config)
    found = find_git_egress_problem(run, attempt.egress, attempt.route, config)
    if problem is None:
        assert found is None
    else:
        assert found is not None and "which no HTTP proxy carries" in found and problem in found, found


def rules(*egress: dict[str, Any]) -> list[EgressRule]:
    return [EgressRule.model_validate(e) for e in egress]


R = "the clone reaches"


@pytest.mark.parametrize(
    ("url", "sandbox", "by_provider", "message", "warn"),
    [
        (
            GIT,
            {},
            [[]],
            f"{R} git.example.com:443 through the egress gateway, which opens it for no other container; "
            "without a gateway the operator refuses the run unless its egress opens it ({host: git.example.com, ports: "
            "[443]} in spec.sandbox.egress, networkPolicy: allowlist)",
            False,
        ),
        (
            GIT,
            {"networkPolicy": "unrestricted"},
            [[]],
            f"{R} git.example.com:443 directly (networkPolicy unrestricted)",
            False,
        ),
        (
            GIT,
            {"networkPolicy": "none"},
            [[]],
            f"{R} git.example.com:443 not at all: networkPolicy none lets nothing out; use provider or allowlist",
            True,
        ),
        (
            "http://10.1.2.3:80/a/b.git",
            {},
            [rules({"cidr": "10.1.2.0/24"})],
            f"{R} 10.1.2.3:80 directly (a cidr rule opens it)",
            False,
        ),
        # a cidr rule holding the address opens it only if every provider's egress has one
        (
            "http://10.1.2.3:80/a/b.git",
            {},
            [rules({"cidr": "10.1.2.0/24"}), []],
            f"{R} 10.1.2.3:80 through the egress gateway",
            False,
        ),
        (
            "git://10.1.2.3/b.git",
            {},
            [rules({"cidr": "10.1.2.0/24", "ports": [9418]})],
            f"{R} 10.1.2.3:9418 directly (a cidr rule opens it)",
            False,
        ),
        (
            "git@h.example:a/b.git",
            {},
            [rules({"cidr": "10.0.0.0/8", "ports": [22]})],
            f"{R} h.example:22 directly over ssh (a cidr rule opens it)",
            False,
        ),
        (
            "git@h.example:a/b.git",
            {},
            [rules({"host": "h.example", "ports": [22]})],
            f"{R} h.example:22 over ssh, which the egress gateway (an HTTP proxy) cannot carry: the operator "
            "refuses the run unless its egress opens it: add {cidr: <h.example's address>/32, ports: [22]} to "
            "spec.sandbox.egress (networkPolicy: allowlist; without a gateway {host: h.example, ports: [22]} "
            "also does), or use the repository's https URL",
            True,
        ),
    ],
)
def test_validate_describes_the_way_out(
    url: str, sandbox: dict[str, Any], by_provider: list[list[EgressRule]], message: str, warn: bool
) -> None:
    [(field, said, warned)] = describe_git_egress(
        make_run(sandbox, workspace={"git": {"url": url}}), by_provider
    )
    assert field == "spec.workspace.git.url" and said.startswith(message) and warned is warn, said


def test_validate_says_where_the_pull_request_goes_and_each_address_once() -> None:
    said = describe_publish(publishing(), [NO_EGRESS])
    assert said == [
        (
            "spec.workspace.publish.pullRequest",
            "opens a pull request on gitea repository acme/payments through https://git.example.com/git/api/v1",
            False,
        ),
        ("spec.workspace.git.url", said[1][1], False),  # the API on the git host is not said twice
    ]
    gitlab = describe_publish(publishing(pr={"forge": "gitlab"}), [NO_EGRESS])
    assert gitlab[0][1].endswith(
        "a GitLab under a sub-path needs apiURL (its .../api/v4 root) to take the prefix off"
    )
    assert describe_publish(publishing(), []) == [said[0]]  # no provider known: nothing said of egress


def test_admission_names_the_attempt_whose_egress_misses_the_git_host() -> None:
    """Fallback providers have their own egress (provider mode): the one that cannot reach is named."""
    opened = HarnessDefinitionSpec.model_validate(
        {"binary": "claude", "egress": [{"host": "git.example.com", "ports": [443]}]}
    )
    run = publishing()
    attempts = decide_attempts(run, [target(1, opened), target(2, NO_EGRESS)], PLAIN)
    with pytest.raises(Rejection) as raised:
        check_git_egress(run, attempts, PLAIN)
    assert raised.value.reason == "InvalidSpec"
    assert raised.value.message.startswith("spec.workspace.git.url: the clone and the publisher must reach")
    assert raised.value.message.endswith("(attempt 2, provider claude)")
    check_git_egress(run, decide_attempts(run, [target(1, opened)], PLAIN), PLAIN)  # admitted
    check_git_egress(run, attempts, GATEWAY)  # the gateway opens it for both
