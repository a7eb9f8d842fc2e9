"""import_dagu: harnesses and the DAG-level harness: block by Dagu's rules, one step as a run and several
as a pipeline (outputs as step references, order as after), params, retries, schedules."""

from typing import Any

import pytest
import yaml
from tests.fakes.dagu import DAGS, expand_runs, imported_runs

from harness_operator.api.v1alpha1 import HarnessRun, HarnessSchedule
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.dagu_import import (
    dns_name,
    import_dagu,
    merge_harness_config,
    normalize_builtin_keys,
    unique_name,
)
from harness_operator.cli.manifests import parse_documents
from harness_operator.cli.validation import ERROR, validate_documents

DAG = yaml.safe_load(
    """
type: graph
working_dir: /repo
harnesses:
  my_agent:
    binary: /usr/local/bin/my-agent
    prompt_mode: flag
    prompt_flag: --task
    prompt_position: after_flags
    flag_style: single_dash
    option_flags:
      max_turns: --turns
steps:
  - id: review
    action: harness.run
    with:
      provider: my_agent
      prompt: Review this patch for correctness.
      stdin: |
        diff --git a/main.go b/main.go
      max_turns: 3
      fallback:
        - provider: codex
          model: gpt-5-codex
    output: REVIEW_RESULT
  - id: summarize
    depends: review
    action: harness.run
    with:
      provider: claude
      prompt: Summarize the review on stdin.
      stdin: ${REVIEW_RESULT}
  - id: mixed
    action: harness.run
    with:
      provider: claude
      prompt: "Fix what ${REVIEW_RESULT} says, for ${TEAM}"
    retry_policy: {limit: 2}
    depends: [print]
  - id: print
    command: echo done
    depends: [summarize]
  - id: other
    type: harness
    command: "Say ${TEAM}"
    with: {provider: claude}
    retry_policy: {limit: 1}
"""
)


def runs(dag: dict[str, Any], name: str = "d", **kwargs: Any) -> dict[str, dict[str, Any]]:
    """The run spec of each harness step: the DAG's one HarnessRun, or each step of its pipeline."""
    result = import_dagu(dag, name, **kwargs)
    assert result.errors == []
    found = {m["metadata"]["name"]: m["spec"] for m in result.manifests if m["kind"] == "HarnessRun"}
    for pipeline in (m for m in result.manifests if m["kind"] == "HarnessPipeline"):
        found |= {s["name"]: s["run"]["spec"] for s in pipeline["spec"]["steps"]}
    return found


def steps(dag: dict[str, Any], name: str = "d", **kwargs: Any) -> dict[str, dict[str, Any]]:
    """The steps of the DAG's pipeline, by name, without their runs."""
    result = import_dagu(dag, name, **kwargs)
    assert result.errors == []
    (pipeline,) = [m for m in result.manifests if m["kind"] == "HarnessPipeline"]
    return {s["name"]: {k: v for k, v in s.items() if k != "run"} for s in pipeline["spec"]["steps"]}


def test_definitions_and_one_pipeline_of_the_harness_steps() -> None:
    result = import_dagu(DAG, "nightly")
    kinds = [(m["kind"], m["metadata"]["name"]) for m in result.manifests]
    assert kinds == [("HarnessDefinition", "my-agent"), ("HarnessPipeline", "nightly")]
    pipeline = result.manifests[1]["spec"]
    assert pipeline["serviceAccountName"] == "harness-pipeline"
    assert [s["name"] for s in pipeline["steps"]] == ["review", "summarize", "mixed", "other"]
    assert result.manifests[0]["spec"] == {
        "binary": "/usr/local/bin/my-agent",
        "promptMode": "flag",
        "promptFlag": "--task",
        "promptPosition": "afterFlags",
        "flagStyle": "singleDash",
        "optionFlags": {"max_turns": "--turns"},
    }
    assert pipeline["steps"][0]["run"]["spec"] == {
        "provider": "my-agent",
        "prompt": "Review this patch for correctness.",
        "stdin": "diff --git a/main.go b/main.go\n",
        "fallback": [{"provider": "codex", "with": {"model": "gpt-5-codex"}}],
        "with": {"max_turns": 3},
        "workspace": {"workingDir": "/repo"},
    }


def test_an_output_consumed_whole_becomes_the_step_reference() -> None:
    assert runs(DAG, "nightly")["summarize"]["stdin"] == "$(steps.review.output)"
    assert steps(DAG, "nightly")["summarize"] == {"name": "summarize", "after": ["review"]}


