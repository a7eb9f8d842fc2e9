"""AttemptPlan building: argv from the invocation builder, env and grants, native budget flag, fallbacks."""

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.attempt_plans import plan_of

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.plan import (
    OUTPUT_SCHEMA_HOME_FILE,
    REPROMPT_TEXT,
    AttemptPlan,
    home_path_arg,
    load_plan,
)
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.planning import PlanError, with_output_limit
from harness_operator.core.plan.plans import build_attempt_plans
from harness_operator.core.resolve.resolution import Rejection, resolve_targets

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {"metadata": {"name": "r1", "namespace": "team"}, "spec": {"provider": "p", "prompt": "P", **spec}}
    )


def definition(**spec: Any) -> HarnessDefinitionSpec:
    return HarnessDefinitionSpec.model_validate({"binary": "agent", **spec})


class Catalog:
    """ClusterHarnessDefinitions by name, from `resolve`."""

    def __init__(self, resolve: Callable[[str], HarnessDefinitionSpec | None]) -> None:
        self.resolve = resolve

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        found = self.resolve(name) if namespace is None else None
        return None if found is None else {"spec": found.model_dump(by_alias=True, exclude_none=True)}


def chain_plans(
    r: HarnessRun, resolve: Callable[[str], HarnessDefinitionSpec | None], prompt: str, stdin: str | None
) -> list[AttemptPlan]:
    """Every attempt's plan, as `harnessctl run` builds them (the operator's path, no gateway)."""
    config = OperatorConfig()
    attempts = decide_attempts(r, resolve_targets(Catalog(resolve), r), config)
    return build_attempt_plans(r, attempts, prompt, stdin, NOW, config)


CLAUDE = definition(
    binary="claude",
    prefixArgs=["-p"],
    kebabCaseFlags=True,
    defaults={"output_format": "stream-json", "verbose": True},
    output={"format": "claude-stream-json"},
    capabilities={"costReporting": True},
)


def test_argv_stdin_and_identity():
    plan = plan_of(run(), definition(prefixArgs=["exec"]), 1, "p", {"model": "m"}, "P", "IN")
    assert plan.argv == ["agent", "exec", "P", "--model", "m"]
    assert plan.stdin == "IN"
    assert (plan.run_name, plan.run_namespace, plan.attempt, plan.total_attempts) == ("r1", "team", 1, 1)
    assert plan.model_hint == "m"


def test_max_cost_adds_claude_native_budget_flag():
    plan = plan_of(run(limits={"maxCostUSD": 0.75}), CLAUDE, 1, "claude-code", {}, "P", None)
    assert plan.args[plan.args.index("--max-budget-usd") + 1] == "0.75"


def test_budget_flag_only_for_claude_stream_json():
    plan = plan_of(run(limits={"maxCostUSD": 0.75}), definition(), 1, "p", {}, "P", None)
    assert "--max-budget-usd" not in plan.args


def test_no_budget_flag_for_claude_format_clis_without_cost_reporting():
    qwen = CLAUDE.model_copy(
        update={"capabilities": CLAUDE.capabilities.model_copy(update={"cost_reporting": False})}
    )
    plan = plan_of(run(limits={"maxCostUSD": 0.75}), qwen, 1, "qwen", {}, "P", None)
    assert "--max-budget-usd" not in plan.args


@pytest.mark.parametrize(
    ("options", "defaults", "flag"),
    [
        ({"max_budget_usd": 0.1}, {}, "0.1"),  # tighter: kept
        ({"max_budget_usd": 1000}, {}, "0.75"),  # looser (the red team's): the cap stays
        ({"max-budget-usd": "1000"}, {}, "0.75"),
        ({"max_budget_usd": "lots"}, {}, "0.75"),  # not a number: the cap
        ({"max_budget_usd": -5}, {}, "0.75"),  # negative: not a cap
        ({}, {"max_budget_usd": 0.2}, "0.2"),  # the definition's tighter default
        ({}, {"max-budget-usd": 50}, "0.75"),
        ({"max_budget_usd": 0.5}, {"max_budget_usd": 0.3}, "0.3"),
    ],
)
def test_a_budget_option_tightens_max_cost_never_loosens_it(options, defaults, flag):
    claude = CLAUDE.model_copy(update={"defaults": defaults})
    plan = plan_of(run(limits={"maxCostUSD": 0.75}), claude, 1, "c", options, "P", None)
    assert plan.args.count("--max-budget-usd") == 1
    assert plan.args[plan.args.index("--max-budget-usd") + 1] == flag


