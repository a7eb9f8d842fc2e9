"""`harnessctl run` of a HarnessPipeline (local_run.run_paths, local_pipeline.run_pipeline) with the demo
agent as a real process: steps in order, a matrix fanned out, a fan-in step reading every run's output, a
failed step skipping what runs after it, continueOn, a workspaceFrom read from a judge's output, the exit
code, stdout, the progress lines and the status file."""

import json
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.api.v1alpha1 import HarnessPipelineStatus, HarnessRunStatus
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.demo_agent import build_answer
from harness_operator.cli.local_pipeline import run_pipeline
from harness_operator.cli.local_run import LocalRunner, run_paths
from harness_operator.cli.manifests import Document, load_documents, parse_documents
from harness_operator.cli.validation import build_catalog

DEMO = {
    "apiVersion": "agentharness.dev/v1alpha1",
    "kind": "HarnessDefinition",
    "metadata": {"name": "demo"},
    "spec": {
        "binary": "harness-demo-agent",
        "prefixArgs": ["-p"],
        "promptMode": "arg",
        "kebabCaseFlags": True,
        "defaults": {"output_format": "stream-json", "verbose": True},
        "output": {"format": "claude-stream-json"},
        "capabilities": {"usageReporting": True, "costReporting": True, "modelSelection": True},
    },
}
OVER_BUDGET = {"max_budget_usd": "0.0001"}  # the demo agent's one way to fail: a budget it crosses


@pytest.fixture(autouse=True)
def demo_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "bin" / "harness-demo-agent"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness_operator.cli.demo_agent "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")


def step(
    name: str, prompt: str, tmp_path: Path, after: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    spec = {"provider": "demo", "prompt": prompt, "workspace": {"workingDir": str(tmp_path / "work")}}
    return {
        "name": name,
        **({"after": after} if after else {}),
        "run": {"spec": spec | extra.pop("spec", {})},
        **extra,
    }


def pipeline_file(tmp_path: Path, *steps: dict[str, Any]) -> str:
    pipeline = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessPipeline",
        "metadata": {"name": "review"},
        "spec": {"serviceAccountName": "runner", "steps": list(steps)},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump_all([DEMO, pipeline]))
    return str(path)


def read_status_file(path: Path) -> tuple[list[HarnessRunStatus], HarnessPipelineStatus]:
    *runs, pipeline = list(yaml.safe_load_all(path.read_text()))
    assert path.read_text().count("# HarnessPipeline default/review\n") == 1
    return [HarnessRunStatus.model_validate(r) for r in runs], HarnessPipelineStatus.model_validate(pipeline)


def progress(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("harness: HarnessPipeline")]


