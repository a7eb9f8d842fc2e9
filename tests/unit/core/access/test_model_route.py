"""Routing through the model gateway: which attempts are routed, what their definition, plan, plan Secret,
Job and policy hold (never the vendor key, the token only from the plan Secret), the grant, the warnings."""

import dataclasses
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.unit.core.pod.test_job import golden

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun, HarnessRunStatus
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.model_access import (
    ModelGrant,
    is_token_of,
    parse_model_token,
    token_sha256,
)
from harness_operator.contract.plan import load_plan
from harness_operator.core.access.model_route import compute_model_route, find_own_key
from harness_operator.core.attempt import Attempt, decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.traced import build_attempt_traceparent
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.pod.egress_grant import grant_name as egress_grant_name
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.model_grant import (
    build_model_grant,
    build_model_key_secret,
    build_model_secrets,
    compute_key_warning,
    compute_live_attempts,
    compute_model_caps,
    find_grant_conflict,
    merge_route_options,
    model_base_url,
    model_grant_name,
    model_key_secret_name,
    model_token,
    read_model_grant,
    without_attempts,
)
from harness_operator.core.pod.network_policy import build_network_policy
from harness_operator.core.pod.run_data import build_plan_secret
from harness_operator.core.resolve.resolution import AttemptTarget

GATEWAY = OperatorConfig(
    model_gateway_service="harness-operator-model.harness-system.svc",
    model_gateway_namespace="harness-system",
    model_gateway_vendors=("anthropic", "openai"),
    model_gateway_key="m0del-k3y",
)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
CLAUDE = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "credentials": [
            {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "anthropic", "key": "api-key"}}
        ],
        "egress": [{"host": "api.anthropic.com", "ports": [443]}],
        "modelRoute": {
            "vendor": "anthropic",
            "env": [
                {"name": "ANTHROPIC_BASE_URL", "value": "$(HARNESS_MODEL_GATEWAY_URL)"},
                {"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"},
            ],
        },
        "pricing": {"claude-x": {"input": 3, "output": 15}},
    }
)
CODEX = HarnessDefinitionSpec.model_validate(
    {
        "binary": "codex",
        "prefixArgs": ["exec"],
        "optionFlags": {"config": "-c"},
        "credentials": [{"env": "OPENAI_API_KEY", "secretKeyRef": {"name": "openai", "key": "api-key"}}],
        "modelRoute": {
            "vendor": "openai",
            "env": [{"name": "OPENAI_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"}],
            "options": {"config": ["base_url=$(HARNESS_MODEL_GATEWAY_URL)/v1"]},
        },
    }
)
CURSOR = HarnessDefinitionSpec.model_validate(
    {
        "binary": "cursor-agent",
        "credentials": [{"env": "CURSOR_API_KEY", "secretKeyRef": {"name": "cursor", "key": "api-key"}}],
    }
)


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1"},
            "spec": {"provider": "claude", "prompt": "Review.", **spec},
        }
    )


def routed(run: HarnessRun, *definitions: HarnessDefinitionSpec) -> list[Attempt]:
    targets = [AttemptTarget(i, "p", d, 1) for i, d in enumerate(definitions, start=1)]
    return decide_attempts(run, targets, GATEWAY)


@pytest.mark.parametrize(
    ("definition", "config", "spec", "expected"),
    [
        (CLAUDE, GATEWAY, {}, "anthropic"),
        (CODEX, GATEWAY, {}, "openai"),
        (CURSOR, GATEWAY, {}, None),  # no route: cannot be routed
        (CLAUDE, OperatorConfig(), {}, None),  # no gateway
        (CLAUDE, OperatorConfig(**{**GATEWAY.__dict__, "model_gateway_vendors": ("openai",)}), {}, None),
        # The run brings its own endpoint or key: it keeps them.
        (CLAUDE, GATEWAY, {"env": [{"name": "ANTHROPIC_BASE_URL", "value": "http://mine"}]}, None),
        # Its own key where the token goes: routed, the gateway holds the key.
        (
            CLAUDE,
            GATEWAY,
            {"credentials": [{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "mine", "key": "k"}}]},
            "anthropic",
        ),
        (CLAUDE, GATEWAY, {"env": [{"name": "OTHER", "value": "x"}]}, "anthropic"),
    ],
)
def test_which_attempts_are_routed(
    definition: HarnessDefinitionSpec, config: OperatorConfig, spec: dict[str, Any], expected: str | None
) -> None:
    route = compute_model_route(make_run(**spec), definition, config)
    assert (route.vendor if route else None) == expected


