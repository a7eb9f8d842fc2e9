"""`harnessctl logs pipeline/NAME` (follow.follow_pipeline) through its Kube seam: each step's phase as it
changes, each run's attempts in turn prefixed with its step and run, the outcome and the exit code, as
text and as JSON lines; and how `logs` reads its argument."""

import argparse
from typing import Any

import pytest

from harness_operator.cli.cluster import parse_target
from harness_operator.cli.follow import PipelineNews, follow_pipeline

SPEC = {
    "serviceAccountName": "runner",
    "steps": [  # the judge first: followed in the steps' order, not the spec's
        {"name": "judge", "after": ["draft"], "run": {"spec": {"provider": "claude", "prompt": "p"}}},
        {
            "name": "draft",
            "matrix": {"models": ["m1", "m2"]},
            "run": {"spec": {"provider": "claude", "prompt": "p"}},
        },
    ],
}


def condition(status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": "Succeeded", "status": status, "reason": reason, "message": message}


def step(name: str, phase: str, runs: list[str], message: str | None = None) -> dict[str, Any]:
    body = {"name": name, "phase": phase, "runs": [{"name": r} for r in runs]}
    return body | ({"message": message} if message else {})


def finished_run(name: str, exit_code: int) -> dict[str, Any]:
    reason = "Succeeded" if exit_code == 0 else "ProviderFailed"
    attempt = {"index": 1, "provider": "claude", "exitCode": exit_code}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"provider": "claude", "prompt": "p"},
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "reason": reason,
            "exitCode": exit_code,
            "attempts": [attempt if exit_code == 0 else {**attempt, "reason": reason}],
            "conditions": [condition("True" if exit_code == 0 else "False", reason)],
        },
    }


class Kube:
    """The API as follow_pipeline reads it: the pipeline's status, in turn, one per read (the last one
    stays), and runs that have ended (told from their status: their pods are gone)."""

    def __init__(self, statuses: list[dict[str, Any]], runs: dict[str, dict[str, Any]]) -> None:
        self.statuses = statuses
        self.runs = runs
        self.changed: list[Any] = []
        self.missing_once = {"p-judge"}  # listed in the pipeline's status before the run is created

    def watch_pipeline(self, namespace: str, name: str, changed: Any) -> None:
        self.changed.append(changed)

    def fetch_pipeline(self, namespace: str, name: str) -> dict[str, Any]:
        for changed in self.changed:
            changed()  # each read finds a change: the follower does not wait for its timer
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name, "namespace": namespace}, "spec": SPEC, "status": status}

    def fetch_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name in self.missing_once:
            self.missing_once.discard(name)
            return None
        return self.runs.get(name)

    def fetch_pods(self, namespace: str, name: str) -> list[Any]:
        return []

    def fetch_config_map(self, namespace: str, name: str) -> None:
        return None


RUNS = {"p-draft-0": finished_run("p-draft-0", 0), "p-draft-1": finished_run("p-draft-1", 0)}
RUNNING = condition("Unknown", "Running", "steps running or waiting: judge, draft")