def test_an_output_inside_a_prompt_becomes_a_step_reference() -> None:
    mixed = runs(DAG, "nightly")["mixed"]
    assert mixed["prompt"] == "Fix what $(steps.review.output) says, for ${TEAM}"
    assert "inputs" not in mixed


def test_a_retry_policy_becomes_spec_retry_of_any_failure() -> None:
    imported = runs(DAG, "nightly")
    # Dagu's interval is constant: the most is the first.
    assert imported["mixed"]["retry"] == {"limit": 2, "retryOn": "Any", "maxBackoffSeconds": 10}
    assert imported["other"]["retry"] == {"limit": 1, "retryOn": "Any", "maxBackoffSeconds": 10}


@pytest.mark.parametrize(
    ("policy", "retry", "note"),
    [
        ({"limit": 3, "interval_sec": 30}, {"limit": 3, "backoffSeconds": 30, "maxBackoffSeconds": 30}, None),
        (
            {"limit": 2, "interval_sec": 5, "backoff": True, "max_interval_sec": 60},
            {"limit": 2, "backoffSeconds": 5, "maxBackoffSeconds": 60},
            None,
        ),
        ({"limit": 9, "interval_sec": 1, "backoff": 2.0}, {"limit": 5, "backoffSeconds": 1}, "at most 5"),
        ({"limit": 1, "backoff": 1.5}, {"limit": 1}, "retry_policy.backoff: 1.5"),
        (
            {"limit": 1, "exit_code": [2, 75]},
            {"limit": 1, "exitCodes": [2, 75], "maxBackoffSeconds": 10},
            None,
        ),
        ({"limit": 1, "exit_code": []}, {"limit": 1, "maxBackoffSeconds": 10}, None),  # Dagu: any code
        (
            {"limit": 1, "exit_code": [-1, 2, 300]},
            {"limit": 1, "exitCodes": [2], "maxBackoffSeconds": 10},
            "retry_policy.exit_code: codes outside 1-255 dropped",
        ),
        ({"limit": 1, "exit_code": [0]}, None, "retry_policy.exit_code: no code left"),
        ({"limit": "${N}"}, None, "retry_policy.limit: not a positive number"),
    ],
)
def test_retry_policies_map_onto_spec_retry_and_say_what_does_not(
    policy: dict[str, Any], retry: dict[str, Any] | None, note: str | None
) -> None:
    dag = {"steps": [{"id": "s", "type": "harness", "command": "hi", "with": {"provider": "claude"},
                      "retry_policy": policy}]}  # fmt: skip
    result = import_dagu(dag, "d")
    assert result.manifests[0]["spec"].get("retry") == (retry and {**retry, "retryOn": "Any"})
    if note is not None:
        assert any(line.startswith(note) or note in line for line in result.unsupported), result.unsupported
    else:
        assert result.unsupported == []
    imported = HarnessRun.model_validate(result.manifests[0])  # what the importer writes, the API takes
    assert (imported.spec.retry is None) == (retry is None)


def test_a_retry_policy_with_a_fallback_says_dagu_retries_the_whole_chain() -> None:
    dag = {"steps": [{"id": "s", "type": "harness", "command": "hi", "retry_policy": {"limit": 1},
                      "with": {"provider": "claude", "fallback": [{"provider": "codex"}]}}]}  # fmt: skip
    result = import_dagu(dag, "d")
    assert result.manifests[0]["spec"]["retry"]["retryOn"] == "Any"
    assert result.unsupported == [
        "retry_policy with fallback: Dagu retries the whole chain (each provider, then all again); "
        "spec.retry retries each provider before the next (steps: s)"
    ]


def test_depends_through_a_step_not_imported_keeps_the_order() -> None:
    imported = steps(DAG, "nightly")
    assert imported["mixed"]["after"] == ["summarize"]
    assert "after" not in imported["other"]  # a graph DAG's step without depends: starts at once


def test_unsupported_parts_are_listed_once_with_their_steps() -> None:
    assert import_dagu(DAG, "nightly").unsupported == [
        "prompt: ${TEAM} names no output, parameter or env entry; kept verbatim (steps: mixed, other)",
        "not a harness step; not imported (steps: print)",
    ]