def test_a_routed_definition_holds_no_credential_and_under_provider_no_egress() -> None:
    claude, cursor = routed(make_run(), CLAUDE, CURSOR)
    assert claude.definition.credentials == [] and claude.definition.egress == []
    # A definition granting two vendors' keys (aider, opencode) keeps neither, routed for one of them.
    both = CLAUDE.model_copy(update={"credentials": [*CLAUDE.credentials, *CODEX.credentials]})
    (routed_both,) = routed(make_run(), both)
    job = build_job(make_run(), routed_both, GATEWAY)
    runner_env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in runner_env if "valueFrom" in e} == {"review-plan"}
    assert cursor.definition == CURSOR  # not routed: as it was
    allowlist = routed(
        make_run(sandbox={"networkPolicy": "allowlist", "egress": [{"cidr": "10.0.0.0/8"}]}), CLAUDE
    )
    assert allowlist[0].definition.egress == CLAUDE.egress  # the run's egress decides there anyway


def test_token_names_its_grant_and_attempt_and_only_its_hash_is_granted() -> None:
    run = make_run()
    token = model_token(run, GATEWAY, 2)
    assert parse_model_token(token) == (model_grant_name("team-a", "review"), "2")
    assert token == model_token(run, GATEWAY, 2)  # a restarted operator derives the same
    other = make_run()
    other.metadata["uid"] = "uid-2"
    assert len({token, model_token(run, GATEWAY, 1), model_token(other, GATEWAY, 2)}) == 3
    assert parse_model_token("sk-ant-real") is None and parse_model_token("hmg-x") is None