def test_env_and_credentials_merge_run_over_definition():
    d = definition(
        env=[{"name": "BASE_URL", "value": "def"}, {"name": "MODE", "value": "x"}],
        credentials=[{"env": "API_KEY", "secretKeyRef": {"name": "s", "key": "k"}}],
    )
    r = run(
        env=[{"name": "BASE_URL", "value": "run"}],
        credentials=[{"env": "OTHER", "secretKeyRef": {"name": "s2", "key": "k"}, "optional": True}],
    )
    plan = plan_of(r, d, 1, "p", {}, "P", None)
    assert {e.name: e.value for e in plan.env} == {"BASE_URL": "run", "MODE": "x"}
    assert plan.credential_envs == ["API_KEY", "OTHER"]
    assert plan.optional_credential_envs == ["OTHER"]
    assert "s2" not in plan.to_json()  # secret references stay out of the plan; only names go in


def test_limits_pricing_format_and_working_dir_travel():
    d = definition(output={"format": "codex-jsonl"}, pricing={"gpt": {"input": 1.25, "output": 10}})
    r = run(limits={"timeoutSeconds": 5, "maxTurns": 3}, workspace={"workingDir": "/w"})
    plan = plan_of(r, d, 2, "codex", {}, "P", None, position=1)
    assert plan.output_format == "codex-jsonl"
    assert plan.pricing["gpt"].output == 10
    assert (plan.limits.timeout_seconds, plan.limits.max_turns) == (5, 3)
    assert plan.working_dir == "/w"
    assert plan.grace_seconds == 30


def test_json_round_trip():
    plan = plan_of(run(limits={"maxCostUSD": 1}), CLAUDE, 1, "c", {}, "P", "S")
    assert load_plan(plan.to_json()) == plan
    assert '"maxCostUSD": 1' in plan.to_json()


def test_attempt_plans_follow_the_fallback_chain_with_their_own_options():
    r = run(**{"with": {"model": "a"}, "fallback": [{"provider": "q", "with": {"effort": "low"}}]})
    defs = {"p": definition(binary="pa"), "q": definition(binary="qa")}
    plans = chain_plans(r, defs.get, "P", None)
    assert [(p.attempt, p.total_attempts, p.provider, p.argv) for p in plans] == [
        (1, 2, "p", ["pa", "P", "--model", "a"]),
        (2, 2, "q", ["qa", "P", "--effort", "low"]),
    ]


def test_a_providers_retries_are_attempts_of_their_own_with_its_options():
    r = run(
        **{"with": {"model": "a"}, "fallback": [{"provider": "q", "with": {"effort": "low"}}]},
        retry={"limit": 1},
    )
    defs = {"p": definition(binary="pa"), "q": definition(binary="qa")}
    plans = chain_plans(r, defs.get, "P", None)
    assert [(p.attempt, p.total_attempts, p.provider, p.argv) for p in plans] == [
        (1, 4, "p", ["pa", "P", "--model", "a"]),
        (2, 4, "p", ["pa", "P", "--model", "a"]),
        (3, 4, "q", ["qa", "P", "--effort", "low"]),
        (4, 4, "q", ["qa", "P", "--effort", "low"]),
    ]


def test_a_retried_fallbacks_bad_option_is_named_by_the_fallbacks_field():
    the_run = run(fallback=[{"provider": "q", "with": {"model": "a\x00"}}], retry={"limit": 2})
    with pytest.raises(PlanError) as caught:
        chain_plans(the_run, lambda name: definition(), "p", None)
    assert caught.value.message.startswith("spec.fallback[0].with.model:")


def test_unknown_provider_is_an_error():
    with pytest.raises(Rejection, match='unknown provider "q"'):
        chain_plans(run(fallback=[{"provider": "q"}]), {"p": definition()}.get, "P", None)


def test_attempt_is_one_based():
    with pytest.raises(ValueError):
        AttemptPlan(attempt=0, total_attempts=1, provider="p", binary="b")


def test_output_limit_defaults_only_when_the_run_sets_none():
    plan = AttemptPlan(attempt=1, total_attempts=1, provider="p", binary="b")
    assert with_output_limit(plan, 1000).limits.max_output_bytes == 1000
    own = plan.model_copy(update={"limits": plan.limits.model_copy(update={"max_output_bytes": 10})})
    assert with_output_limit(own, 1000).limits.max_output_bytes == 10


BIG = "x" * 131_072  # with its NUL, one byte over MAX_ARG_STRLEN
FITS = "x" * 131_071


