"""The operator's audit trail of a run (pure): status.audit, and one record per decision a status write
records: the run accepted with who created it (the author annotation admission holds to the requester)
and what it asked for, each attempt's end with what it was metered, the approval's decision and who made
it, and the run's end with what was published where and who cancelled it. Level-based, as the spans are:
a write that records nothing new yields nothing. Names and figures only, never a prompt or a secret's
value."""

from __future__ import annotations

from typing import Any

from harness_operator.api.v1alpha1 import AuditStatus, HarnessRun, HarnessRunStatus, Usage
from harness_operator.core.objects.conditions import is_finished
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR, ANNOTATION_CANCELLED_BY
from harness_operator.core.status.trace import compute_newly_ended

AUDIT = "audit"  # every record's key naming what it records


def _usage(usage: Usage | None) -> dict[str, Any]:
    if usage is None:
        return {}
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "costUSD": usage.cost_usd,
        "costSource": str(usage.cost_source),
    }


def build_audit_summary(run: HarnessRun) -> AuditStatus | None:
    """status.audit: the author and, once spec.cancel is set, who set it, as admission holds them (the
    policy <release>-approvals: each the requester, written once); the run's own grants by name. None
    when there is none of these."""
    annotations = run.metadata.get("annotations") or {}
    summary = AuditStatus(
        created_by=annotations.get(ANNOTATION_AUTHOR),
        cancelled_by=annotations.get(ANNOTATION_CANCELLED_BY) if run.spec.cancel else None,
        credentials=sorted(f"{c.env}={c.secret_key_ref.name}" for c in run.spec.credentials),
    )
    return summary if summary != AuditStatus() else None


def build_audit_records(
    run: HarnessRun, before: HarnessRunStatus | None, after: HarnessRunStatus
) -> list[dict[str, Any]]:
    """The records of what the write from `before` to `after` decided."""
    meta = run.metadata
    common = {
        "namespace": meta["namespace"],
        "run": meta["name"],
        "runUID": meta.get("uid"),
        "traceID": after.trace_id,
    }
    records: list[dict[str, Any]] = []
    summary = build_audit_summary(run) or AuditStatus()
    if before is None or not before.conditions:
        records.append(
            {
                AUDIT: "run-accepted",
                **common,
                "createdBy": summary.created_by,
                "providers": [run.spec.provider, *(f.provider for f in run.spec.fallback or [])],
                "credentials": summary.credentials,
            }
        )
    for attempt in compute_newly_ended(before, after):
        records.append(
            {
                AUDIT: "attempt-ended",
                **common,
                "attempt": attempt.index,
                "provider": attempt.provider,
                "reason": attempt.reason,
                "exitCode": attempt.exit_code,
                **_usage(attempt.usage),
            }
        )
    decided = after.approval is not None and after.approval.decision is not None
    if decided and not (before and before.approval and before.approval.decision):
        assert after.approval is not None
        records.append(
            {
                AUDIT: "approval-decided",
                **common,
                "decision": str(after.approval.decision),
                "user": after.approval.user,
                "time": after.approval.time,
            }
        )
    if is_finished(after.conditions) and not (before and is_finished(before.conditions)):
        changes = after.changes
        records.append(
            {
                AUDIT: "run-finished",
                **common,
                "phase": str(after.phase or ""),
                "reason": after.reason,
                "cancelled": bool(run.spec.cancel),
                "cancelledBy": summary.cancelled_by,
                "branch": changes.branch if changes else None,
                "commit": changes.commit if changes else None,
                "pullRequestURL": changes.pull_request_url if changes else None,
                **_usage(after.usage),
            }
        )
    return records