ONE_STEP = {
    "steps": [
        {"name": "review", "type": "harness", "command": "Review main.", "with": {"provider": "claude"}}
    ],
}


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("0 2 * * 1-5", [("0 2 * * 1-5", None)]),
        ("CRON_TZ=Asia/Tokyo @daily", [("@daily", "Asia/Tokyo")]),
        (
            ["TZ=Europe/Berlin 0 2 * * *", "30 14 * * *"],
            [("0 2 * * *", "Europe/Berlin"), ("30 14 * * *", None)],
        ),
        ({"start": "0 3 * * *", "stop": "0 5 * * *"}, [("0 3 * * *", None)]),
    ],
)
def test_a_schedule_makes_the_one_run_a_forbid_schedules_template(schedule: Any, expected: list[Any]) -> None:
    result = import_dagu({**ONE_STEP, "schedule": schedule}, "nightly")
    assert result.errors == []
    assert [m["kind"] for m in result.manifests] == ["HarnessSchedule"] * len(expected)  # no run at once
    for index, (manifest, (cron, zone)) in enumerate(zip(result.manifests, expected, strict=True)):
        HarnessSchedule.model_validate(manifest)  # one the API server takes
        assert manifest["metadata"]["name"] == (
            "nightly-review" if index == 0 else f"nightly-review-{index + 1}"
        )
        spec = manifest["spec"]
        assert (spec["schedule"], spec.get("timeZone"), spec["concurrencyPolicy"]) == (cron, zone, "Forbid")
        assert spec["runTemplate"]["spec"] == {"provider": "claude", "prompt": "Review main."}
    if isinstance(schedule, dict):
        assert "schedule.stop: HarnessSchedules only start runs; not imported" in result.unsupported


@pytest.mark.parametrize(
    ("schedule", "error"),
    [
        ("61 * * * *", "schedule: '61 * * * *': '61 * * * *' is not a valid cron schedule"),
        ("TZ=Mars/Olympus 0 2 * * *", "schedule: 'TZ=Mars/Olympus 0 2 * * *': 'Mars/Olympus' is not an IANA"),
        ({"start": 5}, "schedule: not a cron expression, a list of them, or a map with start:"),
    ],
)
def test_a_schedule_the_crd_would_refuse_is_an_error(schedule: Any, error: str) -> None:
    result = import_dagu({**ONE_STEP, "schedule": schedule}, "nightly")
    assert [e for e in result.errors if e.startswith(error)], result.errors
    assert [m["kind"] for m in result.manifests] == ["HarnessRun"]


def test_an_every_schedule_is_listed_and_the_run_kept() -> None:
    result = import_dagu({**ONE_STEP, "schedule": "@every 1h"}, "nightly")
    assert "schedule: '@every 1h': @every has no cron equivalent; not imported" in result.unsupported
    assert [m["kind"] for m in result.manifests] == ["HarnessRun"]


PARAMS_DAG = {
    "env": {"REPO": "acme/shop", "TARGET": "${REPO}@${BRANCH}", "NOW": "`date`"},
    "steps": [
        {
            "type": "harness",
            "command": "Review ${BRANCH} of ${env.TARGET} (${params.MISSING})",
            "with": {"provider": "claude", "model": "${MODEL}"},
        }
    ],
}


@pytest.mark.parametrize(
    "params",
    [
        "BRANCH=main MODEL='claude sonnet' 7",  # Dagu's string form; a positional value has no name
        ["BRANCH=main", "MODEL=claude sonnet"],
        [{"BRANCH": "main"}, {"MODEL": "claude sonnet"}],
        [{"name": "BRANCH", "default": "main"}, {"name": "MODEL", "default": "claude sonnet"}],
        {"BRANCH": "main", "MODEL": "claude sonnet"},
    ],
)
def test_params_and_env_become_literal_inputs_in_prompts_and_values_in_options(params: Any) -> None:
    result = import_dagu({**PARAMS_DAG, "params": params}, "n")
    assert result.errors == []
    (run,) = [m for m in result.manifests if m["kind"] == "HarnessRun"]
    assert run["spec"]["prompt"] == "Review $(inputs.BRANCH) of $(inputs.TARGET) (${params.MISSING})"
    assert run["spec"]["inputs"] == [
        {"name": "BRANCH", "value": "main"},
        {"name": "TARGET", "value": "acme/shop@main"},  # env entries see the params and earlier entries
    ]
    assert run["spec"]["with"] == {"model": "claude sonnet"}  # options take the value in place
    if isinstance(params, str):
        assert "params: positional parameter 3 ('7') has no name; not imported" in result.unsupported
    assert "env: NOW runs a command (`...`); its text is imported verbatim" in result.unsupported
    assert not any(
        line.startswith(("params:", "env:")) and "DAG-level" in line for line in result.unsupported
    )
    assert any(
        "${params.MISSING} names no output, parameter or env entry" in line for line in result.unsupported
    )


