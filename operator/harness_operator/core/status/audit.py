"""The operator's audit records of a run, one per decision a status write records (pure): the run
accepted with who created it (the author annotation admission holds to the requester) and what it asked
for, each attempt's end with what it was metered, the approval's decision and who made it, and the run's
end with what was published where. Level-based, as the spans are: a write that records nothing new
yields nothing. Names and figures only, never a prompt or a secret's value."""

from __future__ import annotations

from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus, Usage
from harness_operator.core.objects.conditions import is_finished
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR

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
    if before is None or not before.conditions:
        # The run's own grants: env name and Secret, never a value (a definition's are the platform's).
        credentials = sorted(f"{c.env}={c.secret_key_ref.name}" for c in run.spec.credentials)
        records.append(
            {
                AUDIT: "run-accepted",
                **common,
                "createdBy": (meta.get("annotations") or {}).get(ANNOTATION_AUTHOR),
                "providers": [run.spec.provider, *(f.provider for f in run.spec.fallback or [])],
                "credentials": credentials,
            }
        )
    ended_before = {a.index for a in (before.attempts if before else []) if a.completion_time}
    for attempt in after.attempts:
        if attempt.completion_time and attempt.index not in ended_before:
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
                "branch": changes.branch if changes else None,
                "commit": changes.commit if changes else None,
                "pullRequestURL": changes.pull_request_url if changes else None,
                **_usage(after.usage),
            }
        )
    return records
