"""The runs a step creates (golden: names, labels, owner, matrix values, references made inputs, the
workspace of an earlier step) and the entry the pipeline reads back from a run."""

from __future__ import annotations

from typing import Any

from tests.unit.core.pipeline.conftest import make_pipeline

from harness_operator.api.v1alpha1 import StepWorkspace
from harness_operator.core.pipeline.runs import (
    Selection,
    StepRun,
    build_step_run_entry,
    build_step_runs,
    select_source,
)


def _done(step: str, *names: str, matrix: list[dict[str, str]] | None = None) -> list[StepRun]:
    return [
        StepRun(
            n,
            f"uid-{n}",
            step,
            i,
            (matrix or [{}] * len(names))[i],
            True,
            True,
            False,
            "Succeeded",
            "claude",
            0.1,
        )
        for i, n in enumerate(names)
    ]


def test_a_single_run_step_is_its_template_owned_by_the_pipeline() -> None:
    p = make_pipeline(
        {
            "name": "review",
            "prompt": "review it",
            "spec": {"with": {"model": "x"}, "limits": {"maxCostUSD": 1}},
        }
    )
    [run] = build_step_runs(p, p.spec.steps[0], {}, set())
    assert run == {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {
            "name": "p-review",
            "namespace": "team",
            "labels": {
                "agentharness.dev/pipeline": "p",
                "agentharness.dev/pipeline-step": "review",
                "app.kubernetes.io/managed-by": "harness-operator",
            },
            "annotations": {
                "agentharness.dev/pipeline-step": "review",
                "agentharness.dev/pipeline-index": "0",
                "agentharness.dev/pipeline-matrix": "{}",
            },
            "ownerReferences": [
                {
                    "apiVersion": "agentharness.dev/v1alpha1",
                    "kind": "HarnessPipeline",
                    "name": "p",
                    "uid": "u-1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "provider": "claude",
            "prompt": "review it",
            "with": {"model": "x"},
            "limits": {"maxCostUSD": 1.0},
        },
    }


def test_a_matrix_makes_one_run_per_combination_with_its_values_put_in() -> None:
    p = make_pipeline(
        {
            "name": "impl",
            "prompt": "fix it in $(matrix.lang) with $(matrix.provider)",
            "spec": {"with": {"effort": "high"}},
            "matrix": {
                "providers": ["claude", "codex"],
                "models": ["big"],
                "params": [{"name": "lang", "values": ["go"]}],
            },
        }
    )
    runs = build_step_runs(p, p.spec.steps[0], {}, set())
    assert [r["metadata"]["name"] for r in runs] == ["p-impl-0", "p-impl-1"]
    assert [r["spec"]["provider"] for r in runs] == ["claude", "codex"]
    assert [r["spec"]["with"] for r in runs] == [{"effort": "high", "model": "big"}] * 2
    assert runs[1]["spec"]["prompt"] == "fix it in go with codex"
    assert runs[1]["metadata"]["annotations"]["agentharness.dev/pipeline-matrix"] == (
        '{"lang": "go", "model": "big", "provider": "codex"}'
    )


def test_provider_options_go_into_with_of_that_providers_run_only() -> None:
    p = make_pipeline(
        {
            "name": "impl",
            "prompt": "x",
            "spec": {"with": {"effort": "high"}},
            "matrix": {
                "providers": ["claude", "codex", "gemini"],
                "providerOptions": {
                    "claude": {"permission-mode": "acceptEdits"},
                    "codex": {"sandbox": "danger-full-access", "effort": "low"},
                },
            },
        }
    )
    runs = build_step_runs(p, p.spec.steps[0], {}, set())
    assert [r["spec"]["with"] for r in runs] == [
        {"effort": "high", "permission-mode": "acceptEdits"},
        {"effort": "low", "sandbox": "danger-full-access"},
        {"effort": "high"},
    ]


def test_a_reference_to_a_single_run_becomes_one_run_output_input() -> None:
    p = make_pipeline(
        {"name": "review", "prompt": "x"},
        {
            "name": "summary",
            "after": ["review"],
            "prompt": "Summarize: $(steps.review.output); verdict $(steps.review.output.verdict)",
            "spec": {"inputs": [{"name": "style", "value": "short"}]},
        },
    )
    [run] = build_step_runs(p, p.spec.steps[1], {"review": _done("review", "p-review")}, set())
    path = [i["name"] for i in run["spec"]["inputs"]][2]
    assert run["spec"]["prompt"] == f"Summarize: $(inputs.steps-review-0); verdict $(inputs.{path})"
    assert run["spec"]["inputs"] == [
        {"name": "style", "value": "short"},
        {"name": "steps-review-0", "runOutput": {"name": "p-review"}},
        {"name": path, "runOutput": {"name": "p-review", "path": "verdict"}},
    ]
    assert path.startswith("steps-review-0-")


def test_a_fan_in_reads_every_succeeded_run_under_a_heading() -> None:
    p = make_pipeline(
        {"name": "impl", "prompt": "x", "matrix": {"providers": ["claude", "codex", "gemini"]}},
        {"name": "judge", "after": ["impl"], "prompt": "Pick one:\n$(steps.impl.output)"},
    )
    # gemini's run (index 2) failed: only the succeeded ones are read.
    done = {
        "impl": _done("impl", "p-impl-0", "p-impl-1", matrix=[{"provider": "claude"}, {"provider": "codex"}])
    }
    [run] = build_step_runs(p, p.spec.steps[1], done, {"impl"})
    assert run["spec"]["prompt"] == (
        "Pick one:\n### impl (provider: claude)\n$(inputs.steps-impl-0)\n\n### impl (provider: codex)\n"
        "$(inputs.steps-impl-1)"
    )
    assert [i["runOutput"]["name"] for i in run["spec"]["inputs"]] == ["p-impl-0", "p-impl-1"]


def test_the_source_run_becomes_workspace_from_and_the_rest_of_the_workspace_is_kept() -> None:
    git = {"git": {"url": "https://git.example/acme/app.git"}, "workingDir": "/work"}
    p = make_pipeline(
        {"name": "impl", "prompt": "x", "spec": {"workspace": git}},
        {
            "name": "pr",
            "prompt": "y",
            "after": ["impl"],
            "workspaceFrom": {"step": "impl"},
            "spec": {"workspace": git},
        },
    )
    [source] = _done("impl", "p-impl")
    [run] = build_step_runs(p, p.spec.steps[1], {"impl": [source]}, set(), source)
    assert run["spec"]["workspace"] == {**git, "from": {"run": "p-impl"}}


WINNER = StepWorkspace.model_validate({"step": "impl", "where": {"provider": "$(steps.judge.output.winner)"}})
FANNED = {
    "impl": _done("impl", "p-impl-0", "p-impl-1", matrix=[{"provider": "claude"}, {"provider": "codex"}]),
    "judge": _done("judge", "p-judge"),
}


def test_select_source_asks_for_the_judges_field_then_picks_the_run_it_names() -> None:
    assert select_source(WINNER, FANNED, {}) == Selection(needs=(("p-judge", "winner"),))
    chosen = select_source(WINNER, FANNED, {("p-judge", "winner"): " codex\n"})
    assert chosen.run is not None and chosen.run.name == "p-impl-1"


def test_select_source_says_why_no_run_is_chosen() -> None:
    assert select_source(WINNER, FANNED, {("p-judge", "winner"): "gemini"}) == Selection(
        problem="workspaceFrom: no succeeded run of step impl has provider 'gemini'"
    )
    assert select_source(WINNER, FANNED, {("p-judge", "winner"): None}) == Selection(
        problem="workspaceFrom.where.provider: the output of run p-judge cannot be read"
    )
    assert select_source(WINNER, {"impl": FANNED["impl"]}, {}) == Selection(
        problem="workspaceFrom.where.provider: step judge has no succeeded run"
    )
    literal = StepWorkspace.model_validate({"step": "impl", "where": {"provider": "claude"}})
    chosen = select_source(literal, FANNED, {})
    assert chosen.run is not None and chosen.run.name == "p-impl-0"


def test_template_labels_and_annotations_are_kept_but_an_approvals() -> None:
    metadata = {
        "labels": {"team": "a"},
        "annotations": {"approval.agentharness.dev/decision": "approved", "note": "n"},
    }
    p = make_pipeline({"name": "a", "prompt": "x", "metadata": metadata})
    [run] = build_step_runs(p, p.spec.steps[0], {}, set())
    assert run["metadata"]["labels"]["team"] == "a"
    assert run["metadata"]["annotations"]["note"] == "n"
    assert "approval.agentharness.dev/decision" not in run["metadata"]["annotations"]


def test_a_triggers_pipeline_hands_its_forge_context_to_each_run_and_a_template_cannot() -> None:
    metadata = {
        "labels": {"agentharness.dev/trigger": "forged", "agentharness.dev/forge-thread": "99"},
        "annotations": {"agentharness.dev/forge-repository": "evil/repo", "note": "n"},
    }
    p = make_pipeline({"name": "a", "prompt": "x", "metadata": metadata})
    [plain] = build_step_runs(p, p.spec.steps[0], {}, set())
    assert "agentharness.dev/trigger" not in plain["metadata"]["labels"]
    assert "agentharness.dev/forge-repository" not in plain["metadata"]["annotations"]
    p.metadata["labels"] = {
        "agentharness.dev/trigger": "fixer",
        "agentharness.dev/forge-thread": "3",
        "x": "y",
    }
    p.metadata["annotations"] = {
        "agentharness.dev/forge-repository": "acme/payments",
        "agentharness.dev/forge-thread-kind": "issue",
        "agentharness.dev/forge-event": "IssueLabeled",
        "other": "not handed on",
    }
    [run] = build_step_runs(p, p.spec.steps[0], {}, set())
    labels, annotations = run["metadata"]["labels"], run["metadata"]["annotations"]
    assert (labels["agentharness.dev/trigger"], labels["agentharness.dev/forge-thread"]) == ("fixer", "3")
    assert "x" not in labels and "other" not in annotations and annotations["note"] == "n"
    assert annotations["agentharness.dev/forge-repository"] == "acme/payments"
    assert annotations["agentharness.dev/forge-event"] == "IssueLabeled"


def _body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {
            "name": "p-impl-1",
            "uid": "r-1",
            "annotations": {
                "agentharness.dev/pipeline-step": "impl",
                "agentharness.dev/pipeline-index": "1",
                "agentharness.dev/pipeline-matrix": '{"provider": "codex"}',
            },
            "ownerReferences": [
                {
                    "apiVersion": "agentharness.dev/v1alpha1",
                    "kind": "HarnessPipeline",
                    "name": "p",
                    "uid": "u-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"provider": "codex"},
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "Succeeded", "status": "False", "reason": "ProviderFailed"}],
            "usage": {"costUSD": 0.25},
            "attempts": [{"provider": "codex"}, {"provider": "claude"}],
        },
    }
    body.update(over)
    return body


def test_the_entry_of_a_pipelines_run() -> None:
    assert build_step_run_entry(_body()) == (
        "u-1",
        StepRun(
            "p-impl-1", "r-1", "impl", 1, {"provider": "codex"}, True, False, False, "Failed", "claude", 0.25
        ),
    )


def test_a_run_no_pipeline_controls_has_no_entry() -> None:
    body = _body()
    body["metadata"]["ownerReferences"][0]["kind"] = "HarnessSchedule"
    assert build_step_run_entry(body) is None
    body = _body()
    del body["metadata"]["annotations"]["agentharness.dev/pipeline-step"]
    assert build_step_run_entry(body) is None


def test_an_unfinished_run_with_progress_cost_and_a_bad_annotation() -> None:
    body = _body(
        status={"phase": "Running", "progress": {"costUSD": 0.5}}, spec={"provider": "codex", "cancel": True}
    )
    body["metadata"]["annotations"]["agentharness.dev/pipeline-index"] = "x"
    _, entry = build_step_run_entry(body) or ("", None)
    assert entry is not None
    assert (
        entry.finished,
        entry.succeeded,
        entry.cancelled,
        entry.cost_usd,
        entry.index,
        entry.provider,
    ) == (
        False,
        False,
        True,
        0.5,
        0,
        "codex",
    )