@pytest.mark.parametrize(
    ("defn", "options", "prompt", "stdin", "reason", "words"),
    [
        (definition(), {}, FITS, None, None, None),
        (definition(), {}, BIG, None, "PromptTooLarge", "the prompt is 131072 bytes"),
        (definition(promptMode="flag", promptFlag="-p"), {}, BIG, None, "PromptTooLarge", "promptMode: flag"),
        (definition(promptMode="stdin"), {}, BIG, None, None, None),
        (definition(), {}, "short", BIG, None, None),
        (definition(stdinMode="fold"), {}, "short", BIG, "PromptTooLarge", "folded in (stdinMode: fold)"),
        (definition(promptMode="stdin", stdinMode="fold"), {}, "short", BIG, None, None),
        (definition(), {}, "a\x00b", None, "InvalidArgument", "the prompt contains a NUL byte"),
        (definition(promptMode="stdin"), {}, "a\x00b", None, None, None),
        (
            definition(),
            {"model": "a\x00b"},
            "p",
            None,
            "InvalidArgument",
            "spec.with.model: the value contains",
        ),
        (definition(), {"add_dir": ["ok", "b\x00"]}, "p", None, "InvalidArgument", "spec.with.add_dir"),
        (
            definition(),
            {"context": BIG},
            "p",
            None,
            "InvalidArgument",
            "spec.with.context: the value is 131072",
        ),
        (definition(), {"nested": {"map": "a\x00"}}, "p", None, None, None),
        (definition(defaults={"m": "a\x00"}), {}, "p", None, "InvalidArgument", "defaults.m of provider 'p'"),
        (definition(prefixArgs=["a\x00"]), {}, "p", None, "InvalidArgument", "prefixArgs[0] of provider"),
        (
            definition(env=[{"name": "X", "value": "a\x00"}]),
            {},
            "p",
            None,
            "InvalidArgument",
            "env of provider",
        ),
    ],
    ids=[
        "prompt at the limit",
        "prompt over the limit",
        "flag prompt over the limit",
        "stdin prompt: no limit",
        "large stdin piped",
        "large stdin folded into the argument",
        "folded but piped",
        "NUL in an arg prompt",
        "NUL in a piped prompt",
        "NUL in a with value",
        "NUL in a with list item",
        "huge with value",
        "maps never become arguments",
        "NUL in a definition default",
        "NUL in prefixArgs",
        "NUL in a definition env value",
    ],
)
def test_arguments_no_exec_can_carry_are_refused_at_plan_time(
    defn: HarnessDefinitionSpec,
    options: dict[str, Any],
    prompt: str,
    stdin: str | None,
    reason: str | None,
    words: str | None,
) -> None:
    if reason is None:
        plan_of(run(), defn, 1, "p", options, prompt, stdin)
        return
    with pytest.raises(PlanError) as caught:
        plan_of(run(), defn, 1, "p", options, prompt, stdin)
    assert caught.value.reason == reason
    assert words is not None and words in caught.value.message


def test_prompt_too_large_says_how_to_fix_it_and_that_fold_does_not() -> None:
    with pytest.raises(PlanError) as caught:
        plan_of(run(), definition(), 1, "p", {}, BIG, None)
    assert "promptMode: stdin" in caught.value.message
    assert "stdinMode: fold would put it back into the prompt argument" in caught.value.message


def test_a_fallbacks_options_are_named_by_their_field() -> None:
    the_run = run(fallback=[{"provider": "q", "with": {"model": "a\x00"}}])
    with pytest.raises(PlanError) as caught:
        chain_plans(the_run, lambda name: definition(), "p", None)
    assert caught.value.message.startswith("spec.fallback[0].with.model:")


def test_a_nul_in_the_runs_env_names_spec_env() -> None:
    with pytest.raises(PlanError) as caught:
        plan_of(run(env=[{"name": "X", "value": "a\x00"}]), definition(), 1, "p", {}, "p", None)
    assert caught.value.message == "spec.env: 'X' contains a NUL byte"


def test_an_acp_plan_is_a_session_not_a_cli_invocation():
    acp = definition(
        protocol="acp", binary="claude-code-acp", prefixArgs=["--stdio"], env=[{"name": "A", "value": "1"}]
    )
    plan = plan_of(run(acpPermission="allow"), acp, 1, "p", {"model": "m"}, "P" * 200000, "IN")
    assert plan.argv == ["claude-code-acp", "--stdio", "--model", "m"]  # the prompt is not an argument
    assert plan.stdin is None
    assert plan.acp is not None
    assert plan.acp.prompt == "P" * 200000 + "\n\nIN"  # stdin after a blank line
    assert (plan.acp.transport, plan.acp.permission) == ("stdio", "allow")
    assert load_plan(plan.to_json()) == plan