def test_a_fanned_out_step_and_a_fan_in_judge_read_the_outputs_before_them(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = pipeline_file(
        tmp_path,
        step("plan", "Plan the change", tmp_path),
        step(
            "draft",
            "Draft as $(matrix.model) from: $(steps.plan.output)",
            tmp_path,
            after=["plan"],
            matrix={"models": ["m1", "m2"]},
        ),
        step("judge", "$(steps.draft.output)", tmp_path, after=["draft"]),
    )
    assert run_paths([files], str(status_file)) == 0
    out, err = capfd.readouterr()
    plan = build_answer("Plan the change")
    drafts = [build_answer(f"Draft as {model} from: {plan}") for model in ("m1", "m2")]
    judged = f"### draft (model: m1)\n{drafts[0]}\n\n### draft (model: m2)\n{drafts[1]}"
    assert out == build_answer(judged)  # only the last step's output, with both drafts under headings
    assert progress(err) == [
        "harness: HarnessPipeline default/review: step plan started: review-plan",
        "harness: HarnessPipeline default/review: step plan succeeded",
        "harness: HarnessPipeline default/review: step draft started: review-draft-0, review-draft-1",
        "harness: HarnessPipeline default/review: step draft succeeded",
        "harness: HarnessPipeline default/review: step judge started: review-judge",
        "harness: HarnessPipeline default/review: step judge succeeded",
        "harness: HarnessPipeline default/review: Succeeded: all 3 steps succeeded",
    ]
    runs, pipeline = read_status_file(status_file)
    assert [r.phase for r in runs] == ["Succeeded"] * 4
    assert [(s.name, s.phase, [r.name for r in s.runs]) for s in pipeline.steps] == [
        ("plan", "Succeeded", ["review-plan"]),
        ("draft", "Succeeded", ["review-draft-0", "review-draft-1"]),
        ("judge", "Succeeded", ["review-judge"]),
    ]
    assert [r.matrix for r in pipeline.steps[1].runs] == [{"model": "m1"}, {"model": "m2"}]
    assert pipeline.phase == "Succeeded" and pipeline.cost_usd is not None and pipeline.cost_usd > 0


def test_a_failed_step_skips_what_runs_after_it_and_the_rest_goes_on(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = pipeline_file(
        tmp_path,
        step("build", "Build it", tmp_path, spec={"with": OVER_BUDGET}),
        step("ship", "Ship $(steps.build.output)", tmp_path, after=["build"]),
        step("docs", "Write the docs", tmp_path),
    )
    assert run_paths([files], str(status_file)) == 1  # the failed run's exit code
    out, err = capfd.readouterr()
    assert out == build_answer("Write the docs")  # the final steps' outputs: docs ran, ship did not
    assert progress(err) == [
        "harness: HarnessPipeline default/review: step build started: review-build",
        "harness: HarnessPipeline default/review: step docs started: review-docs",
        "harness: HarnessPipeline default/review: step build failed",
        "harness: HarnessPipeline default/review: step ship skipped: step build failed",
        "harness: HarnessPipeline default/review: step docs succeeded",
        "harness: HarnessPipeline default/review: Failed: failed: step build",
    ]
    runs, pipeline = read_status_file(status_file)
    assert [r.phase for r in runs] == ["Failed", "Succeeded"]
    assert [(s.name, s.phase) for s in pipeline.steps] == [
        ("build", "Failed"),
        ("ship", "Skipped"),
        ("docs", "Succeeded"),
    ]
    assert pipeline.phase == "Failed" and pipeline.steps[1].runs == []


def test_continue_on_failure_lets_the_next_step_read_the_runs_that_succeeded(tmp_path, capfd):
    """One run of the matrix crosses its budget (its provider caps it): the judge still runs, reads the
    other, and the pipeline ends Failed with the failed run's exit code."""
    status_file = tmp_path / "status.yaml"
    capped = {
        **DEMO,
        "metadata": {"name": "capped"},
        "spec": {**DEMO["spec"], "defaults": {**DEMO["spec"]["defaults"], **OVER_BUDGET}},
    }
    files = pipeline_file(
        tmp_path,
        step(
            "draft",
            "Draft as $(matrix.provider)",
            tmp_path,
            matrix={"providers": ["capped", "demo"]},
            continueOn={"failure": True},
        ),
        step("judge", "$(steps.draft.output)", tmp_path, after=["draft"]),
    )
    Path(files).write_text(Path(files).read_text() + "---\n" + yaml.safe_dump(capped))
    assert run_paths([files], str(status_file)) == 1
    out, err = capfd.readouterr()
    assert out == build_answer(f"### draft (provider: demo)\n{build_answer('Draft as demo')}")
    assert progress(err) == [
        "harness: HarnessPipeline default/review: step draft started: review-draft-0, review-draft-1",
        "harness: HarnessPipeline default/review: step draft failed",
        "harness: HarnessPipeline default/review: step judge started: review-judge",
        "harness: HarnessPipeline default/review: step judge succeeded",
        "harness: HarnessPipeline default/review: Failed: failed: step draft",
    ]
    _, pipeline = read_status_file(status_file)
    assert [(s.name, s.phase) for s in pipeline.steps] == [("draft", "Failed"), ("judge", "Succeeded")]
    assert [(r.provider, r.phase) for r in pipeline.steps[0].runs] == [
        ("capped", "Failed"),
        ("demo", "Succeeded"),
    ]


JUDGE = {
    "apiVersion": "agentharness.dev/v1alpha1",
    "kind": "HarnessDefinition",
    "metadata": {"name": "judge"},
    "spec": {
        "binary": sys.executable,
        "prefixArgs": [str(Path(__file__).parents[2] / "fakes" / "agent.py")],
        "output": {"format": "claude-stream-json"},
        "env": [{"name": "FAKE_MODE", "value": "answer"}, {"name": "FAKE_ANSWER", "value": "WINNER"}],
    },
}


@pytest.mark.parametrize(
    ("winner", "phase", "source"),
    [("m2", "Succeeded", "review-draft-1"), ("m3", "Failed", None)],
)
def test_workspace_from_names_the_run_a_judge_chose(tmp_path, capfd, winner, phase, source):
    """Best of N: the judge's structured output names the draft the last step starts from; it is read
    before that step's run is made, as the operator reads it (a winner no run has fails the step)."""
    judge = {**JUDGE, "spec": {**JUDGE["spec"], "env": [*JUDGE["spec"]["env"][:1],
             {"name": "FAKE_ANSWER", "value": json.dumps({"winner": winner})}]}}  # fmt: skip
    schema = {"type": "object", "properties": {"winner": {"type": "string"}}, "required": ["winner"]}
    git = {"workingDir": str(tmp_path / "work"), "git": {"url": "https://example.com/repo.git"}}
    files = pipeline_file(
        tmp_path,
        step("draft", "Draft as $(matrix.model)", tmp_path, matrix={"models": ["m1", "m2"]}),
        step("judge", "$(steps.draft.output)", tmp_path, after=["draft"],
             spec={"provider": "judge", "outputSchema": schema}),
        step("polish", "Polish it", tmp_path, after=["judge"], spec={"workspace": git},
             workspaceFrom={"step": "draft", "where": {"model": "$(steps.judge.output.winner)"}}),
    )  # fmt: skip
    docs = load_documents([files]) + parse_documents(yaml.safe_dump(judge), "judge.yaml")
    runner = LocalRunner(docs, build_catalog(docs, load_builtin_catalog()), threading.Event())
    made: dict[str, dict[str, Any]] = {}

    def run_one(doc: Document) -> tuple[HarnessRunStatus, int]:
        made[doc.name] = doc.obj
        return runner.run(doc)

    pipeline = next(d for d in docs if d.kind == "HarnessPipeline")
    outcome = run_pipeline(pipeline, run_one, runner.files.outputs, threading.Event())
    assert outcome.status.phase == phase
    polish = outcome.status.steps[2]
    if source is None:
        assert "polish" not in " ".join(made)
        assert polish.message == "workspaceFrom: no succeeded run of step draft has model 'm3'"
    else:
        assert made["review-polish"]["spec"]["workspace"]["from"] == {"run": source}