def test_a_param_given_on_import_wins_and_one_without_a_value_is_an_error() -> None:
    dag = {**PARAMS_DAG, "params": [{"name": "BRANCH"}, {"name": "MODEL", "default": "opus"}]}
    assert import_dagu(dag, "n").errors == [
        "params: BRANCH has no default; give its value on import (--param BRANCH=VALUE)"
    ]
    given = import_dagu(dag, "n", params={"BRANCH": "release"})
    (run,) = [m for m in given.manifests if m["kind"] == "HarnessRun"]
    assert run["spec"]["inputs"][0] == {"name": "BRANCH", "value": "release"}
    assert import_dagu(dag, "n", params={"BRANCH": "x", "TYPO": "y"}).errors == [
        "--param TYPO: the DAG declares no such parameter"
    ]


@pytest.mark.parametrize(
    ("dag", "error"),
    [
        ({"params": ["BRANCH"]}, "params[0]: not NAME=value, {NAME: value} or {name: NAME, default: value}"),
        ({"params": {"1X": "a"}}, "params: '1X' is not a parameter name (letters, digits and '_')"),
        (
            {"env": [{"A": 1, "B": 2}]},
            "env[0]: not NAME=value, {NAME: value} or {name: NAME, default: value}",
        ),
        ({"env": {"A-B": "x"}}, "env: 'A-B' is not an environment variable name"),
    ],
)
def test_params_and_env_shapes_dagu_refuses_are_errors(dag: dict[str, Any], error: str) -> None:
    assert import_dagu({**dag, "steps": []}, "n").errors == [error]


def test_chain_dags_run_each_step_after_the_one_before() -> None:
    dag = {
        "steps": [
            {"name": "a", "type": "harness", "command": "A", "with": {"provider": "claude"}},
            {"name": "b", "command": "echo between"},
            {"name": "c", "type": "harness", "command": "C", "with": {"provider": "claude"}},
            {"name": "d", "type": "harness", "command": "D", "with": {"provider": "claude"}},
        ]
    }
    assert [step.get("after") for step in steps(dag).values()] == [None, ["a"], ["c"]]


# Dagu's own cases for the DAG-level harness: block (internal/core/spec/builder_test.go,
# TestHarnessInheritance), as HarnessRun specs.
DAG_HARNESS = {
    "provider": "claude",
    "model": "sonnet",
    "bare": True,
    "fallback": [{"provider": "codex", "full-auto": True}],
}
CODEX_FALLBACK = [{"provider": "codex", "with": {"full-auto": True}}]


@pytest.mark.parametrize(
    ("harness", "step", "expected"),
    [
        pytest.param(
            DAG_HARNESS,
            {"type": "harness", "command": "Write tests"},
            {"provider": "claude", "with": {"model": "sonnet", "bare": True}, "fallback": CODEX_FALLBACK},
            id="the step inherits the DAG's harness",
        ),
        pytest.param(
            DAG_HARNESS,
            {"type": "harness", "command": "Fix bugs", "with": {"model": "opus", "effort": "high"}},
            {
                "provider": "claude",
                "with": {"model": "opus", "effort": "high", "bare": True},
                "fallback": CODEX_FALLBACK,
            },
            id="the step's keys win, the DAG's fill the rest and its fallback stays",
        ),
        pytest.param(
            {"provider": "codex", "skip_git_repo_check": True},
            {"type": "harness", "command": "Fix bugs", "with": {"skip-git-repo-check": False}},
            {"provider": "codex", "with": {"skip-git-repo-check": False}},
            id="built-in keys are kebab-cased before merging: no duplicate",
        ),
        pytest.param(
            DAG_HARNESS,
            {
                "type": "harness",
                "command": "Generate docs",
                "with": {"provider": "copilot", "fallback": [{"provider": "claude", "model": "haiku"}]},
            },
            {
                "provider": "copilot",
                "with": {"model": "sonnet", "bare": True},
                "fallback": [{"provider": "claude", "with": {"model": "haiku"}}],
            },
            id="a step-level fallback replaces the DAG's",
        ),
        pytest.param(
            DAG_HARNESS,
            {"type": "harness", "command": "No retries", "with": {"fallback": []}},
            {"provider": "claude", "with": {"model": "sonnet", "bare": True}},
            id="an empty step-level fallback removes the DAG's",
        ),
        pytest.param(
            {"provider": "claude", "model": "sonnet"},
            {"command": "Write tests"},
            {"provider": "claude", "with": {"model": "sonnet"}},
            id="a step without type is a harness step when the DAG has harness:",
        ),
    ],
)
def test_dag_level_harness(harness: dict[str, Any], step: dict[str, Any], expected: dict[str, Any]) -> None:
    [spec] = runs({"harness": harness, "steps": [{"name": "s", **step}]}).values()
    assert {k: v for k, v in spec.items() if k != "prompt"} == expected