def test_plan_secret_and_job_carry_the_token_only_by_reference() -> None:
    run = make_run(fallback=[{"provider": "cursor"}])
    targets = routed(run, CLAUDE, CURSOR)
    plans = build_plans(run, targets, "Review.", None, NOW, GATEWAY)
    token = model_token(run, GATEWAY, 1)
    first = load_plan(json.dumps(plans[0]))
    env = {e.name: e.value for e in first.env}
    assert env["ANTHROPIC_BASE_URL"] == "http://harness-operator-model.harness-system.svc:8080/anthropic"
    assert "ANTHROPIC_API_KEY" in first.credential_envs and "ANTHROPIC_API_KEY" not in env
    assert token not in json.dumps(plans)  # the plan never holds the token
    secret = build_plan_secret(run, plans, build_model_secrets(run, targets, GATEWAY))
    assert secret["stringData"]["model-env-1-ANTHROPIC_API_KEY"] == token
    assert not any(k.startswith("model-env-2") for k in secret["stringData"])  # cursor is not routed
    job = build_job(run, targets[0], GATEWAY)
    golden("job-model-routed", job)
    runner, agent = job["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in runner["env"] if "valueFrom" in e}
    assert refs == {"ANTHROPIC_API_KEY": {"name": "review-plan", "key": "model-env-1-ANTHROPIC_API_KEY"}}
    assert "env" not in agent  # the agent's container: nothing, as for any credential
    assert token not in json.dumps(job) and "anthropic" not in json.dumps(refs["ANTHROPIC_API_KEY"]["name"])


def test_route_options_are_added_to_the_runs_with_their_url_expanded() -> None:
    route = CODEX.model_route
    assert route is not None
    merged = merge_route_options({"config": ["model=o4"], "model": "x"}, route, GATEWAY)
    base = model_base_url(GATEWAY, "openai")
    assert merged == {"config": ["model=o4", f"base_url={base}/v1"], "model": "x"}
    plans = build_plans(
        make_run(provider="codex"),
        routed(make_run(), CODEX),
        "Go.",
        None,
        NOW,
        GATEWAY,
    )
    assert f"base_url={base}/v1" in plans[0]["args"]


def test_policy_opens_the_gateway_and_under_provider_nothing_of_the_vendor() -> None:
    run = make_run()
    policy = build_network_policy(run, routed(run, CLAUDE)[0], GATEWAY)
    golden("network-policy-model-routed", policy)
    peers = [rule.get("to", [{}])[0] for rule in policy["spec"]["egress"]]
    assert any(p.get("podSelector", {}).get("matchLabels") == GATEWAY.model_gateway_pod_labels for p in peers)
    assert not any("ipBlock" in p for p in peers)  # no public address: the vendor only via the gateway
    none = build_network_policy(
        make_run(sandbox={"networkPolicy": "none"}),
        routed(run, CLAUDE)[0],
        GATEWAY,
    )
    assert none["spec"]["egress"] == []


def test_grant_holds_the_runs_caps_and_hash_vendor_prices_of_live_routed_attempts_only() -> None:
    run = make_run(limits={"maxCostUSD": 0.5, "maxTokens": 9000}, fallback=[{"provider": "cursor"}])
    targets = routed(run, CLAUDE, CURSOR)
    config_map = build_model_grant(run, targets, GATEWAY, {1, 2})
    assert config_map is not None
    golden("model-grant", config_map)
    grant = ModelGrant.model_validate_json(config_map["data"]["grant.json"])
    assert list(grant.attempts) == ["1"]  # attempt 2 (cursor) is not routed
    attempt = grant.attempts["1"]
    assert is_token_of(attempt, model_token(run, GATEWAY, 1)) and not is_token_of(attempt, "hmg-x.1.y")
    assert attempt.vendor == "anthropic" and attempt.pricing["claude-x"].output == 15
    # The caps are the run's, once: every attempt spends from them together.
    assert (grant.max_cost_usd, grant.max_tokens) == (0.5, 9000)
    assert "maxCostUSD" not in json.loads(config_map["data"]["grant.json"])["attempts"]["1"]
    assert model_token(run, GATEWAY, 1) not in json.dumps(config_map)
    assert config_map["metadata"]["namespace"] == "harness-system"
    assert without_attempts(grant, {1}).attempts == {}
    assert build_model_grant(run, routed(run, CURSOR), GATEWAY, {1}) is None


def test_only_the_started_attempts_are_live_in_the_grant() -> None:
    run = make_run(fallback=[{"provider": "claude"}, {"provider": "claude"}])
    targets = routed(run, CLAUDE, CLAUDE, CLAUDE)
    for live in ({1}, {2}, {2, 3}):
        config_map = build_model_grant(run, targets, GATEWAY, live)
        assert config_map is not None
        grant = ModelGrant.model_validate_json(config_map["data"]["grant.json"])
        assert set(grant.attempts) == {str(i) for i in live}
        for index in (1, 2, 3):  # a token is good only while its attempt is live
            assert any(is_token_of(a, model_token(run, GATEWAY, index)) for a in grant.attempts.values()) == (
                index in live
            )
    assert build_model_grant(run, targets, GATEWAY, set()) is None


@pytest.mark.parametrize(
    ("limits", "budget", "caps"),
    [
        ({}, None, (None, None)),
        ({"maxCostUSD": 0.05}, None, (0.05, None)),
        ({"maxTokens": 100}, None, (None, 100)),
        ({"maxCostUSD": 0.05}, 0.02, (0.02, None)),  # a budget's reservation lowers it
        ({"maxCostUSD": 0.05}, 0.5, (0.05, None)),
        ({}, 0.3, (0.3, None)),  # a budget's default reservation caps a run without its own
        ({"maxCostUSD": 1.0, "maxTokens": 7}, 0.25, (0.25, 7)),
    ],
)
def test_the_grants_caps_are_the_runs_limits_lowered_to_its_reservation(
    limits: dict[str, Any], budget: float | None, caps: tuple[float | None, int | None]
) -> None:
    run = make_run(limits=limits)
    if budget is not None:
        run.status = HarnessRunStatus.model_validate({"budget": {"names": ["b"], "reservedUSD": budget}})
    assert compute_model_caps(run) == caps
    config_map = build_model_grant(run, routed(run, CLAUDE), GATEWAY, {1})
    assert config_map is not None
    grant = ModelGrant.model_validate_json(config_map["data"]["grant.json"])
    assert (grant.max_cost_usd, grant.max_tokens) == caps


def test_the_caps_are_those_the_plans_hold() -> None:
    run = make_run(limits={"maxCostUSD": 0.05, "maxTokens": 70}, fallback=[{"provider": "claude"}])
    targets = routed(run, CLAUDE, CLAUDE)
    plans = [load_plan(json.dumps(p)) for p in build_plans(run, targets, "Go.", None, NOW, GATEWAY)]
    assert {(p.limits.max_cost_usd, p.limits.max_tokens) for p in plans} == {compute_model_caps(run)}


def stored(run: HarnessRun, live: set[int], uid: str | None = None) -> ModelGrant:
    config_map = build_model_grant(run, routed(run, CLAUDE, CLAUDE, CLAUDE), GATEWAY, live)
    assert config_map is not None
    grant = read_model_grant(config_map)
    assert grant is not None
    return grant.model_copy(update={"uid": uid}) if uid else grant


def test_an_attempt_joins_the_live_attempts_of_this_runs_stored_grant_only() -> None:
    run = make_run(fallback=[{"provider": "claude"}, {"provider": "claude"}])
    assert compute_live_attempts(run, None, 1) == {1}
    assert compute_live_attempts(run, stored(run, {1}), 2) == {1, 2}
    assert compute_live_attempts(run, stored(run, {1}), 1) == {1}  # a start done again: the same
    assert compute_live_attempts(run, stored(run, {2}), None) == {2}
    # A deleted run of the same name left its grant: none of its attempts is this run's.
    assert compute_live_attempts(run, stored(run, {1, 2}, uid="uid-gone"), 3) == {3}


def test_read_model_grant_reads_only_a_labelled_grant() -> None:
    run = make_run()
    config_map = build_model_grant(run, routed(run, CLAUDE), GATEWAY, {1})
    assert config_map is not None
    assert read_model_grant(config_map) is not None
    assert read_model_grant(None) is None
    assert read_model_grant({**config_map, "metadata": {"name": "x", "labels": {}}}) is None
    assert read_model_grant({**config_map, "data": {"grant.json": "{not json"}}) is None


@pytest.mark.parametrize("namespace", ["model", "team-a", "m", "model-grant", "a" * 63])
@pytest.mark.parametrize("name", ["review", "team-a.review", "a.b.c", "x" * 253])
def test_a_model_grant_never_takes_an_egress_grants_name(namespace: str, name: str) -> None:
    """Both may live in one namespace: an egress grant's name always holds a dot after the namespace (one
    holds none), a model grant's never does; both fit a ConfigMap's name."""
    assert "." in egress_grant_name(namespace, name)
    for ours in (model_grant_name(namespace, name), model_key_secret_name(namespace, name)):
        assert "." not in ours and len(ours) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ours)


