"""The operator's audit records of a run (core/status/audit.py)."""

import json

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.core.status.audit import build_audit_records, build_audit_summary

RUN = HarnessRun.model_validate(
    {
        "metadata": {
            "name": "r",
            "namespace": "ns",
            "uid": "u",
            "annotations": {"agentharness.dev/author": "alice"},
        },
        "spec": {
            "provider": "claude",
            "prompt": "fix the bug with sk-prompt-secret",
            "fallback": [{"provider": "codex"}],
            "credentials": [{"env": "GH_TOKEN", "secretKeyRef": {"name": "gh", "key": "token"}}],
        },
    }
)
ACCEPTED = [{"type": "Accepted", "status": "True", "reason": "Accepted"}]
DONE = [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]
ENDED = {
    "index": 1,
    "provider": "claude",
    "completionTime": "2026-12-01T08:00:00Z",
    "exitCode": 0,
    "reason": "Succeeded",
    "usage": {"inputTokens": 10, "outputTokens": 2, "costUSD": 0.1, "costSource": "metered"},
}


def status(**fields: object) -> HarnessRunStatus:
    return HarnessRunStatus.model_validate(fields)


def test_the_first_write_records_who_created_the_run_and_what_it_was_granted():
    (record,) = build_audit_records(RUN, None, status(conditions=ACCEPTED, traceID="ab" * 16))
    assert record == {
        "audit": "run-accepted",
        "namespace": "ns",
        "run": "r",
        "runUID": "u",
        "traceID": "ab" * 16,
        "createdBy": "alice",
        "providers": ["claude", "codex"],
        "credentials": ["GH_TOKEN=gh"],
    }
    assert build_audit_records(RUN, status(conditions=ACCEPTED), status(conditions=ACCEPTED)) == []


def test_an_attempts_end_an_approval_and_the_runs_end_each_once():
    before = status(conditions=ACCEPTED, attempts=[{**ENDED, "completionTime": None}])
    after = status(
        conditions=DONE,
        phase="Succeeded",
        reason="Succeeded",
        attempts=[ENDED],
        approval={"decision": "Approved", "user": "bob", "time": "2026-12-01T08:10:00Z"},
        changes={"branch": "agent/r", "commit": "c0ffee", "pullRequestURL": "http://forge/pulls/1"},
        usage={"costUSD": 0.1, "costSource": "metered"},
    )
    records = build_audit_records(RUN, before, after)
    assert [r["audit"] for r in records] == ["attempt-ended", "approval-decided", "run-finished"]
    attempt, approval, finished = records
    assert (attempt["attempt"], attempt["reason"], attempt["costUSD"], attempt["costSource"]) == (
        1,
        "Succeeded",
        0.1,
        "metered",
    )
    assert (approval["decision"], approval["user"]) == ("Approved", "bob")
    assert (finished["branch"], finished["pullRequestURL"], finished["cancelled"]) == (
        "agent/r",
        "http://forge/pulls/1",
        False,
    )
    assert build_audit_records(RUN, after, after) == []
    assert "sk-prompt-secret" not in json.dumps(records)


def test_the_status_summary_holds_the_author_the_canceller_once_cancelled_and_the_grants_by_name():
    summary = build_audit_summary(RUN)
    assert summary is not None
    assert summary.model_dump(by_alias=True, exclude_none=True) == {
        "createdBy": "alice",
        "credentials": ["GH_TOKEN=gh"],
    }
    noted = RUN.model_copy(deep=True)
    noted.metadata["annotations"]["agentharness.dev/cancelled-by"] = "bob"
    assert build_audit_summary(noted).cancelled_by is None  # not cancelled: nobody cancelled it
    noted.spec.cancel = True
    assert build_audit_summary(noted).cancelled_by == "bob"
    bare = HarnessRun.model_validate(
        {"metadata": {"name": "b", "namespace": "ns"}, "spec": {"provider": "claude", "prompt": "p"}}
    )
    assert build_audit_summary(bare) is None


def test_compute_status_writes_the_summary():
    from datetime import UTC, datetime

    from harness_operator.core.status.observed import Observed
    from harness_operator.core.status.status import compute_status

    status = compute_status(RUN, Observed(providers=["claude", "codex"]), datetime(2026, 12, 1, tzinfo=UTC))
    assert status.audit is not None and status.audit.created_by == "alice"
