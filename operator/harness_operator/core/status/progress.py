"""The run so far, for `kubectl get -w`: status.progress from the finished attempts and the running
attempt's latest event (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRunStatus, Progress
from harness_operator.contract.events import Event
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.contract.usage import tokens_of
from harness_operator.core.objects.conditions import (
    is_running,
)


def format_duration(seconds: float) -> str:
    """kubectl's short form: 45s, 2m5s, 1h3m."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _seconds_between(start: str | None, end: datetime | None) -> float | None:
    begin = parse_time(start)
    return None if begin is None or end is None else (end - begin).total_seconds()


def _plus(a: int | float | None, b: int | float | None) -> Any:
    return None if a is None and b is None else (a or 0) + (b or 0)


def build_final_progress(status: HarnessRunStatus, previous: Progress | None) -> Progress:
    """At the end, the run's totals (the same as status.usage) and how long it took."""
    usage = status.usage
    elapsed = _seconds_between(status.start_time, parse_time(status.completion_time))
    return Progress(
        attempt=status.attempts[-1].index if status.attempts else None,
        turns=usage.turns if usage else None,
        tokens=tokens_of(usage).total,
        cost_usd=usage.cost_usd if usage else None,
        last_tool=previous.last_tool if previous else None,
        duration=None if elapsed is None else format_duration(elapsed),
        update_time=status.completion_time,
    )


def compute_progress(status: HarnessRunStatus, attempt: int, latest: Event | None, now: datetime) -> Progress:
    """The run so far while attempt `attempt` runs: the finished attempts' usage (status.usage) plus that
    attempt's latest `progress` (or `result`) figures from its log; none yet: the finished attempts'."""
    done = status.usage
    live = latest if latest is not None and latest.kind in ("progress", "result") else None
    elapsed = _seconds_between(status.start_time, now)
    previous_tool = status.progress.last_tool if status.progress else None
    return Progress(
        attempt=attempt,
        turns=_plus(done.turns if done else None, live.turns if live else None),
        tokens=_plus(tokens_of(done).total, live.tokens if live else None),
        cost_usd=_plus(done.cost_usd if done else None, live.cost_usd if live else None),
        last_tool=(live.last_tool if live else None) or previous_tool,
        duration=None if elapsed is None else format_duration(elapsed),
        update_time=timestamp(now),
    )


def is_progress_wanted(status: HarnessRunStatus | None) -> bool:
    """The run's last attempt runs in a pod: there is a log to read progress from."""
    if status is None or not is_running(status.conditions) or not status.attempts:
        return False
    last = status.attempts[-1]
    return last.pod_name is not None and last.exit_code is None and last.reason is None


def is_progress_changed(old: Progress | None, new: Progress) -> bool:
    """Worth a status write: the figures moved (the clock alone does not count)."""
    if old is None:
        return True
    fields = ("attempt", "turns", "tokens", "cost_usd", "last_tool")
    return any(getattr(old, f) != getattr(new, f) for f in fields)
