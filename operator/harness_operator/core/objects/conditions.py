"""Kubernetes-style condition helpers; lastTransitionTime moves only when status flips (pure)."""

from __future__ import annotations

from datetime import datetime

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Condition, HarnessRun
from harness_operator.contract.times import timestamp

ACCEPTED = "Accepted"
SUCCEEDED = "Succeeded"
# kstatus' standard conditions, read by Flux and other GitOps tools; Reconciling and Stalled are
# "abnormal-true": present only while true, as Flux's own objects write them.
READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """A new list with `type_` set; its transition time kept unless the status changed."""
    previous = find_condition(conditions, type_)
    since = previous.last_transition_time if previous and previous.status == status else timestamp(now)
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    others = [c for c in conditions if c.type != type_]
    order = {ACCEPTED: 0, SUCCEEDED: 1, READY: 2, RECONCILING: 3, STALLED: 4}
    return sorted([*others, updated], key=lambda c: order.get(c.type, 99))


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_finished(conditions: list[Condition]) -> bool:
    """The run has ended: Succeeded is True or False."""
    succeeded = find_condition(conditions, SUCCEEDED)
    return succeeded is not None and succeeded.status in (TRUE, FALSE)


def is_succeeded(conditions: list[Condition]) -> bool:
    """The run has ended in success: Succeeded is True."""
    succeeded = find_condition(conditions, SUCCEEDED)
    return succeeded is not None and succeeded.status == TRUE


def is_failed(conditions: list[Condition]) -> bool:
    """The run has ended without success: Succeeded is False."""
    succeeded = find_condition(conditions, SUCCEEDED)
    return succeeded is not None and succeeded.status == FALSE


def is_running(conditions: list[Condition]) -> bool:
    """An attempt's agent runs: Succeeded is Unknown with reason Running (what phase Running says)."""
    succeeded = find_condition(conditions, SUCCEEDED)
    return succeeded is not None and succeeded.status == UNKNOWN and succeeded.reason == Reason.Running


def compute_kstatus_conditions(
    conditions: list[Condition], generation: int | None, now: datetime
) -> list[Condition]:
    """Ready, Reconciling and Stalled following Succeeded, with its reason and message: Ready is True
    only once the run succeeded; Reconciling is True while it waits or runs; Stalled is True once it
    failed for good. kstatus then reads a run as InProgress, Current or Failed."""
    succeeded = find_condition(conditions, SUCCEEDED)
    if succeeded is None:
        return conditions
    reason, message = succeeded.reason, succeeded.message
    ready = TRUE if succeeded.status == TRUE else FALSE
    conds = set_condition(conditions, READY, ready, reason, message, generation, now)
    # The one of Reconciling and Stalled that holds is set over its previous self (its transition time
    # kept while it stays True); the other is dropped.
    holds = {UNKNOWN: RECONCILING, FALSE: STALLED}.get(succeeded.status)
    if holds is not None:
        conds = set_condition(conds, holds, TRUE, reason, message, generation, now)
    return [c for c in conds if c.type not in (RECONCILING, STALLED) or c.type == holds]


def find_succeeded(run: HarnessRun) -> str | None:
    """The Succeeded condition's status, if any."""
    cond = find_condition(run.status.conditions if run.status else [], SUCCEEDED)
    return cond.status if cond else None
