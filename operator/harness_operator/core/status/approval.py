"""A run whose change awaits a person's approval, step by step (pure): the wait entered, the decision read
from the run's annotations, the deadline, the approved change's publish pod and its report.

The decision is read only from the annotations the API server's admission checks (the chart's policy:
who may approve, not the run's author unless allowed), and only while the run awaits it; once recorded in
status.approval it never changes. What the operator does (create or delete the publish Job, post Events)
is what `compute_approval_step` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    ApprovalDecision,
    ApprovalStatus,
    ChangesStatus,
    HarnessRun,
    HarnessRunStatus,
    Phase,
    Usage,
)
from harness_operator.contract.changes import ChangesReport
from harness_operator.contract.result import EXIT_STOPPED
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.core.objects.conditions import (
    FALSE,
    SUCCEEDED,
    TRUE,
    UNKNOWN,
    compute_kstatus_conditions,
    set_condition,
)
from harness_operator.core.objects.naming import (
    ANNOTATION_APPROVER,
    ANNOTATION_DECISION,
    ANNOTATION_DECISION_REASON,
)
from harness_operator.core.pod.publish import compute_changes, lost_publish
from harness_operator.core.status.audit import build_audit_summary
from harness_operator.core.status.awaiting import AWAITING_APPROVAL, REASON_CHARS
from harness_operator.core.status.decide import EventSpec
from harness_operator.core.status.progress import build_final_progress
from harness_operator.core.status.status import build_charged_budget, describe_changes
from harness_operator.core.status.usage import sum_usage


@dataclass(frozen=True)
class PublishPod:
    """The approved change's publish Job as observed: `finished`, and its publisher's report (None: it
    ended without one; `terminated` says how)."""

    finished: bool
    report: ChangesReport | None = None
    terminated: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalStep:
    """What one reconcile of a run awaiting approval does: the status, Events, the publish Job to create
    or delete, and the seconds until its deadline (to be reconciled then)."""

    status: HarnessRunStatus
    events: list[EventSpec] = field(default_factory=list)
    create_publish_job: bool = False
    delete_publish_job: bool = False
    due_in: float | None = None


def read_decision(run: HarnessRun, now: datetime) -> ApprovalStatus | None:
    """The decision the run's annotations hold (admission checked who wrote them), or None."""
    notes = run.metadata.get("annotations") or {}
    decision = notes.get(ANNOTATION_DECISION)
    if decision not in (ApprovalDecision.approved, ApprovalDecision.rejected):
        return None
    reason = str(notes.get(ANNOTATION_DECISION_REASON) or "")[:REASON_CHARS] or None
    user = str(notes.get(ANNOTATION_APPROVER) or "") or None
    return ApprovalStatus(decision=ApprovalDecision(decision), user=user, time=timestamp(now), reason=reason)


def compute_approval_step(
    run: HarnessRun, publish: PublishPod | None, publish_job_exists: bool, now: datetime
) -> ApprovalStep:
    """The next step of a run awaiting approval (is_awaiting_approval): cancelled, decided (Approved: its
    publish Job; Rejected: the end), timed out, still waiting, or published (the publish pod's report)."""
    previous = run.status or HarnessRunStatus()
    approval = previous.approval or ApprovalStatus()
    generation = run.metadata.get("generation")
    status = previous.model_copy(
        update={"observed_generation": generation, "audit": build_audit_summary(run)}
    )
    events: list[EventSpec] = []
    if run.spec.cancel:
        return ApprovalStep(
            _end(status, Phase.cancelled, Reason.Cancelled, _cancel_message(approval), now, EXIT_STOPPED),
            delete_publish_job=publish_job_exists,
        )
    if approval.decision is None:
        decided = read_decision(run, now)
        deadline = parse_time(approval.deadline)
        if decided is None:
            if deadline is not None and now >= deadline:
                message = (
                    f"nobody approved or rejected the change before {approval.deadline} "
                    "(workspace.publish.approval.timeout): nothing is pushed or opened"
                )
                status = status.model_copy(update={"approval": approval})
                return ApprovalStep(_end(status, Phase.failed, Reason.ApprovalTimedOut, message, now, 1))
            due = (deadline - now).total_seconds() if deadline is not None else None
            return ApprovalStep(status, due_in=due)
        approval = decided.model_copy(update={"deadline": approval.deadline})
        status = status.model_copy(update={"approval": approval})
        who = f"by {approval.user or 'an unnamed user'} at {approval.time}"
        why = f": {approval.reason}" if approval.reason else ""
        if approval.decision == ApprovalDecision.rejected:
            events.append(EventSpec("Warning", Reason.Rejected, f"the change was rejected {who}{why}"))
            message = f"the change was rejected {who}{why}; nothing is pushed or opened"
            return ApprovalStep(_end(status, Phase.failed, Reason.ApprovalRejected, message, now, 1), events)
        events.append(EventSpec("Normal", Reason.Approved, f"the change was approved {who}{why}"))
    if publish is None or not publish.finished:
        message = f"the change was approved by {approval.user}: its publish pod pushes it"
        conds = set_condition(
            status.conditions, AWAITING_APPROVAL, FALSE, Reason.Approved, message, generation, now
        )
        conds = set_condition(conds, SUCCEEDED, UNKNOWN, Reason.Publishing, message, generation, now)
        status = status.model_copy(
            update={
                "phase": Phase.running,
                "reason": Reason.Publishing,
                "message": message,
                "conditions": compute_kstatus_conditions(conds, generation, now),
            }
        )
        return ApprovalStep(status, events, create_publish_job=not publish_job_exists)
    return ApprovalStep(_published(run, status, publish, now), events)


