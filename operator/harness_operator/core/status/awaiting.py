"""A run entering the wait for a person's approval of its change (pure): the status it shows, its
deadline (the decision's annotations are core/objects/naming.py's, written by `harnessctl
approve|reject`, checked by the API server's admission, read by core/status/approval.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    ApprovalStatus,
    ChangesStatus,
    HarnessRun,
    HarnessRunStatus,
    Phase,
    parse_duration_seconds,
)
from harness_operator.contract.times import timestamp

AWAITING_APPROVAL = "AwaitingApproval"  # the condition's type
REASON_CHARS = 1024


def is_awaiting_approval(status: HarnessRunStatus | None) -> bool:
    """The run's change waits for a decision or is being published after one (status.approval set, the
    run not ended)."""
    if status is None or status.approval is None:
        return False
    return status.phase not in (Phase.succeeded, Phase.failed, Phase.cancelled)


def compute_deadline(run: HarnessRun, now: datetime) -> str:
    publish = run.spec.workspace.publish if run.spec.workspace else None
    approval = publish.approval if publish else None
    seconds = parse_duration_seconds(approval.timeout) if approval else 72 * 3600
    return timestamp(now + timedelta(seconds=seconds))


def describe_kept(changes: ChangesStatus) -> str:
    """The kept change in a sentence: files, lines, and the paths that need the approval."""
    text = f"{changes.files or 0} files changed (+{changes.insertions or 0} -{changes.deletions or 0})"
    if changes.approval_paths:
        text += f", touching {', '.join(changes.approval_paths)}"
    return text


def build_awaiting(run: HarnessRun, changes: ChangesStatus, now: datetime) -> dict[str, object]:
    """The status fields of a run whose attempt succeeded with its change kept for approval."""
    ns, name = run.metadata["namespace"], run.metadata["name"]
    message = (
        f"the change awaits approval: {describe_kept(changes)}, patch in ConfigMap "
        f"{changes.patch_config_map_name}; approve with `harnessctl approve {name} -n {ns}` or reject with "
        f"`harnessctl reject {name} -n {ns} --reason TEXT`"
    )
    return {
        "phase": Phase.awaiting_approval,
        "reason": Reason.AwaitingApproval,
        "message": message,
        "changes": changes,
        "approval": ApprovalStatus(deadline=compute_deadline(run, now)),
    }