def test_the_red_teams_namespace_named_model_gets_a_grant_of_its_own() -> None:
    # Before: egress `model.team-a.review` (namespace model, run team-a.review) was the model grant of
    # team-a/review.
    assert egress_grant_name("model", "team-a.review") == "model.team-a.review"
    assert model_grant_name("team-a", "review") != "model.team-a.review"
    names = {
        model_grant_name(ns, run)
        for ns in ("model", "team-a", "team-a-b", "team")
        for run in ("review", "a-review", "b.review", "team-a.review")
    }
    assert len(names) == 16  # distinct runs, distinct grants


def test_token_of_a_long_runs_grant_parses() -> None:
    run = make_run()
    run.metadata["name"] = "r." * 120 + "x"
    token = model_token(run, GATEWAY, 3)
    assert parse_model_token(token) == (model_grant_name("team-a", run.metadata["name"]), "3")


def owned(found: dict[str, Any], **data: Any) -> dict[str, Any]:
    grant = json.loads(found["data"]["grant.json"])
    return {**found, "data": {"grant.json": json.dumps({**grant, **data})}}


def test_a_grant_of_another_run_or_no_grant_is_never_replaced() -> None:
    run = make_run()
    mine = build_model_grant(run, routed(run, CLAUDE), GATEWAY, {1})
    assert mine is not None
    label, key = "agentharness.dev/model-grant", "grant.json"
    assert find_grant_conflict(None, label, key, run) is None
    assert find_grant_conflict(mine, label, key, run) is None
    # A deleted run of the same namespace and name left it: replaced (one run holds a name at a time).
    assert find_grant_conflict(owned(mine, uid="uid-gone"), label, key, run) is None
    other = find_grant_conflict(owned(mine, namespace="model", run="team-a.review"), label, key, run)
    assert other is not None and "model/team-a.review" in other
    assert find_grant_conflict(owned(mine, run="other"), label, key, run) is not None
    # An egress grant where a model grant goes (or the reverse): not ours to replace.
    assert "not a grant" in (find_grant_conflict(mine, "agentharness.dev/egress-grant", key, run) or "")
    unreadable = {**mine, "data": {"grant.json": "[1"}}
    assert find_grant_conflict(unreadable, label, key, run) is not None


