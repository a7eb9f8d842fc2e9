"""HarnessBudget arithmetic: the current period, spend derived from runs, admission and caps (pure).

Spend is never a stored counter: it is recomputed from the covered runs as they are (their start time,
their status's cost, the cap each reserved when it started), so an operator restart neither loses nor
doubles it. A run in flight counts at its reserved cap; a finished run at its actual cost, or at its cap
when its cost is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from harness_operator.api.v1alpha1 import BudgetPeriod, HarnessBudgetSpec, HarnessBudgetStatus, WhenExhausted

ISO = "%Y-%m-%dT%H:%M:%SZ"


def compute_period(spec: HarnessBudgetSpec, now: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the period holding `now` (UTC calendar periods; rolling: the last window)."""
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if spec.period == BudgetPeriod.daily:
        return day, day + timedelta(days=1)
    if spec.period == BudgetPeriod.weekly:
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if spec.period == BudgetPeriod.monthly:
        start = day.replace(day=1)
        return start, (start + timedelta(days=32)).replace(day=1)
    window = timedelta(seconds=spec.window_seconds or 0)
    return now - window, now + window


def is_covered(spec: HarnessBudgetSpec, labels: Mapping[str, str]) -> bool:
    """Whether the budget covers a run of its namespace with these labels."""
    wanted = spec.selector.match_labels if spec.selector else {}
    return all(labels.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class RunCharge:
    """What one covered run weighs: read from its status by the caller."""

    name: str
    start: datetime
    finished: bool
    cost_usd: float | None = None
    tokens: int = 0
    reserved_usd: float | None = None

    @property
    def charge_usd(self) -> float:
        if self.finished and self.cost_usd is not None:
            return self.cost_usd
        return self.reserved_usd or 0.0


def compute_budget_status(
    spec: HarnessBudgetSpec, runs: Sequence[RunCharge], now: datetime, generation: int | None = None
) -> HarnessBudgetStatus:
    """Spent (finished runs), reserved (runs in flight) and remaining for the current period."""
    start, end = compute_period(spec, now)
    current = [r for r in runs if start <= r.start < end or not r.finished]
    spent = sum(r.charge_usd for r in current if r.finished)
    reserved = sum(r.charge_usd for r in current if not r.finished)
    if spec.period == BudgetPeriod.rolling and current:
        end = min(r.start for r in current) + timedelta(seconds=spec.window_seconds or 0)
    limit = spec.limits.max_cost_usd
    return HarnessBudgetStatus(
        period_start=start.strftime(ISO),
        period_end=end.strftime(ISO),
        spent_usd=round(spent, 6),
        reserved_usd=round(reserved, 6),
        remaining_usd=None if limit is None else round(max(0.0, limit - spent - reserved), 6),
        tokens=sum(r.tokens for r in current),
        runs=len(current),
        unknown_cost_runs=sum(1 for r in current if r.finished and r.cost_usd is None),
        observed_generation=generation,
    )


@dataclass(frozen=True)
class Admission:
    """Start with `cap_usd` as the run's effective maxCostUSD, or do not start (reason, message)."""

    admitted: bool
    cap_usd: float | None = None
    reason: str | None = None
    message: str = ""
    retry_at: datetime | None = None


def compute_admission(
    name: str,
    spec: HarnessBudgetSpec,
    status: HarnessBudgetStatus,
    run_max_cost_usd: float | None,
    now: datetime,
) -> Admission:
    """Whether a covered run may start now, and its cap: the smaller of its own maxCostUSD (else the
    budget's default reservation) and what the budget has left after the reservations in flight."""
    limits = spec.limits
    end = datetime.strptime(status.period_end, ISO).replace(tzinfo=now.tzinfo) if status.period_end else None
    exhausted: list[str] = []
    if limits.max_runs is not None and (status.runs or 0) >= limits.max_runs:
        exhausted.append(f"{status.runs} of maxRuns {limits.max_runs} runs started")
    if limits.max_tokens is not None and (status.tokens or 0) >= limits.max_tokens:
        exhausted.append(f"{status.tokens} of maxTokens {limits.max_tokens} tokens used")
    remaining = status.remaining_usd
    if limits.max_cost_usd is not None and remaining is not None and remaining <= 0:
        exhausted.append(
            f"{status.spent_usd} USD spent and {status.reserved_usd} USD reserved of maxCostUSD "
            f"{limits.max_cost_usd}"
        )
    if exhausted:
        fail = spec.when_exhausted == WhenExhausted.fail
        then = "the run fails (whenExhausted: Fail)" if fail else f"the run waits until {status.period_end}"
        return Admission(
            False,
            reason="BudgetExhausted",
            message=f"HarnessBudget {name}: " + "; ".join(exhausted) + f" this period; {then}",
            retry_at=None if fail else end,
        )
    wanted = run_max_cost_usd if run_max_cost_usd is not None else spec.default_reservation_usd
    if remaining is None:
        return Admission(True, cap_usd=wanted)
    return Admission(True, cap_usd=remaining if wanted is None else min(wanted, remaining))
