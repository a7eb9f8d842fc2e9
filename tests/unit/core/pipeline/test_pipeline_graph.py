"""The pipeline's graph: order, matrix combinations and their bound, references, and every problem that
keeps a pipeline from running, each naming its field."""

from __future__ import annotations

from tests.unit.core.pipeline.conftest import make_pipeline

from harness_operator.api.v1alpha1 import StepMatrix
from harness_operator.core.pipeline.graph import (
    build_combinations,
    build_order,
    compute_pipeline_problems,
    count_combinations,
    find_step_references,
)


def test_order_puts_each_step_after_its_dependencies_and_keeps_the_spec_order_otherwise() -> None:
    p = make_pipeline(
        {"name": "summary", "prompt": "s", "after": ["review", "lint"]},
        {"name": "review", "prompt": "r"},
        {"name": "lint", "prompt": "l", "after": ["review"]},
        {"name": "free", "prompt": "f"},
    )
    assert build_order(p.spec) == ["review", "lint", "summary", "free"]


def test_a_cycle_is_a_problem_naming_each_step_in_it_and_left_out_of_the_order() -> None:
    p = make_pipeline(
        {"name": "a", "prompt": "x", "after": ["b"]},
        {"name": "b", "prompt": "x", "after": ["a"]},
        {"name": "c", "prompt": "x"},
    )
    assert build_order(p.spec) == ["c"]
    problems = compute_pipeline_problems(p.spec)
    assert problems == [
        "spec.steps[0].after: step a runs after itself (a cycle); remove one 'after'",
        "spec.steps[1].after: step b runs after itself (a cycle); remove one 'after'",
    ]


def test_combinations_are_providers_then_models_then_params_the_last_fastest() -> None:
    matrix = StepMatrix.model_validate(
        {
            "providers": ["claude", "codex"],
            "models": ["m1"],
            "params": [{"name": "lang", "values": ["go", "py"]}],
        }
    )
    assert build_combinations(matrix) == [
        {"provider": "claude", "model": "m1", "lang": "go"},
        {"provider": "claude", "model": "m1", "lang": "py"},
        {"provider": "codex", "model": "m1", "lang": "go"},
        {"provider": "codex", "model": "m1", "lang": "py"},
    ]
    assert count_combinations(matrix) == 4
    assert build_combinations(None) == [{}]
    assert count_combinations(None) == 1


def test_a_matrix_past_sixteen_runs_is_refused_without_building_it() -> None:
    values = [str(i) for i in range(16)]
    p = make_pipeline(
        {
            "name": "wide",
            "prompt": "x",
            "matrix": {"params": [{"name": "a", "values": values}, {"name": "b", "values": values}]},
        }
    )
    assert count_combinations(p.spec.steps[0].matrix) == 256
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[0].matrix: 256 combinations, more than 16 (a later step reads each run as one of its "
        "inputs, and a run takes at most 16); split the step or drop an axis"
    ]


def test_sixteen_runs_are_allowed() -> None:
    p = make_pipeline(
        {
            "name": "wide",
            "prompt": "$(matrix.a)",
            "matrix": {"params": [{"name": "a", "values": [str(i) for i in range(16)]}]},
        }
    )
    assert compute_pipeline_problems(p.spec) == []


def test_references_are_found_once_each_in_prompt_and_stdin() -> None:
    p = make_pipeline(
        {"name": "a", "prompt": "x"},
        {
            "name": "b",
            "after": ["a"],
            "prompt": "$(steps.a.output) and $(steps.a.output.verdict) and $(steps.a.output)",
            "spec": {"stdin": "$(steps.a.output.findings.0.file)"},
        },
    )
    refs = find_step_references(p.spec.steps[1])
    assert [(r.step, r.path) for r in refs] == [("a", None), ("a", "verdict"), ("a", "findings.0.file")]


def test_a_reference_to_a_step_not_run_after_or_unknown_or_misspelt_is_a_problem() -> None:
    p = make_pipeline(
        {"name": "a", "prompt": "x"},
        {"name": "b", "prompt": "$(steps.a.output) $(steps.zz.output) $(steps.a.outputs) $(matrix.lang)"},
    )
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[1].run.spec.prompt: '$(steps.a.outputs)' is not a reference; write $(steps.STEP.output), "
        "$(steps.STEP.output.FIELD) or $(matrix.NAME)",
        "spec.steps[1].run.spec.prompt: $(matrix.lang) names no axis of this step's matrix; its axes: none "
        "(the step has no matrix)",
        "spec.steps[1].run.spec: $(steps.a.output) reads step a, which this step does not run after; add 'a' "
        "to spec.steps[1].after",
        "spec.steps[1].run.spec: $(steps.zz.output) names no step of this pipeline",
    ]