def test_token_hash_is_sha256() -> None:
    assert token_sha256("a") == "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"


@pytest.mark.parametrize(
    ("definition", "spec", "says"),
    [
        (CURSOR, {}, "its CLI cannot be routed"),
        (
            CLAUDE,
            {"env": [{"name": "ANTHROPIC_BASE_URL", "value": "http://mine"}]},
            "the run sets ANTHROPIC_BASE_URL",
        ),
    ],
)
def test_an_unrouted_attempt_with_a_key_gets_a_warning(
    definition: HarnessDefinitionSpec, spec: dict[str, Any], says: str
) -> None:
    run = make_run(**spec)
    warning = compute_key_warning(
        run, decide_attempt(run, AttemptTarget(1, "p", definition, 1), GATEWAY), GATEWAY
    )
    assert warning is not None and says in warning and "reach the sandbox" in warning


def test_no_warning_when_routed_keyless_or_without_a_gateway() -> None:
    run = make_run()
    assert compute_key_warning(run, routed(run, CLAUDE)[0], GATEWAY) is None
    keyless = HarnessDefinitionSpec.model_validate({"binary": "x"})
    assert (
        compute_key_warning(run, decide_attempt(run, AttemptTarget(1, "p", keyless, 1), GATEWAY), GATEWAY)
        is None
    )
    assert (
        compute_key_warning(
            run, decide_attempt(run, AttemptTarget(1, "p", CURSOR, 1), OperatorConfig()), OperatorConfig()
        )
        is None
    )


def test_catalog_routes_never_put_the_token_in_options_and_name_a_known_vendor() -> None:
    for entry in load_builtin_catalog():
        route = entry.spec.model_route
        if route is None:
            continue
        assert "HARNESS_MODEL_GATEWAY_TOKEN" not in json.dumps(route.options), entry.metadata["name"]
        assert any("HARNESS_MODEL_GATEWAY_TOKEN" in e.value for e in route.env), entry.metadata["name"]


def test_home_files_reach_the_plan_with_the_url_expanded_and_never_the_token() -> None:
    pi = CLAUDE.model_copy(
        update={
            "model_route": CLAUDE.model_route.model_copy(  # type: ignore[union-attr]
                update={
                    "home_files": {".pi/agent/models.json": '{"baseUrl": "$(HARNESS_MODEL_GATEWAY_URL)"}'}
                }
            )
        }
    )
    run = make_run()
    plan = load_plan(json.dumps(build_plans(run, routed(run, pi), "Go.", None, NOW, GATEWAY)[0]))
    base = model_base_url(GATEWAY, "anthropic")
    assert plan.home_files == {".pi/agent/models.json": f'{{"baseUrl": "{base}"}}'}
    assert model_token(run, GATEWAY, 1) not in json.dumps(plan.home_files)