def test_a_remote_acp_plan_starts_nothing_and_grants_its_secrets():
    acp = HarnessDefinitionSpec.model_validate(
        {
            "protocol": "acp",
            "transport": "http",
            "url": "https://127.0.0.1:8443/acp",
            "cwd": "/srv/work",
            "headers": [
                {"name": "X-Team", "value": "a"},
                {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "bearer"}}},
            ],
            "caBundleSecretRef": {"name": "ca", "key": "ca.crt"},
        }
    )
    plan = plan_of(run(), acp, 1, "p", {}, "P", None)
    assert (plan.binary, plan.args) == ("", [])
    assert plan.acp is not None and (plan.acp.url, plan.acp.cwd) == (
        "https://127.0.0.1:8443/acp",
        "/srv/work",
    )
    assert [(h.name, h.value, h.credential_env) for h in plan.acp.headers] == [
        ("X-Team", "a", None),
        ("Authorization", None, "HARNESS_ACP_HEADER_1"),
    ]
    assert plan.acp.ca_bundle_env == "HARNESS_ACP_CA_BUNDLE"
    assert plan.credential_envs == ["HARNESS_ACP_CA_BUNDLE", "HARNESS_ACP_HEADER_1"]


def test_a_cli_plan_needs_a_binary():
    with pytest.raises(ValueError, match="binary is required"):
        AttemptPlan.model_validate({"attempt": 1, "total_attempts": 1, "provider": "p"})


SCHEMA = {"type": "object", "required": ["verdict"], "properties": {"verdict": {"enum": ["ok", "no"]}}}
SCHEMA_TEXT = '{"properties":{"verdict":{"enum":["ok","no"]}},"required":["verdict"],"type":"object"}'


def test_a_native_inline_schema_option_goes_right_after_the_prefix_args():
    native = definition(
        prefixArgs=["-p"],
        outputSchemaOption={"flag": "--json-schema"},
        capabilities={"structuredOutput": True},
    )
    plan = plan_of(run(outputSchema=SCHEMA), native, 1, "p", {"model": "m"}, "P", None)
    assert plan.argv == ["agent", "-p", "--json-schema", SCHEMA_TEXT, "P", "--model", "m"]
    assert plan.home_files == {}


def test_a_native_file_schema_option_names_the_home_file_the_runner_writes():
    native = definition(
        prefixArgs=["exec"],
        outputSchemaOption={"flag": "--output-schema", "form": "file"},
        capabilities={"structuredOutput": True},
    )
    plan = plan_of(run(outputSchema=SCHEMA), native, 1, "p", {}, "P", None)
    assert plan.argv == ["agent", "exec", "--output-schema", home_path_arg(OUTPUT_SCHEMA_HOME_FILE), "P"]
    assert plan.home_files == {OUTPUT_SCHEMA_HOME_FILE: SCHEMA_TEXT}


def test_without_a_schema_or_a_native_option_nothing_is_passed():
    native = definition(outputSchemaOption={"flag": "--json-schema"}, capabilities={"structuredOutput": True})
    assert plan_of(run(), native, 1, "p", {}, "P", None).argv == ["agent", "P"]
    assert plan_of(run(outputSchema=SCHEMA), definition(), 1, "p", {}, "P", None).argv == ["agent", "P"]


def test_a_reprompt_continues_the_session_with_the_correction_alone_where_the_cli_can():
    pi = definition(
        promptMode="flag", promptFlag="-p", continueArgs=["--continue"], defaults={"mode": "json"}
    )
    plan = plan_of(run(outputSchema=SCHEMA, outputReprompts=2), pi, 1, "pi", {}, "P", "IN")
    assert plan.argv == ["agent", "-p", "P", "--mode", "json"]
    assert plan.reprompt_args == ["--continue", "-p", REPROMPT_TEXT, "--mode", "json"]
    assert plan.reprompt_stdin is None  # the session has read the run's stdin already
    assert (plan.output_schema, plan.output_reprompts) == (SCHEMA, 2)


def test_a_reprompt_starts_afresh_with_the_prompt_and_the_correction_elsewhere():
    plan = plan_of(run(outputSchema=SCHEMA, outputReprompts=1), definition(), 1, "p", {}, "P", "IN")
    assert plan.reprompt_args == [f"P\n\n{REPROMPT_TEXT}"]
    assert plan.reprompt_stdin == "IN"


def test_no_reprompt_without_outputreprompts_and_none_for_an_acp_session():
    assert plan_of(run(outputSchema=SCHEMA), definition(), 1, "p", {}, "P", None).reprompt_args == []
    acp = definition(protocol="acp")
    plan = plan_of(run(outputSchema=SCHEMA, outputReprompts=1), acp, 1, "p", {}, "P", None)
    assert (plan.reprompt_args, plan.output_reprompts, plan.output_schema) == ([], 0, None)
