"""Kubernetes-style condition helpers; lastTransitionTime moves only when status flips (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from harness_operator.api.v1alpha1 import Condition

ACCEPTED = "Accepted"
SUCCEEDED = "Succeeded"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes it."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_time(value: str | None) -> str | None:
    """Any RFC 3339 time ('Z' or '+00:00', with or without fractions) in Kubernetes' form."""
    if not value:
        return None
    return timestamp(datetime.fromisoformat(value).astimezone(UTC))


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
    order = {ACCEPTED: 0, SUCCEEDED: 1}
    return sorted([*others, updated], key=lambda c: order.get(c.type, 99))


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_finished(conditions: list[Condition]) -> bool:
    """The run has ended: Succeeded is True or False."""
    succeeded = find_condition(conditions, SUCCEEDED)
    return succeeded is not None and succeeded.status in (TRUE, FALSE)