def test_an_explicit_type_overrides_the_dag_harness() -> None:
    dag = {"harness": {"provider": "claude"}, "steps": [{"name": "s", "type": "command", "command": "echo"}]}
    result = import_dagu(dag, "d")
    assert result.manifests == []
    assert result.unsupported == ["not a harness step; not imported (steps: s)"]


def test_a_custom_harness_from_the_registry_serves_the_dag_harness() -> None:
    dag = {
        "harnesses": {
            "gemini": {
                "binary": "gemini",
                "prefix_args": ["run"],
                "prompt_mode": "flag",
                "prompt_flag": "--prompt",
            }
        },
        "harness": {"provider": "gemini"},
        "steps": [{"name": "s", "command": "Review this repository", "with": {"max_turns": 2}}],
    }
    result = import_dagu(dag, "d")
    assert result.manifests[0]["spec"] == {
        "binary": "gemini",
        "prefixArgs": ["run"],
        "promptMode": "flag",
        "promptFlag": "--prompt",
    }
    # a custom harness is not a built-in: its keys are not kebab-cased
    assert result.manifests[1]["spec"]["with"] == {"max_turns": 2}


def test_normalize_builtin_keys_prefers_the_kebab_spelling() -> None:
    assert normalize_builtin_keys({"max_turns": 1, "max-turns": 2, "provider": "c"}) == {
        "max-turns": 2,
        "provider": "c",
    }
    assert normalize_builtin_keys({"a_b": 1, "a_b_": 2}) == {"a-b": 1, "a-b-": 2}


def test_merge_harness_config_without_a_dag_block_only_normalizes() -> None:
    assert merge_harness_config(None, {"provider": "codex", "full_auto": True}, {"codex"}) == {
        "provider": "codex",
        "full-auto": True,
    }


@pytest.mark.parametrize(
    ("dag", "error"),
    [
        pytest.param(
            {"steps": [{"name": "s", "type": "harness", "command": "x", "with": {"provider": "gemini2"}}]},
            'steps[0] (s).provider: unknown provider "gemini2"',
            id="unknown provider",
        ),
        pytest.param(
            {"harnesses": {"g": {"binary": "g", "prompt_mode": "stdin", "prompt_flag": "--p"}}, "steps": []},
            "harnesses.g.prompt_flag: required when prompt_mode is flag, and only then",
            id="prompt_flag outside flag mode",
        ),
        pytest.param(
            {"harnesses": {"g": {"binary": "g", "env_file": ".env"}}, "steps": []},
            "harnesses.g.env_file: unknown harness definition key",
            id="unknown harness key",
        ),
        pytest.param(
            {"harness": {"provider": "claude", "binary": "/bin/x"}, "steps": []},
            "harness.binary: not supported; define a named harness under harnesses: and reference it via provider",
            id="binary in the DAG block",
        ),
        pytest.param(
            {"harness": {"model": "sonnet"}, "steps": []},
            "harness.provider: required",
            id="DAG block without provider",
        ),
        pytest.param(
            {
                "harness": {"provider": "claude", "fallback": [{"provider": "codex", "fallback": []}]},
                "steps": [],
            },
            "harness.fallback[0].fallback: not supported inside fallback providers",
            id="nested fallback",
        ),
        pytest.param(
            {"steps": [{"name": "a", "command": "x"}, {"name": "b", "command": "y", "depends": ["a"]}]},
            "steps[1] (b).depends: not allowed in a chain DAG (Dagu's default type, where each step follows the one before); set type: graph",
            id="depends in a chain DAG",
        ),
    ],
)
def test_what_dagu_refuses_is_an_error(dag: dict[str, Any], error: str) -> None:
    assert error in import_dagu(dag, "d").errors


