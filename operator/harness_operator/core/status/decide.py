"""decide: what one reconcile does, from what it gathered (pure); reconcile.py gathers and acts.

The status to write (as a merge patch), the Events to post, the Jobs to delete and whether the run's
namespace should wake its queue follow from the run as it was, the status computed for it and the
attempts observed; none of it reads the API server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import AttemptOutcome, HarnessRun, HarnessRunStatus, Usage
from harness_operator.core.objects.conditions import (
    SUCCEEDED,
    find_condition,
    is_failed,
    is_finished,
)
from harness_operator.core.objects.naming import end_event_name
from harness_operator.core.queue.fairqueue import WAITING_REASONS
from harness_operator.core.status.observed import FINISHED, ObservedAttempt


@dataclass(frozen=True)
class EventSpec:
    """A core/v1 Event to post on the run; `name` set: the run's end, posted once, before the status."""

    type: str
    reason: str
    message: str
    name: str | None = None


@dataclass(frozen=True)
class Decision:
    """What to apply: a status merge patch (None: unchanged), Events, and whether to wake the queue."""

    status: HarnessRunStatus
    patch: dict[str, Any] | None = None
    events: list[EventSpec] = field(default_factory=list)
    wake: bool = False


def build_status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch from `old` to `new` (a merge patch keeps keys it does not name: null them out)."""
    if old == new:
        return None
    return {**{key: None for key in old if key not in new}, **new}


def cost_unknown_fix(usage: Usage, model: str | None) -> str:
    """Why an attempt's cost is unknown, as the fix: a price only helps once tokens and model are known."""
    if usage.input_tokens is None and usage.output_tokens is None:
        return (
            "the CLI reported no token counts, so no price can help: route the provider through the model "
            "gateway (the chart's modelGateway), which meters every call"
        )
    if model is None:
        return "the CLI did not say which model answered: name it in spec.with (its model option)"
    return (
        f"no price covers model {model}: add spec.pricing for it to the provider's ClusterHarnessDefinition "
        "(a namespaced HarnessDefinition's price only raises the platform's), or request a model the price "
        "table lists"
    )


def tool_denied_message(run: HarnessRun, attempt: AttemptOutcome) -> str:
    """Whose refusal it was: the run's spec.tools, or (the run sets none) the CLI's own permission default
    or its provider definition's spec.tools (a run's status does not tell those two apart); with the fix."""
    tools = ", ".join(attempt.denied_tools or [])
    asked = f"attempt {attempt.index} ({attempt.provider}): the agent asked for {tools}"
    if run.spec.tools is not None:
        return f"{asked}, which the run's spec.tools refused; they did not run"
    return (
        f"{asked}, which was refused; they did not run. The run sets no spec.tools, so this was not the "
        f"run's policy: the {attempt.provider} CLI's own permission default refused them (in a run nobody "
        "answers its questions; an ACP agent's requests get spec.acpPermission, deny by default), or the "
        f"provider definition's spec.tools if it has one. Allow them with spec.tools.allow: [{tools}] "
        "(within the definition's policy)"
    )


def decide_events(
    run: HarnessRun, previous: HarnessRunStatus | None, status: HarnessRunStatus
) -> list[EventSpec]:
    """Events for what changed: attempts newly lost or preempted, attempts newly reporting tools their
    policy refused, attempts newly ended with a cost nobody knows under a cost limit, and the run's reason
    or phase moving (to any reason but Pending)."""
    events = []
    taken = (Reason.JobLost, Reason.Preempted)
    lost_before = {a.index for a in previous.attempts if a.reason in taken} if previous else set()
    for attempt in status.attempts:
        if attempt.reason in taken and attempt.index not in lost_before:
            events.append(EventSpec("Warning", str(attempt.reason), attempt.message or ""))
    denied_before = {a.index for a in previous.attempts if a.denied_tools} if previous else set()
    for attempt in status.attempts:
        if attempt.denied_tools and attempt.index not in denied_before:
            events.append(EventSpec("Warning", Reason.ToolDenied, tool_denied_message(run, attempt)))
    limits = run.spec.limits
    if limits is not None and limits.max_cost_usd is not None:
        ended_before = {a.index for a in previous.attempts if a.usage} if previous else set()
        for attempt in status.attempts:
            if attempt.usage and attempt.usage.cost_source == "unknown" and attempt.index not in ended_before:
                message = (
                    f"attempt {attempt.index} ({attempt.provider}, model {attempt.model or 'unknown'}): "
                    f"its cost is unknown, so maxCostUSD {limits.max_cost_usd} could not be enforced; "
                    + cost_unknown_fix(attempt.usage, attempt.model)
                )
                events.append(EventSpec("Warning", Reason.CostUnknown, message))

    def verdict(s: HarnessRunStatus) -> tuple[str | None, str | None]:
        succeeded = find_condition(s.conditions, SUCCEEDED)
        return s.reason, succeeded.status if succeeded else None

    # Pending (the Job made, its pod not yet running) is the status's to say: an Event for it would be one
    # more write per run for what the next one (Running, or why it waits) says anyway.
    moved = (verdict(previous) if previous else (None, None)) != verdict(status)
    if moved and status.reason != Reason.Pending:
        failed = is_failed(status.conditions) or status.reason in (Reason.FallingBack, Reason.Retrying)
        ended = is_finished(status.conditions)
        name = end_event_name(run.metadata["name"], run.metadata.get("uid", "")) if ended else None
        events.append(
            EventSpec(
                "Warning" if failed else "Normal", status.reason or Reason.Updated, status.message or "", name
            )
        )
    return events


def decide_wake(previous: HarnessRunStatus | None, status: HarnessRunStatus) -> bool:
    """The namespace's queue moves: the run ended now, or it left the queue to wait for an output or
    budget (its place goes to the next)."""
    before = previous.reason if previous else None
    ended = is_finished(status.conditions) and not is_finished(previous.conditions if previous else [])
    return ended or (status.reason in WAITING_REASONS and before not in WAITING_REASONS)


def decide(run: HarnessRun, status: HarnessRunStatus) -> Decision:
    """Everything one reconcile applies once `status` is computed for `run`."""
    previous = run.status
    patch = build_status_patch(previous.to_api() if previous else {}, status.to_api())
    events = decide_events(run, previous, status) if patch is not None else []
    return Decision(status, patch, events, decide_wake(previous, status))


def decide_deletions(attempts: Sequence[ObservedAttempt], cancelled: bool) -> list[str]:
    """The Jobs to delete: those of ended attempts whose agent container still runs (the runner could
    not stop it, or died) or that Kueue took back (before it admits them again), and under spec.cancel
    those of the attempts not finished."""
    ended = [a for a in attempts if a.state == FINISHED and (a.agent_running or a.withdrawn)]
    stopped = [a for a in attempts if cancelled and a.state != FINISHED]
    return [a.job_name for a in sorted(ended + stopped, key=lambda a: a.index) if a.job_name]