def test_a_reference_through_an_intermediate_step_is_allowed() -> None:
    p = make_pipeline(
        {"name": "a", "prompt": "x"},
        {"name": "b", "prompt": "y", "after": ["a"]},
        {"name": "c", "prompt": "$(steps.a.output)", "after": ["b"]},
    )
    assert compute_pipeline_problems(p.spec) == []


def test_inputs_past_a_runs_bound_are_a_problem() -> None:
    p = make_pipeline(
        {
            "name": "fan",
            "prompt": "$(matrix.i)",
            "matrix": {"params": [{"name": "i", "values": [str(i) for i in range(9)]}]},
        },
        {"name": "judge", "after": ["fan"], "prompt": "$(steps.fan.output) $(steps.fan.output.score)"},
    )
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[1].run.spec: 18 inputs with one per run of each step referenced, more than 16; reference "
        "fewer steps or fan out less"
    ]


def test_workspace_from_names_an_earlier_step_and_a_fanned_out_ones_run_by_each_axis() -> None:
    p = make_pipeline(
        {"name": "fan", "prompt": "x", "matrix": {"providers": ["claude", "codex"]}},
        {"name": "one", "prompt": "x"},
        {"name": "judge", "prompt": "x", "after": ["fan"]},
        {"name": "a", "prompt": "x", "after": ["fan"], "workspaceFrom": {"step": "fan"}},
        {"name": "b", "prompt": "x", "workspaceFrom": {"step": "one"}},
        {
            "name": "c",
            "prompt": "x",
            "after": ["one"],
            "workspaceFrom": {"step": "one", "where": {"provider": "x"}},
        },
        {
            "name": "d",
            "prompt": "x",
            "after": ["judge", "one"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "$(steps.judge.output.winner)"}},
        },
        {
            "name": "e",
            "prompt": "x",
            "after": ["fan"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "$(steps.fan.output) or $(steps.x"}},
        },
        {"name": "ok1", "prompt": "x", "after": ["one"], "workspaceFrom": {"step": "one"}},
        {
            "name": "ok2",
            "prompt": "x",
            "after": ["judge"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "$(steps.judge.output.winner)"}},
        },
        {
            "name": "ok3",
            "prompt": "x",
            "after": ["fan"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "codex"}},
        },
    )
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[3].workspaceFrom.where: step fan fans out over provider; name the run by each of them (e.g. "
        "provider: $(steps.judge.output.winner))",
        "spec.steps[4].workspaceFrom.step: 'one' is not a step this one runs after; add it to its after",
        "spec.steps[5].workspaceFrom.where: step one has one run; leave where out",
        "spec.steps[7].workspaceFrom.where.provider: '$(steps.fan.output) or $(steps.x' is neither a literal nor "
        "one $(steps.STEP.output[.FIELD])",
    ]


def test_a_where_must_read_a_single_run_step_run_before() -> None:
    p = make_pipeline(
        {"name": "fan", "prompt": "x", "matrix": {"providers": ["claude", "codex"]}},
        {"name": "late", "prompt": "x"},
        {
            "name": "d",
            "prompt": "x",
            "after": ["fan"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "$(steps.late.output)"}},
        },
        {
            "name": "e",
            "prompt": "x",
            "after": ["fan"],
            "workspaceFrom": {"step": "fan", "where": {"provider": "$(steps.fan.output)"}},
        },
    )
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[2].workspaceFrom.where.provider: $(steps.late.output) must read a step of one run that this "
        "step runs after",
        "spec.steps[3].workspaceFrom.where.provider: $(steps.fan.output) must read a step of one run that this "
        "step runs after",
    ]


def test_provider_options_name_only_providers_of_the_matrix() -> None:
    p = make_pipeline(
        {
            "name": "impl",
            "prompt": "x",
            "matrix": {"providers": ["claude"], "providerOptions": {"claude": {}, "codex": {"sandbox": "x"}}},
        }
    )
    assert compute_pipeline_problems(p.spec) == [
        "spec.steps[0].matrix.providerOptions.codex: codex is not one of matrix.providers; add it there or "
        "remove its options"
    ]