def _published(
    run: HarnessRun, status: HarnessRunStatus, publish: PublishPod, now: datetime
) -> HarnessRunStatus:
    """The run's end from its publish pod's report: the kept change's record completed with the commit,
    branch and pull request."""
    kept = status.changes or ChangesStatus()
    if publish.report is None:
        reason, message = lost_publish(publish.terminated)
        return _end(status, Phase.failed, reason, message, now, 1)
    found, failure = compute_changes(publish.report, False, run.metadata["name"])
    published = kept.model_copy(
        update={
            "commit": found.commit if found else None,
            "branch": found.branch if found else None,
            "pull_request_url": found.pull_request_url if found else None,
            "pull_request_number": found.pull_request_number if found else None,
        }
    )
    status = status.model_copy(update={"changes": published})
    if failure is not None:
        return _end(status, Phase.failed, failure[0], failure[1], now, 1)
    approval = status.approval or ApprovalStatus()
    message = f"approved by {approval.user}; {describe_changes(published)}"
    return _end(status, Phase.succeeded, Reason.Succeeded, message, now, 0)


def _cancel_message(approval: ApprovalStatus) -> str:
    if approval.decision == ApprovalDecision.approved:
        return (
            "cancelled by spec.cancel while the approved change was being published: its publish pod is "
            "stopped; the branch may have been pushed already"
        )
    return "cancelled by spec.cancel while the change awaited approval: nothing is pushed or opened"


def _end(
    status: HarnessRunStatus, phase: Phase, reason: str, message: str, now: datetime, exit_code: int
) -> HarnessRunStatus:
    """The run ended: Succeeded set, the AwaitingApproval condition closed, totals and charge final."""
    generation = status.observed_generation
    conds = status.conditions
    approval = status.approval or ApprovalStatus()
    if approval.decision is None:  # the wait ends without a decision: the condition says why
        conds = set_condition(conds, AWAITING_APPROVAL, FALSE, reason, message, generation, now)
    elif approval.decision == ApprovalDecision.rejected:
        conds = set_condition(
            conds, AWAITING_APPROVAL, FALSE, Reason.ApprovalRejected, message, generation, now
        )
    ok = phase == Phase.succeeded
    conds = set_condition(conds, SUCCEEDED, TRUE if ok else FALSE, reason, message, generation, now)
    ended = status.model_copy(
        update={
            "phase": phase,
            "reason": reason,
            "message": message,
            "exit_code": exit_code,
            "completion_time": status.completion_time or timestamp(now),
            "conditions": compute_kstatus_conditions(conds, generation, now),
        }
    )
    return ended.model_copy(
        update={
            "progress": build_final_progress(ended, status.progress),
            "budget": build_charged_budget(ended),
        }
    )


def add_unattributed(status: HarnessRunStatus, rest: Usage) -> HarnessRunStatus:
    """A routed run that ended after its approval, with what the model gateway metered for it beyond its
    attempts' meters counted in its usage, totals and budget charge (as compute_status counts it)."""
    usage = sum_usage([u for u in (status.usage, rest) if u is not None])
    counted = status.model_copy(update={"usage": usage})
    return counted.model_copy(
        update={
            "progress": build_final_progress(counted, status.progress),
            "budget": build_charged_budget(counted),
        }
    )
