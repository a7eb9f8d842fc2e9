"""decide: the status patch, the Events, the Jobs to delete and whether the queue moves, as a table."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus, Usage
from harness_operator.core.status.decide import (
    EventSpec,
    build_status_patch,
    cost_unknown_fix,
    decide,
    decide_deletions,
    decide_wake,
)
from harness_operator.core.status.observed import FINISHED, PENDING, RUNNING, ObservedAttempt


def status(phase: str, reason: str, succeeded: str = "Unknown", **extra: Any) -> HarnessRunStatus:
    return HarnessRunStatus.model_validate(
        {
            "phase": phase,
            "reason": reason,
            "message": f"{reason} detail",
            "conditions": [{"type": "Succeeded", "status": succeeded, "reason": reason}],
            **extra,
        }
    )


def run(previous: HarnessRunStatus | None, **spec: Any) -> HarnessRun:
    body: dict[str, Any] = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
        "spec": {"provider": "claude", "prompt": "p", **spec},
    }
    if previous is not None:
        body["status"] = previous.to_api()
    return HarnessRun.model_validate(body)


QUEUED = status("Pending", "Queued")
RUNNING_S = status("Running", "Running", attempts=[{"index": 1, "provider": "claude", "jobName": "r-a1"}])
LOST_ATTEMPT = {
    "index": 1,
    "provider": "claude",
    "exitCode": 137,
    "reason": "JobLost",
    "message": "Job r-a1 vanished",
}
UNKNOWN_COST = {
    "index": 1,
    "provider": "claude",
    "exitCode": 0,
    "model": "m",
    "usage": {"costSource": "unknown"},
}
LOST = status("Failed", "JobLost", "False", attempts=[LOST_ATTEMPT])
SUCCEEDED = status("Succeeded", "Succeeded", "True", attempts=[UNKNOWN_COST])
WAITING = status("Pending", "WaitingForRunOutput")
PENDING_S = status("Pending", "Pending", attempts=[{"index": 1, "provider": "claude", "jobName": "r-a1"}])
DENIED = status(
    "Succeeded", "Succeeded", "True", attempts=[{**UNKNOWN_COST, "deniedTools": ["Bash", "WebFetch"]}]
)


@pytest.mark.parametrize(
    ("previous", "new", "spec", "events", "wake"),
    [
        (QUEUED, QUEUED, {}, None, False),  # nothing changed: no patch, no Event
        (None, QUEUED, {}, [EventSpec("Normal", "Queued", "Queued detail")], False),
        (QUEUED, RUNNING_S, {}, [EventSpec("Normal", "Running", "Running detail")], False),
        (None, PENDING_S, {}, [], False),  # the status says it; the next Event (Running) follows
        (PENDING_S, RUNNING_S, {}, [EventSpec("Normal", "Running", "Running detail")], False),
        (
            RUNNING_S,
            LOST,
            {},
            [
                EventSpec("Warning", "JobLost", "Job r-a1 vanished"),
                EventSpec("Warning", "JobLost", "JobLost detail", "r.u.end"),
            ],
            True,
        ),
        (LOST, LOST, {}, None, False),  # lost once, said once
        (RUNNING_S, SUCCEEDED, {}, [EventSpec("Normal", "Succeeded", "Succeeded detail", "r.u.end")], True),
        (
            RUNNING_S,
            SUCCEEDED,
            {"limits": {"maxCostUSD": 1.0}},
            [
                EventSpec(
                    "Warning",
                    "CostUnknown",
                    "attempt 1 (claude, model m): its cost is unknown, so maxCostUSD 1.0 could not be "
                    "enforced; the CLI reported no token counts, so no price can help: route the provider "
                    "through the model gateway (the chart's modelGateway), which meters every call",
                ),
                EventSpec("Normal", "Succeeded", "Succeeded detail", "r.u.end"),
            ],
            True,
        ),
        (
            QUEUED,
            WAITING,
            {},
            [EventSpec("Normal", "WaitingForRunOutput", "WaitingForRunOutput detail")],
            True,
        ),
        (WAITING, WAITING, {}, None, False),  # still waiting: its place was given up before
        (
            RUNNING_S,
            DENIED,
            {"tools": {"shell": False}},
            [
                EventSpec(
                    "Warning",
                    "ToolDenied",
                    "attempt 1 (claude): the agent asked for Bash, WebFetch, which the run's spec.tools "
                    "refused; they did not run",
                ),
                EventSpec("Normal", "Succeeded", "Succeeded detail", "r.u.end"),
            ],
            True,
        ),
        (
            RUNNING_S,
            DENIED,
            {},  # no spec.tools: the CLI's own default refused, and the Event says so
            [
                EventSpec(
                    "Warning",
                    "ToolDenied",
                    "attempt 1 (claude): the agent asked for Bash, WebFetch, which was refused; they did not "
                    "run. The run sets no spec.tools, so this was not the run's policy: the claude CLI's own "
                    "permission default refused them (in a run nobody answers its questions; an ACP agent's "
                    "requests get spec.acpPermission, deny by default), or the provider definition's "
                    "spec.tools if it has one. Allow them with spec.tools.allow: [Bash, WebFetch] (within "
                    "the definition's policy)",
                ),
                EventSpec("Normal", "Succeeded", "Succeeded detail", "r.u.end"),
            ],
            True,
        ),
    ],
)
def test_decide(
    previous: HarnessRunStatus | None,
    new: HarnessRunStatus,
    spec: dict[str, Any],
    events: list[EventSpec] | None,
    wake: bool,
) -> None:
    decision = decide(run(previous, **spec), new)
    assert decision.status == new
    assert (decision.patch is None) == (events is None)
    assert decision.events == (events or [])
    assert decision.wake is wake
    assert decide_wake(previous, new) is wake


def test_the_patch_nulls_what_the_new_status_no_longer_has() -> None:
    assert build_status_patch({"a": 1, "b": 2}, {"a": 1, "c": 3}) == {"b": None, "a": 1, "c": 3}
    assert build_status_patch({"a": 1}, {"a": 1}) is None


def test_cancel_deletes_the_jobs_of_attempts_not_finished() -> None:
    attempts = [
        ObservedAttempt(1, "claude", "r-a1", state=FINISHED),
        ObservedAttempt(2, "codex", "r-a2", state=RUNNING),
        ObservedAttempt(3, "gemini", None, state=PENDING),
    ]
    assert decide_deletions(attempts, cancelled=True) == ["r-a2"]
    assert decide_deletions(attempts, cancelled=False) == []


@pytest.mark.parametrize(
    ("usage", "model", "fix"),
    [
        ({}, "m", "the CLI reported no token counts, so no price can help"),
        ({"outputTokens": 5}, None, "the CLI did not say which model answered: name it in spec.with"),
        ({"inputTokens": 5}, "m", "no price covers model m: add spec.pricing for it"),
    ],
)
def test_an_unknown_cost_names_what_is_missing(usage: dict[str, int], model: str | None, fix: str) -> None:
    assert cost_unknown_fix(Usage.model_validate(usage), model).startswith(fix)
