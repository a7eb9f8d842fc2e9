"""A run whose change awaits approval (core/status/awaiting.py, core/status/approval.py): the wait entered
from a kept change, then every step from there: decided (approved, rejected), timed out, cancelled,
published (its publish pod's report), and nothing read from annotations once decided."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit.core.pod.test_publish import finished_run, make_run

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun, Phase, parse_duration_seconds
from harness_operator.contract.changes import ChangesReport
from harness_operator.core.objects.conditions import find_condition, is_finished
from harness_operator.core.objects.naming import ANNOTATION_DECISION
from harness_operator.core.pod.publish import compute_changes
from harness_operator.core.status.approval import PublishPod, compute_approval_step, read_decision
from harness_operator.core.status.awaiting import is_awaiting_approval
from harness_operator.core.status.decide import decide
from harness_operator.core.status.status import compute_status

NOW = datetime(2026, 12, 1, tzinfo=UTC)
KEPT = ChangesReport(
    base="a" * 40,
    files=2,
    insertions=3,
    deletions=1,
    patch_bytes=100,
    patch_sha256="c" * 64,
    awaiting_approval=True,
    tree="d" * 40,
    approval_paths=[".github/workflows/x.yml"],
)


def gated_run(timeout: str = "72h") -> HarnessRun:
    run = make_run()
    assert run.spec.workspace and run.spec.workspace.publish
    data = run.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["workspace"]["publish"]["approval"] = {"required": True, "timeout": timeout}
    return HarnessRun.model_validate(data)


def awaiting_run(timeout: str = "72h", **annotations: str) -> HarnessRun:
    """A run its operator put in AwaitingApproval (the status as compute_status wrote it)."""
    _, observed = finished_run()
    run = gated_run(timeout)
    changes, failure = compute_changes(KEPT, True, "fix-1")
    assert failure is None
    observed = observed.__class__(**{**observed.__dict__, "changes": changes, "awaiting_approval": True})
    status = compute_status(run, observed, NOW)
    data = run.model_dump(by_alias=True, exclude_none=True)
    data["metadata"]["annotations"] = annotations
    data["status"] = status.to_api()
    return HarnessRun.model_validate(data)


def approved(run: HarnessRun, user: str = "alice", reason: str | None = None) -> HarnessRun:
    notes = {ANNOTATION_DECISION: "Approved", "approval.agentharness.dev/user": user}
    if reason:
        notes["approval.agentharness.dev/reason"] = reason
    data = run.model_dump(by_alias=True, exclude_none=True)
    data["metadata"]["annotations"] = notes
    return HarnessRun.model_validate(data)


def with_status(run: HarnessRun, status: Any) -> HarnessRun:
    data = run.model_dump(by_alias=True, exclude_none=True)
    data["status"] = status.to_api()
    return HarnessRun.model_validate(data)


def test_a_kept_change_puts_the_run_in_awaiting_approval_not_finished() -> None:
    run = awaiting_run()
    status = run.status
    assert status is not None and status.phase == Phase.awaiting_approval
    assert status.reason == Reason.AwaitingApproval and not is_finished(status.conditions)
    assert status.completion_time is None and is_awaiting_approval(status)
    waiting = find_condition(status.conditions, "AwaitingApproval")
    assert waiting is not None and waiting.status == "True"
    assert "2 files changed (+3 -1)" in (status.message or "")
    assert ".github/workflows/x.yml" in (status.message or "")
    assert "harnessctl approve fix-1 -n team-a" in (status.message or "")
    assert status.approval is not None and status.approval.deadline == "2026-12-04T00:00:00Z"
    assert status.changes is not None and status.changes.tree == "d" * 40
    assert status.output is not None  # the output is kept for the approver (and the pull request)
    # The Event says so (the reason moved).
    events = decide(
        HarnessRun.model_validate({**run.model_dump(by_alias=True), "status": None}), status
    ).events
    assert [(e.type, e.reason) for e in events] == [("Normal", "AwaitingApproval")]


def test_a_kept_change_whose_patch_was_not_read_cannot_wait() -> None:
    _, failure = compute_changes(KEPT, False, "fix-1")
    assert failure is not None and failure[0] == Reason.PublishLost and "nothing to approve" in failure[1]


def test_waiting_without_a_decision_is_due_at_the_deadline() -> None:
    run = awaiting_run("1h30m")
    step = compute_approval_step(run, None, False, NOW + timedelta(minutes=30))
    assert step.status.phase == Phase.awaiting_approval and not step.create_publish_job
    assert step.due_in == 3600 and step.events == []


@pytest.mark.parametrize("value", ["approved", "yes", "", "Maybe"])
def test_an_annotation_that_is_no_decision_decides_nothing(value: str) -> None:
    run = awaiting_run(**{ANNOTATION_DECISION: value})
    assert read_decision(run, NOW) is None
    assert compute_approval_step(run, None, False, NOW).status.phase == Phase.awaiting_approval


def test_an_approval_records_who_and_when_and_creates_the_publish_job() -> None:
    run = approved(awaiting_run(), "alice", "ship it")
    later = NOW + timedelta(minutes=5)
    step = compute_approval_step(run, None, False, later)
    approval = step.status.approval
    assert approval is not None
    assert (approval.decision, approval.user, approval.reason) == ("Approved", "alice", "ship it")
    assert approval.time == "2026-12-01T00:05:00Z" and approval.deadline == "2026-12-04T00:00:00Z"
    assert step.create_publish_job and (step.status.phase, step.status.reason) == (
        Phase.running,
        Reason.Publishing,
    )
    assert [(e.type, e.reason) for e in step.events] == [("Normal", "Approved")]
    assert "alice" in step.events[0].message and "2026-12-01T00:05:00Z" in step.events[0].message
    waiting = find_condition(step.status.conditions, "AwaitingApproval")
    assert waiting is not None and (waiting.status, waiting.reason) == ("False", "Approved")
    assert not is_finished(step.status.conditions)


def test_once_decided_the_annotations_are_not_read_again() -> None:
    run = approved(awaiting_run(), "alice")
    step = compute_approval_step(run, None, False, NOW)
    decided = with_status(run, step.status)
    # Someone rewrites the annotations afterwards (admission refuses that; the operator ignores it too).
    data = decided.model_dump(by_alias=True, exclude_none=True)
    data["metadata"]["annotations"] = {
        ANNOTATION_DECISION: "Rejected",
        "approval.agentharness.dev/user": "bob",
    }
    again = compute_approval_step(HarnessRun.model_validate(data), PublishPod(finished=False), True, NOW)
    assert again.status.approval == step.status.approval and again.events == []
    assert not again.create_publish_job and again.status.phase == Phase.running


def test_an_approval_after_the_deadline_still_counts_when_seen_first() -> None:
    """The decision is weighed before the deadline: one written in time but seen late is not lost."""
    run = approved(awaiting_run("10s"))
    step = compute_approval_step(run, None, False, NOW + timedelta(minutes=1))
    assert step.create_publish_job


def test_a_rejection_ends_the_run_with_who_and_why() -> None:
    run = awaiting_run(
        **{
            ANNOTATION_DECISION: "Rejected",
            "approval.agentharness.dev/user": "bob",
            "approval.agentharness.dev/reason": "touches CI",
        }
    )
    step = compute_approval_step(run, None, False, NOW)
    status = step.status
    assert (status.phase, status.reason, status.exit_code) == (Phase.failed, Reason.ApprovalRejected, 1)
    assert "bob" in (status.message or "") and "touches CI" in (status.message or "")
    assert status.completion_time and is_finished(status.conditions)
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "Rejected")]
    waiting = find_condition(status.conditions, "AwaitingApproval")
    assert waiting is not None and (waiting.status, waiting.reason) == ("False", "ApprovalRejected")
    assert not step.create_publish_job


def test_nobody_deciding_times_out() -> None:
    run = awaiting_run("10s")
    step = compute_approval_step(run, None, False, NOW + timedelta(seconds=10))
    assert (step.status.phase, step.status.reason) == (Phase.failed, Reason.ApprovalTimedOut)
    assert "nothing is pushed" in (step.status.message or "")
    assert step.status.approval is not None and step.status.approval.decision is None
    waiting = find_condition(step.status.conditions, "AwaitingApproval")
    assert waiting is not None and (waiting.status, waiting.reason) == ("False", "ApprovalTimedOut")


@pytest.mark.parametrize("decided", [False, True])
def test_a_cancel_ends_the_wait_and_stops_the_publish_pod(decided: bool) -> None:
    run = approved(awaiting_run()) if decided else awaiting_run()
    if decided:
        run = with_status(run, compute_approval_step(run, None, False, NOW).status)
    data = run.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["cancel"] = True
    step = compute_approval_step(HarnessRun.model_validate(data), PublishPod(False), decided, NOW)
    assert (step.status.phase, step.status.reason) == (Phase.cancelled, Reason.Cancelled)
    assert step.delete_publish_job == decided and not step.create_publish_job
    said = step.status.message or ""
    assert ("may have been pushed" in said) if decided else ("nothing is pushed" in said)


def publishing(report: ChangesReport | None, terminated: dict[str, object] | None = None) -> Any:
    run = approved(awaiting_run(), "alice")
    run = with_status(run, compute_approval_step(run, None, False, NOW).status)
    pod = PublishPod(finished=True, report=report, terminated=terminated or {})
    return compute_approval_step(run, pod, True, NOW + timedelta(minutes=1))


def test_the_publish_pods_report_ends_the_run_with_the_branch_and_pull_request() -> None:
    report = ChangesReport(
        base="a" * 40,
        commit="e" * 40,
        branch="harness/fix-1",
        pull_request_url="https://github.com/acme/widgets/pull/7",
        pull_request_number=7,
    )
    step = publishing(report)
    status = step.status
    assert (status.phase, status.reason, status.exit_code) == (Phase.succeeded, Reason.Succeeded, 0)
    changes = status.changes
    assert changes is not None and (changes.commit, changes.branch, changes.pull_request_number) == (
        "e" * 40,
        "harness/fix-1",
        7,
    )
    # What the attempt kept stays: the patch, its ConfigMap, the counts.
    assert (changes.patch_sha256, changes.files, changes.tree) == ("c" * 64, 2, "d" * 40)
    assert changes.patch_config_map_name == "fix-1-changes"
    assert "approved by alice" in (status.message or "") and "pull/7" in (status.message or "")
    assert status.progress is not None and status.completion_time


def test_a_refused_publish_ends_the_run_with_the_publishers_reason() -> None:
    report = ChangesReport(
        base="a" * 40, reason=Reason.KeptChangeMismatch, message="the kept patch was edited"
    )
    status = publishing(report).status
    assert (status.phase, status.reason) == (Phase.failed, Reason.KeptChangeMismatch)
    assert status.message == "the kept patch was edited"


def test_a_publish_pod_ending_without_a_report_is_lost() -> None:
    status = publishing(None, {"reason": "OOMKilled", "exitCode": 137}).status
    assert (status.phase, status.reason) == (Phase.failed, Reason.PublishLost)
    assert "OOMKilled" in (status.message or "")


@pytest.mark.parametrize(
    ("text", "seconds"), [("72h", 259200), ("1h30m", 5400), ("10s", 10), ("720h", 2592000)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration_seconds(text) == seconds


def test_what_the_gateway_metered_beyond_the_attempts_is_counted_at_the_end() -> None:
    from harness_operator.api.v1alpha1 import Usage
    from harness_operator.core.status.approval import add_unattributed

    report = ChangesReport(base="a" * 40, commit="e" * 40, branch="harness/fix-1")
    status = publishing(report).status
    before = status.usage.input_tokens if status.usage and status.usage.input_tokens else 0
    rest = Usage(input_tokens=50, output_tokens=5, cost_usd=0.01, cost_source="metered")
    counted = add_unattributed(status, rest)
    assert counted.usage is not None and counted.usage.input_tokens == before + 50
    assert (
        counted.progress is not None and counted.progress.tokens is not None and counted.progress.tokens >= 55
    )