def test_following_a_pipeline_tells_each_step_and_each_run_in_turn() -> None:
    statuses = [
        {"phase": "Running", "conditions": [RUNNING], "steps": [
            step("judge", "Waiting", [], "waits for step draft"),
            step("draft", "Running", ["p-draft-0", "p-draft-1"]),
        ]},
        {"phase": "Running", "conditions": [RUNNING], "steps": [
            step("judge", "Running", ["p-judge"]),
            step("draft", "Succeeded", ["p-draft-0", "p-draft-1"]),
        ]},
        {"phase": "Running", "conditions": [RUNNING], "steps": [
            step("judge", "Running", ["p-judge"]),  # its run not created yet: waited for
            step("draft", "Succeeded", ["p-draft-0", "p-draft-1"]),
        ]},
        {"phase": "Succeeded", "conditions": [condition("True", "Succeeded", "all 2 steps succeeded")], "steps": [
            step("judge", "Succeeded", ["p-judge"]),
            step("draft", "Succeeded", ["p-draft-0", "p-draft-1"]),
        ]},
    ]  # fmt: skip
    kube = Kube(statuses, {**RUNS, "p-judge": finished_run("p-judge", 0)})
    news: list[PipelineNews] = []
    assert follow_pipeline(kube, "ns", "p", True, news.append) == 0  # type: ignore[arg-type]
    assert [line for n in news if (line := n.render()) is not None] == [
        "step draft: Running",
        "step judge: Waiting (waits for step draft)",
        "[draft/p-draft-0] ▶ attempt 1/1 with claude",
        "[draft/p-draft-0] ■ attempt 1 succeeded (exit 0); usage unknown",
        "[draft/p-draft-0] Succeeded (Succeeded, exit 0); usage unknown",
        "step draft: Succeeded",
        "step judge: Running",
        "[draft/p-draft-1] ▶ attempt 1/1 with claude",
        "[draft/p-draft-1] ■ attempt 1 succeeded (exit 0); usage unknown",
        "[draft/p-draft-1] Succeeded (Succeeded, exit 0); usage unknown",
        "step judge: Succeeded",
        "[judge/p-judge] ▶ attempt 1/1 with claude",
        "[judge/p-judge] ■ attempt 1 succeeded (exit 0); usage unknown",
        "[judge/p-judge] Succeeded (Succeeded, exit 0); usage unknown",
        "pipeline Succeeded (Succeeded): all 2 steps succeeded",
    ]
    assert kube.missing_once == set()  # the judge's run was read again once it existed


def test_a_failed_pipeline_read_once_exits_1_and_says_so_in_json_lines_too() -> None:
    status = {
        "phase": "Failed",
        "conditions": [condition("False", "StepFailed", "failed: step draft")],
        "steps": [
            step("judge", "Skipped", [], "step draft failed"),
            step("draft", "Failed", ["p-draft-0", "p-draft-1"]),
        ],
    }
    runs = {"p-draft-0": finished_run("p-draft-0", 0), "p-draft-1": finished_run("p-draft-1", 3)}
    news: list[PipelineNews] = []
    kube = Kube([status], runs)
    kube.missing_once = {"p-draft-0"}  # deleted since: said, not waited for
    assert follow_pipeline(kube, "ns", "p", False, news.append) == 1  # type: ignore[arg-type]
    rendered = [line for n in news if (line := n.render()) is not None]
    assert rendered[:3] == [
        "step draft: Failed",
        "step judge: Skipped (step draft failed)",
        "[draft/p-draft-0] not found: deleted before it was read",
    ]
    assert rendered[-2:] == [
        "[draft/p-draft-1] Failed (ProviderFailed, exit 3); usage unknown",
        "pipeline Failed (StepFailed): failed: step draft",
    ]
    lines = [n.to_json() for n in news]
    assert lines[0] == {"kind": "step", "step": "draft", "phase": "Failed"}
    assert lines[2] == {"kind": "gone", "step": "draft", "run": "p-draft-0"}
    assert lines[3] == {"kind": "attempt", "attempt": 1, "total": 1, "provider": "claude", "step": "draft",
                        "run": "p-draft-1"}  # fmt: skip
    assert lines[-1] == {
        "kind": "pipeline",
        "phase": "Failed",
        "reason": "StepFailed",
        "message": "failed: step draft",
    }


def test_logs_names_a_run_or_a_pipeline_as_kubectl_names_objects() -> None:
    assert parse_target("r") == ("HarnessRun", "r")
    assert parse_target("hrun/r") == ("HarnessRun", "r")
    for text in ("pipeline/p", "harnesspipelines/p", "hpipe/p", "HarnessPipeline.agentharness.dev/p"):
        assert parse_target(text) == ("HarnessPipeline", "p")
    for text in ("job/p", "pipeline/"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_target(text)
