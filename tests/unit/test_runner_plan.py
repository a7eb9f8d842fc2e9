"""AttemptPlan building: argv from the invocation builder, env and grants, native budget flag, fallbacks."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.runner.plan import (
    AttemptPlan,
    UnknownProviderError,
    build_attempt_plans,
    build_plan,
    load_plan,
    with_output_limit,
)


def run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {"metadata": {"name": "r1", "namespace": "team"}, "spec": {"provider": "p", "prompt": "P", **spec}}
    )


def definition(**spec: Any) -> HarnessDefinitionSpec:
    return HarnessDefinitionSpec.model_validate({"binary": "agent", **spec})


CLAUDE = definition(
    binary="claude",
    prefixArgs=["-p"],
    kebabCaseFlags=True,
    defaults={"output_format": "stream-json", "verbose": True},
    output={"format": "claude-stream-json"},
    capabilities={"costReporting": True},
)


def test_argv_stdin_and_identity():
    plan = build_plan(run(), definition(prefixArgs=["exec"]), 1, "p", {"model": "m"}, "P", "IN")
    assert plan.argv == ["agent", "exec", "P", "--model", "m"]
    assert plan.stdin == "IN"
    assert (plan.run_name, plan.run_namespace, plan.attempt, plan.total_attempts) == ("r1", "team", 1, 1)
    assert plan.model_hint == "m"


def test_max_cost_adds_claude_native_budget_flag():
    plan = build_plan(run(limits={"maxCostUSD": 0.75}), CLAUDE, 1, "claude-code", {}, "P", None)
    assert plan.args[plan.args.index("--max-budget-usd") + 1] == "0.75"


def test_budget_flag_only_for_claude_stream_json():
    plan = build_plan(run(limits={"maxCostUSD": 0.75}), definition(), 1, "p", {}, "P", None)
    assert "--max-budget-usd" not in plan.args


def test_no_budget_flag_for_claude_format_clis_without_cost_reporting():
    qwen = CLAUDE.model_copy(
        update={"capabilities": CLAUDE.capabilities.model_copy(update={"cost_reporting": False})}
    )
    plan = build_plan(run(limits={"maxCostUSD": 0.75}), qwen, 1, "qwen", {}, "P", None)
    assert "--max-budget-usd" not in plan.args


def test_user_budget_option_wins():
    plan = build_plan(run(limits={"maxCostUSD": 0.75}), CLAUDE, 1, "c", {"max_budget_usd": 0.1}, "P", None)
    assert plan.args.count("--max-budget-usd") == 1
    assert plan.args[plan.args.index("--max-budget-usd") + 1] == "0.1"


def test_env_and_credentials_merge_run_over_definition():
    d = definition(
        env=[{"name": "BASE_URL", "value": "def"}, {"name": "MODE", "value": "x"}],
        credentials=[{"env": "API_KEY", "secretKeyRef": {"name": "s", "key": "k"}}],
    )
    r = run(
        env=[{"name": "BASE_URL", "value": "run"}],
        credentials=[{"env": "OTHER", "secretKeyRef": {"name": "s2", "key": "k"}, "optional": True}],
    )
    plan = build_plan(r, d, 1, "p", {}, "P", None)
    assert {e.name: e.value for e in plan.env} == {"BASE_URL": "run", "MODE": "x"}
    assert plan.credential_envs == ["API_KEY", "OTHER"]
    assert plan.optional_credential_envs == ["OTHER"]
    assert "s2" not in plan.to_json()  # secret references stay out of the plan; only names go in


def test_limits_pricing_format_and_working_dir_travel():
    d = definition(output={"format": "codex-jsonl"}, pricing={"gpt": {"input": 1.25, "output": 10}})
    r = run(limits={"timeoutSeconds": 5, "maxTurns": 3}, workspace={"workingDir": "/w"})
    plan = build_plan(r, d, 2, "codex", {}, "P", None)
    assert plan.output_format == "codex-jsonl"
    assert plan.pricing["gpt"].output == 10
    assert (plan.limits.timeout_seconds, plan.limits.max_turns) == (5, 3)
    assert plan.working_dir == "/w"
    assert plan.grace_seconds == 30


def test_json_round_trip():
    plan = build_plan(run(limits={"maxCostUSD": 1}), CLAUDE, 1, "c", {}, "P", "S")
    assert load_plan(plan.to_json()) == plan
    assert '"maxCostUSD": 1' in plan.to_json()


def test_attempt_plans_follow_the_fallback_chain_with_their_own_options():
    r = run(**{"with": {"model": "a"}, "fallback": [{"provider": "q", "with": {"effort": "low"}}]})
    defs = {"p": definition(binary="pa"), "q": definition(binary="qa")}
    plans = build_attempt_plans(r, defs.get, "P", None)
    assert [(p.attempt, p.total_attempts, p.provider, p.argv) for p in plans] == [
        (1, 2, "p", ["pa", "P", "--model", "a"]),
        (2, 2, "q", ["qa", "P", "--effort", "low"]),
    ]


def test_unknown_provider_is_an_error():
    with pytest.raises(UnknownProviderError, match='unknown provider "q"'):
        build_attempt_plans(run(fallback=[{"provider": "q"}]), {"p": definition()}.get, "P", None)


def test_attempt_is_one_based():
    with pytest.raises(ValueError):
        AttemptPlan(attempt=0, total_attempts=1, provider="p", binary="b")


def test_output_limit_defaults_only_when_the_run_sets_none():
    plan = AttemptPlan(attempt=1, total_attempts=1, provider="p", binary="b")
    assert with_output_limit(plan, 1000).limits.max_output_bytes == 1000
    own = plan.model_copy(update={"limits": plan.limits.model_copy(update={"max_output_bytes": 10})})
    assert with_output_limit(own, 1000).limits.max_output_bytes == 10