def test_a_runs_own_key_is_routed_and_held_by_the_gateway_not_the_sandbox() -> None:
    own = {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "team-key", "key": "api-key"}}
    run = make_run(credentials=[own])
    route = compute_model_route(run, CLAUDE, GATEWAY)
    assert route is not None and find_own_key(run, route) is not None
    # A run's grant of another route variable than the token's is its own endpoint: not routed.
    other = make_run(credentials=[{**own, "env": "ANTHROPIC_BASE_URL"}])
    assert compute_model_route(other, CLAUDE, GATEWAY) is None
    targets = routed(run, CLAUDE)
    job = build_job(run, targets[0], GATEWAY)
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
        if "valueFrom" in e
    ]
    assert refs == [
        {"name": "review-plan", "key": "model-env-1-ANTHROPIC_API_KEY"}
    ]  # the token, not team-key
    grant = ModelGrant.model_validate_json(
        build_model_grant(run, targets, GATEWAY, {1}, {1})["data"]["grant.json"]  # type: ignore[index]
    )
    assert (grant.attempts["1"].key_secret, grant.attempts["1"].key_field) == (
        model_key_secret_name("team-a", "review"),
        "attempt-1",
    )
    secret = build_model_key_secret(run, GATEWAY, {1: "sk-team"})
    assert secret is not None and secret["stringData"] == {"attempt-1": "sk-team"}
    assert secret["metadata"]["namespace"] == "harness-system"
    assert build_model_key_secret(run, GATEWAY, {}) is None


def test_a_routed_gemini_attempt_gets_one_settings_file_with_its_auth_and_its_mcp_servers() -> None:
    gemini = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == "gemini")
    docs = {"name": "docs", "url": "https://mcp.docs.internal/mcp", "tools": ["search"]}
    run = make_run(provider="gemini", mcpServers=[docs])
    config = OperatorConfig(**{**GATEWAY.__dict__, "model_gateway_vendors": ("gemini",)})
    targets = decide_attempts(run, [AttemptTarget(1, "gemini", gemini, 1)], config)
    plan = load_plan(json.dumps(build_plans(run, targets, "Go.", None, NOW, config)[0]))
    settings = json.loads(plan.home_files[".gemini/settings.json"])
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert settings["mcpServers"]["docs"]["httpUrl"] == "https://mcp.docs.internal/mcp"


def test_a_routed_opencode_attempt_gets_one_configuration_with_its_provider_servers_and_rules() -> None:
    opencode = next(d.spec for d in load_builtin_catalog() if d.metadata["name"] == "opencode")
    docs = {"name": "docs", "url": "https://mcp.docs.internal/mcp", "tools": ["search"]}
    run = make_run(provider="opencode", mcpServers=[docs], tools={"shell": False})
    targets = decide_attempts(run, [AttemptTarget(1, "opencode", opencode, 1)], GATEWAY)
    plan = load_plan(json.dumps(build_plans(run, targets, "Go.", None, NOW, GATEWAY)[0]))
    config = json.loads(next(e.value for e in plan.env if e.name == "OPENCODE_CONFIG_CONTENT"))
    assert list(config) == ["mcp", "tools", "permission", "provider"]
    assert (
        config["provider"]["anthropic"]["options"]["baseURL"] == f"{model_base_url(GATEWAY, 'anthropic')}/v1"
    )
    assert config["permission"] == {"bash": "deny"}


def test_a_traced_runs_plans_and_grant_carry_each_attempts_span_and_an_untraced_ones_do_not() -> None:
    run = make_run(fallback=[{"provider": "claude"}])
    targets = routed(run, CLAUDE, CLAUDE)
    traced = dataclasses.replace(GATEWAY, tracing_endpoint="http://collector:4318")
    uid = run.metadata["uid"]
    plans = [load_plan(json.dumps(p)) for p in build_plans(run, targets, "Review.", None, NOW, traced)]
    assert [p.trace_parent for p in plans] == [build_attempt_traceparent(uid, i, traced) for i in (1, 2)]
    assert plans[0].trace_parent is not None and plans[0].trace_parent != plans[1].trace_parent
    config_map = build_model_grant(run, targets, traced, {1, 2})
    grant = read_model_grant(config_map)
    assert grant is not None
    assert grant.attempts["2"].trace_parent == plans[1].trace_parent
    untraced = [load_plan(json.dumps(p)) for p in build_plans(run, targets, "Review.", None, NOW, GATEWAY)]
    assert all(p.trace_parent is None for p in untraced)
    plain = read_model_grant(build_model_grant(run, targets, GATEWAY, {1}))
    assert plain is not None and plain.attempts["1"].trace_parent is None
