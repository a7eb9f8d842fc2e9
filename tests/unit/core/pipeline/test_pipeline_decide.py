"""The pipeline's decisions: which step's runs are created when, failure propagation and continueOn,
cancel, refusals kept, the outcome and its conditions, costs, and the end Event posted once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.unit.core.pipeline.conftest import make_pipeline

from harness_operator.core.pipeline.decide import PipelineDecision, decide_pipeline
from harness_operator.core.pipeline.runs import StepRun

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def run(
    name: str, step: str, index: int = 0, state: str = "ok", cost: float | None = 0.5, cancelled: bool = False
) -> StepRun:
    finished = state in ("ok", "failed")
    phase = {"ok": "Succeeded", "failed": "Failed", "running": "Running"}[state]
    return StepRun(
        name, f"uid-{name}", step, index, {}, finished, state == "ok", cancelled, phase, "claude", cost
    )


def phases(decision: PipelineDecision) -> dict[str, str]:
    return {s.name: str(s.phase) for s in decision.status.steps}


def created(decision: PipelineDecision) -> list[str]:
    return [r["metadata"]["name"] for _, r in decision.create]


def condition(decision: PipelineDecision, type_: str) -> tuple[str, str]:
    c = next(c for c in decision.status.conditions if c.type == type_)
    return c.status, c.reason


DIAMOND: list[dict[str, Any]] = [
    {"name": "plan", "prompt": "p"},
    {"name": "a", "prompt": "a", "after": ["plan"]},
    {"name": "b", "prompt": "b", "after": ["plan"]},
    {"name": "join", "prompt": "$(steps.a.output) $(steps.b.output)", "after": ["a", "b"]},
]


def test_first_reconcile_creates_only_the_steps_with_no_dependencies() -> None:
    d = decide_pipeline(make_pipeline(*DIAMOND), [], NOW)
    assert created(d) == ["p-plan"]
    assert phases(d) == {"plan": "Running", "a": "Waiting", "b": "Waiting", "join": "Waiting"}
    assert d.status.step_phases == "Running Waiting Waiting Waiting"  # kubectl's Steps column
    assert d.status.steps[1].message == "waits for step plan"
    assert d.status.phase == "Running"
    assert condition(d, "Succeeded") == ("Unknown", "Running")
    assert condition(d, "Reconciling") == ("True", "Running")
    assert d.status.start_time == "2026-12-07T10:00:00Z"
    assert d.events == []


def test_a_step_starts_once_all_it_runs_after_have_succeeded() -> None:
    d = decide_pipeline(
        make_pipeline(*DIAMOND),
        [run("p-plan", "plan"), run("p-a", "a"), run("p-b", "b", state="running")],
        NOW,
    )
    assert created(d) == []
    assert phases(d)["join"] == "Waiting"
    d = decide_pipeline(
        make_pipeline(*DIAMOND), [run("p-plan", "plan"), run("p-a", "a"), run("p-b", "b")], NOW
    )
    assert created(d) == ["p-join"]
    [(step, join)] = d.create
    assert step == "join"
    assert [i["runOutput"]["name"] for i in join["spec"]["inputs"]] == ["p-a", "p-b"]


def test_a_run_already_there_is_not_created_again() -> None:
    d = decide_pipeline(make_pipeline(*DIAMOND), [run("p-plan", "plan", state="running")], NOW)
    assert created(d) == []
    assert phases(d)["plan"] == "Running"


def test_a_failure_skips_what_depends_on_it_and_the_pipeline_fails_once_all_ended() -> None:
    runs = [run("p-plan", "plan"), run("p-a", "a", state="failed"), run("p-b", "b", state="running")]
    d = decide_pipeline(make_pipeline(*DIAMOND), runs, NOW)
    assert phases(d) == {"plan": "Succeeded", "a": "Failed", "b": "Running", "join": "Skipped"}
    assert d.status.steps[3].message == "step a failed"
    assert condition(d, "Succeeded") == ("Unknown", "Running")
    runs[2] = run("p-b", "b")
    d = decide_pipeline(make_pipeline(*DIAMOND), runs, NOW)
    assert created(d) == []
    assert condition(d, "Succeeded") == ("False", "StepFailed")
    assert condition(d, "Stalled") == ("True", "StepFailed")
    assert d.status.phase == "Failed"
    assert d.status.completion_time == "2026-12-07T10:00:00Z"
    [event] = d.events
    assert (event.type, event.reason, event.message, event.name) == (
        "Warning",
        "StepFailed",
        "failed: step a",
        "p.u-1.end",
    )


def test_a_skip_propagates_transitively() -> None:
    p = make_pipeline(
        {"name": "a", "prompt": "x"},
        {"name": "b", "prompt": "x", "after": ["a"]},
        {"name": "c", "prompt": "x", "after": ["b"]},
    )
    d = decide_pipeline(p, [run("p-a", "a", state="failed")], NOW)
    assert phases(d) == {"a": "Failed", "b": "Skipped", "c": "Skipped"}
    assert d.status.steps[2].message == "step b skipped"


def test_continue_on_failure_lets_the_next_step_run_with_the_outputs_that_succeeded() -> None:
    p = make_pipeline(
        {
            "name": "impl",
            "prompt": "x",
            "matrix": {"providers": ["claude", "codex", "gemini"]},
            "continueOn": {"failure": True},
        },
        {"name": "judge", "prompt": "$(steps.impl.output)", "after": ["impl"]},
    )
    runs = [
        run("p-impl-0", "impl", 0),
        run("p-impl-1", "impl", 1, state="failed"),
        run("p-impl-2", "impl", 2),
    ]
    d = decide_pipeline(p, runs, NOW)
    assert phases(d) == {"impl": "Failed", "judge": "Running"}
    [(_, judge)] = d.create
    assert [i["runOutput"]["name"] for i in judge["spec"]["inputs"]] == ["p-impl-0", "p-impl-2"]
    d = decide_pipeline(p, [*runs, run("p-judge", "judge")], NOW)
    assert condition(d, "Succeeded") == ("False", "StepFailed")  # the pipeline still says impl failed


def test_a_matrix_step_runs_all_its_runs_at_once_and_succeeds_when_all_do() -> None:
    p = make_pipeline({"name": "impl", "prompt": "x", "matrix": {"providers": ["claude", "codex"]}})
    d = decide_pipeline(p, [], NOW)
    assert created(d) == ["p-impl-0", "p-impl-1"]
    assert [r.provider for r in d.status.steps[0].runs] == ["claude", "codex"]
    # one of two made before a restart: the other is made now
    d = decide_pipeline(p, [run("p-impl-0", "impl", 0, state="running")], NOW)
    assert created(d) == ["p-impl-1"]
    d = decide_pipeline(p, [run("p-impl-0", "impl", 0, cost=0.25), run("p-impl-1", "impl", 1, cost=0.5)], NOW)
    assert condition(d, "Succeeded") == ("True", "Succeeded")
    assert condition(d, "Ready") == ("True", "Succeeded")
    assert d.status.phase == "Succeeded"
    assert d.status.step_phases == "Succeeded"
    assert d.status.cost_usd == 0.75
    assert [e.reason for e in d.events] == ["Succeeded"]


def test_cancel_cancels_unfinished_runs_once_and_starts_nothing() -> None:
    p = make_pipeline(*DIAMOND, cancel=True)
    runs = [
        run("p-plan", "plan"),
        run("p-a", "a", state="running"),
        run("p-b", "b", state="running", cancelled=True),
    ]
    d = decide_pipeline(p, runs, NOW)
    assert d.cancel == ["p-a"]
    assert created(d) == []
    assert phases(d) == {"plan": "Succeeded", "a": "Running", "b": "Running", "join": "Cancelled"}
    assert condition(d, "Succeeded") == ("Unknown", "Running")
    ended = [
        run("p-plan", "plan"),
        run("p-a", "a", state="failed", cancelled=True),
        run("p-b", "b", state="failed", cancelled=True),
    ]
    d = decide_pipeline(p, ended, NOW)
    assert phases(d) == {"plan": "Succeeded", "a": "Cancelled", "b": "Cancelled", "join": "Cancelled"}
    assert condition(d, "Succeeded") == ("False", "Cancelled")
    assert d.status.phase == "Cancelled"


def test_a_refused_run_fails_its_step_and_the_refusal_is_kept_from_the_status() -> None:
    p = make_pipeline({"name": "a", "prompt": "x"}, {"name": "b", "prompt": "x", "after": ["a"]})
    d = decide_pipeline(p, [], NOW, refused={"a": "admission: spec.credentials[0]: may not get Secret key"})
    assert created(d) == []
    assert phases(d) == {"a": "Failed", "b": "Skipped"}
    assert condition(d, "Succeeded") == ("False", "StepFailed")
    again = make_pipeline(
        {"name": "a", "prompt": "x"}, {"name": "b", "prompt": "x", "after": ["a"]}, status=d.status.to_api()
    )
    d2 = decide_pipeline(again, [], NOW)
    assert created(d2) == []
    assert d2.status.steps[0].message == "admission: spec.credentials[0]: may not get Secret key"
    assert d2.events == []  # the end was announced once


def test_an_invalid_pipeline_creates_nothing_and_says_why() -> None:
    p = make_pipeline({"name": "a", "prompt": "$(steps.b.output)"}, {"name": "b", "prompt": "x"})
    d = decide_pipeline(p, [], NOW)
    assert created(d) == []
    assert condition(d, "Succeeded") == ("False", "InvalidPipeline")
    assert "add 'b' to spec.steps[0].after" in d.status.conditions[0].message
    assert d.status.phase == "Failed"
    assert [e.name for e in d.events] == ["p.u-1.invalid"]


def test_status_is_stable_when_nothing_changed() -> None:
    p = make_pipeline(*DIAMOND)
    runs = [run("p-plan", "plan", state="running")]
    first = decide_pipeline(p, runs, NOW)
    p2 = make_pipeline(*DIAMOND, status=first.status.to_api())
    later = decide_pipeline(p2, runs, datetime(2026, 12, 7, 11, 0, tzinfo=UTC))
    assert later.status.to_api() == first.status.to_api()


BEST_OF_TWO: list[dict[str, Any]] = [
    {"name": "impl", "prompt": "x", "matrix": {"providers": ["claude", "codex"]}},
    {"name": "judge", "prompt": "$(steps.impl.output)", "after": ["impl"]},
    {
        "name": "pr",
        "prompt": "publish",
        "after": ["judge"],
        "workspaceFrom": {"step": "impl", "where": {"provider": "$(steps.judge.output.winner)"}},
    },
]


def test_the_publish_step_waits_for_the_judges_field_then_starts_from_the_winner() -> None:
    runs = [
        StepRun(
            "p-impl-0", "u0", "impl", 0, {"provider": "claude"}, True, True, False, "Succeeded", "claude", 0.1
        ),
        StepRun(
            "p-impl-1", "u1", "impl", 1, {"provider": "codex"}, True, True, False, "Succeeded", "codex", 0.1
        ),
        run("p-judge", "judge"),
    ]
    d = decide_pipeline(make_pipeline(*BEST_OF_TWO), runs, NOW)
    assert d.needs == [("p-judge", "winner")]
    assert created(d) == []
    assert phases(d)["pr"] == "Waiting"
    d = decide_pipeline(make_pipeline(*BEST_OF_TWO), runs, NOW, fields={("p-judge", "winner"): "codex"})
    [(_, pr)] = d.create
    assert pr["spec"]["workspace"] == {"from": {"run": "p-impl-1"}}
    d = decide_pipeline(make_pipeline(*BEST_OF_TWO), runs, NOW, fields={("p-judge", "winner"): "nobody"})
    assert phases(d)["pr"] == "Failed"
    assert d.status.steps[2].message == "workspaceFrom: no succeeded run of step impl has provider 'nobody'"
    assert condition(d, "Succeeded") == ("False", "StepFailed")


def test_an_ended_pipeline_creates_nothing_when_its_runs_expire() -> None:
    p = make_pipeline({"name": "a", "prompt": "x"})
    ended = decide_pipeline(p, [run("p-a", "a")], NOW)
    assert ended.status.completion_time is not None
    again = decide_pipeline(
        make_pipeline({"name": "a", "prompt": "x"}, status=ended.status.to_api()), [], NOW
    )
    assert again.create == [] and again.events == []
    assert again.status.to_api() == ended.status.to_api()
