"""What `harnessctl logs` shows of a run: events from pod logs, or from status when a log is gone (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, HarnessRunStatus
from harness_operator.contract.events import Event, text_event
from harness_operator.contract.times import parse_time
from harness_operator.contract.usage import tokens_of
from harness_operator.core.objects.conditions import SUCCEEDED, UNKNOWN
from harness_operator.core.objects.naming import LABEL_ATTEMPT, RUNNER_CONTAINER
from harness_operator.core.status.status import describe_changes

LOG_STATES = ("running", "terminated")
UNCLAIMED_SECONDS = 30  # an operator that watches a run's namespace writes its status within a second


def is_unclaimed(run: dict[str, Any], now: datetime) -> bool:
    """No operator has written the run's status UNCLAIMED_SECONDS after it was created."""
    created = parse_time((run.get("metadata") or {}).get("creationTimestamp"))
    if run.get("status") or created is None:
        return False
    return now - created > timedelta(seconds=UNCLAIMED_SECONDS)


def build_pods_by_attempt(pods: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The newest pod of each attempt, by the attempt label our Jobs put on their pods."""
    found: dict[int, dict[str, Any]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        label = str((pod["metadata"].get("labels") or {}).get(LABEL_ATTEMPT, ""))
        if label.isdigit():
            found[int(label)] = pod
    return found


def _runner_state(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    runner: dict[str, Any] = next((s for s in statuses if s.get("name") == RUNNER_CONTAINER), {})
    return dict(runner.get("state") or {})


def is_log_readable(pod: dict[str, Any]) -> bool:
    """The runner's container started, so the API server can serve its log (the attempt's)."""
    return any(key in _runner_state(pod) for key in LOG_STATES)


def is_attempt_over(pod: dict[str, Any]) -> bool:
    """The runner's container terminated: its log is complete."""
    return "terminated" in _runner_state(pod)


def build_attempt_events(
    attempt: Attempt, total: int, output: str | None = None, retry: int = 0
) -> list[Event]:
    """An attempt whose log is gone, told from its status entry (and the output ConfigMap's text);
    `retry`: which retry of its provider it is (0: none)."""
    usage = attempt.usage
    events = [
        Event("attempt", attempt=attempt.index, total=total, provider=attempt.provider, retry=retry or None)
    ]
    if attempt.session_id or attempt.model:
        events.append(Event("session", session=attempt.session_id, model=attempt.model))
    if output is not None:
        answer = text_event(output)
        if answer is not None:
            events.append(answer)
    if attempt.exit_code is not None or attempt.reason:
        events.append(
            Event(
                "result",
                attempt=attempt.index,
                provider=attempt.provider,
                exit_code=attempt.exit_code,
                reason=attempt.reason,
                message=attempt.message,
                turns=usage.turns if usage else None,
                tokens=tokens_of(usage).total,
                cost_usd=usage.cost_usd if usage else None,
            )
        )
    return events


def build_run_event(status: HarnessRunStatus | None, unclaimed_in: str | None = None) -> Event:
    """The run as a whole, from its status: phase, reason, exit code and usage; a run no operator has
    claimed (`unclaimed_in`: its namespace) says where to look."""
    if status is None:
        message = None
        if unclaimed_in is not None:
            message = (
                f"no operator has written this run's status in {UNCLAIMED_SECONDS}s: is namespace "
                f'"{unclaimed_in}" one an operator watches (the chart\'s watchNamespaces), and is the '
                "operator running?"
            )
        return Event("run", phase="Pending", reason=Reason.Pending, message=message)
    usage = status.usage
    return Event(
        "run",
        phase=str(status.phase) if status.phase else "Pending",
        reason=status.reason,
        exit_code=status.exit_code,
        message=status.message,
        turns=usage.turns if usage else None,
        tokens=tokens_of(usage).total,
        cost_usd=usage.cost_usd if usage else None,
        changes=describe_changes(status.changes) if status.changes else None,
    )


def build_waiting_event(status: HarnessRunStatus | None) -> Event | None:
    """Why the run waits, from its Succeeded condition while it is Unknown for a reason other than
    Running (its pod unscheduled, a fair queue, a budget, Kueue, a retry's backoff); None otherwise."""
    succeeded = next((c for c in (status.conditions if status else []) if c.type == SUCCEEDED), None)
    if succeeded is None or succeeded.status != UNKNOWN or succeeded.reason == Reason.Running:
        return None
    return Event("waiting", reason=succeeded.reason, message=succeeded.message)