def test_base_config_harnesses_are_inherited_and_null_removes_one() -> None:
    base = {
        "harnesses": {
            "keep": {"binary": "keep-cli"},
            "drop": {"binary": "drop-cli"},
            "swap": {"binary": "old-cli", "prefix_args": ["x"]},
        }
    }
    dag = {"harnesses": {"drop": None, "swap": {"binary": "new-cli"}}, "steps": []}
    result = import_dagu(dag, "d", base=base)
    assert {m["metadata"]["name"]: m["spec"] for m in result.manifests} == {
        "keep": {"binary": "keep-cli"},
        "swap": {"binary": "new-cli"},
    }
    removed = {"steps": [{"name": "s", "type": "harness", "command": "x", "with": {"provider": "drop"}}]}
    assert import_dagu({**dag, **removed}, "d", base=base).errors == [
        'steps[0] (s).provider: unknown provider "drop"'
    ]


def test_names_are_unique_and_dns_safe() -> None:
    dag = {
        "harnesses": {"My_Agent": {"binary": "a"}, "my-agent": {"binary": "b"}},
        "steps": [
            {"name": "Fix Bugs", "type": "harness", "command": "x", "with": {"provider": "My_Agent"}},
            {"name": "fix_bugs", "type": "harness", "command": "y", "with": {"provider": "my-agent"}},
        ],
    }
    result = import_dagu(dag, "nightly")
    assert [m["metadata"]["name"] for m in result.manifests] == ["my-agent", "my-agent-2", "nightly"]
    assert [(s["name"], s["run"]["spec"]["provider"]) for s in result.manifests[2]["spec"]["steps"]] == [
        ("fix-bugs", "my-agent"),
        ("fix-bugs-2", "my-agent-2"),
    ]
    one = import_dagu({"steps": dag["steps"][:1]}, "nightly")
    assert one.manifests[0]["metadata"]["name"] == "nightly-fix-bugs"  # a DAG of one step: a run


def test_unique_name_and_dns_name() -> None:
    taken = {"x" * 63}
    assert unique_name("x" * 70, taken) == "x" * 61 + "-2"
    assert dns_name("My_Agent v2") == "my-agent-v2"
    assert len(dns_name("x" * 100)) == 63
    assert dns_name("___") == "unnamed"


def test_timeout_sec_becomes_the_timeout_limit() -> None:
    dag = {
        "steps": [
            {
                "name": "s",
                "type": "harness",
                "command": "x",
                "with": {"provider": "claude"},
                "timeout_sec": 300,
            }
        ]
    }
    assert runs(dag)["d-s"]["limits"] == {"timeoutSeconds": 300}


@pytest.mark.parametrize("name", DAGS)
def test_fixture_dags_import_into_runs_validate_accepts(name: str) -> None:
    docs = parse_documents(yaml.safe_dump_all(imported_runs(name)), name)
    errors = [f for f in validate_documents(docs, load_builtin_catalog()) if f.severity == ERROR]
    # Dagu's examples pass options the pinned CLIs no longer take (codex full-auto, copilot bare): the
    # attempt would fail, and validate says so; nothing else is refused.
    unknown = {
        (f.field.rsplit(".", 1)[-1], f.message.split('"')[1]) for f in errors if "has no option" in f.message
    }
    assert [f.render() for f in errors if "has no option" not in f.message] == []
    assert unknown <= {("full-auto", "codex"), ("bare", "copilot")}


def test_imported_runs_validate() -> None:
    result = import_dagu(DAG, "nightly")
    docs = parse_documents(yaml.safe_dump_all(expand_runs(result.manifests)), "out.yaml")
    errors = [f for f in validate_documents(docs, load_builtin_catalog()) if f.severity == ERROR]
    assert errors == []


def test_an_inline_output_schema_becomes_spec_output_schema_and_a_file_is_listed() -> None:
    schema = {"type": "object", "required": ["verdict"]}
    step = {**ONE_STEP["steps"][0], "output_schema": schema}
    assert runs({"steps": [step]}, "n")["n-review"]["outputSchema"] == schema
    by_file = import_dagu({"steps": [{**step, "output_schema": "schemas/review.json"}]}, "n")
    assert "output_schema: not an inline schema (a file or URL); not imported (steps: review)" in (
        by_file.unsupported
    )
    broken = import_dagu({"steps": [{**step, "output_schema": {"type": 5}}]}, "n")
    assert [
        e for e in broken.errors if e.startswith("steps[0] (review).output_schema: not a valid JSON Schema")
    ]
