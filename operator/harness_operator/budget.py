"""HarnessBudget arithmetic: the current period, spend derived from runs, admission and caps (pure).

Spend is never a stored counter: it is recomputed from the covered runs as they are (their start time,
their status's cost, the cap each reserved when it started), so an operator restart neither loses nor
doubles it. A run in flight counts at its reserved cap; a finished run at its actual cost, or at its cap
when its cost is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from harness_operator.api.v1alpha1 import BudgetPeriod, HarnessBudgetSpec, HarnessBudgetStatus, WhenExhausted

ISO = "%Y-%m-%dT%H:%M:%SZ"
BUDGET_EXHAUSTED = "BudgetExhausted"


@dataclass(frozen=True)
class BudgetRef:
    """One HarnessBudget of a namespace, as the watch cache holds it."""

    name: str
    spec: HarnessBudgetSpec
    generation: int | None = None


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
    """What one run weighs in a budget, read from its status; `start` None: it has not started."""

    name: str
    start: datetime | None
    finished: bool
    cost_usd: float | None = None
    tokens: int = 0
    reserved_usd: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    waiting: bool = False  # waits Queued with BudgetExhausted

    @property
    def charge_usd(self) -> float:
        if self.finished and self.cost_usd is not None:
            return self.cost_usd
        return self.reserved_usd or 0.0


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.strptime(value, ISO).replace(tzinfo=UTC)


def build_run_charge(run: Mapping[str, Any]) -> RunCharge:
    """A run's weight from the run object (as a watch delivers it): started when admitted (or when its
    first attempt started), finished when its Succeeded condition is True or False."""
    meta = run.get("metadata") or {}
    status = run.get("status") or {}
    budget = status.get("budget") or {}
    usage = status.get("usage") or {}
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    succeeded = next((c for c in conditions if c.get("type") == "Succeeded"), {})
    tokens = sum(
        int(usage.get(k) or 0) for k in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")
    )
    cost = usage.get("costUSD")
    reserved = budget.get("reservedUSD")
    return RunCharge(
        name=str(meta.get("name", "")),
        start=_parse_time(budget.get("admittedAt")) or _parse_time(status.get("startTime")),
        finished=succeeded.get("status") in ("True", "False"),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        tokens=tokens,
        reserved_usd=float(reserved) if isinstance(reserved, int | float) else None,
        labels=dict(meta.get("labels") or {}),
        waiting=succeeded.get("status") == "Unknown" and succeeded.get("reason") == BUDGET_EXHAUSTED,
    )


def compute_budget_status(
    spec: HarnessBudgetSpec, runs: Sequence[RunCharge], now: datetime, generation: int | None = None
) -> HarnessBudgetStatus:
    """Spent (finished runs), reserved (runs in flight) and remaining for the current period."""
    start, end = compute_period(spec, now)
    current = [
        r
        for r in runs
        if r.start is not None and is_covered(spec, r.labels) and (start <= r.start < end or not r.finished)
    ]
    spent = sum(r.charge_usd for r in current if r.finished)
    reserved = sum(r.charge_usd for r in current if not r.finished)
    if spec.period == BudgetPeriod.rolling and current:
        end = min(r.start for r in current if r.start) + timedelta(seconds=spec.window_seconds or 0)
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
    fail: bool = False  # whenExhausted: Fail


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
            reason=BUDGET_EXHAUSTED,
            message=f"HarnessBudget {name}: " + "; ".join(exhausted) + f" this period; {then}",
            retry_at=None if fail else end,
            fail=fail,
        )
    wanted = run_max_cost_usd if run_max_cost_usd is not None else spec.default_reservation_usd
    if remaining is None:
        return Admission(True, cap_usd=wanted)
    return Admission(True, cap_usd=remaining if wanted is None else min(wanted, remaining))


def compute_run_admission(
    name: str,
    labels: Mapping[str, str],
    max_cost_usd: float | None,
    budgets: Sequence[BudgetRef],
    runs: Sequence[RunCharge],
    now: datetime,
) -> tuple[Admission, list[str]]:
    """(admission, names of the covering budgets) for run `name`: refused by the first covering budget
    that is spent, else admitted with the smallest cap any of them grants. The run's own earlier
    reservation (an admission whose Job was never created) is left out, so it is not counted twice."""
    covering = [b for b in budgets if is_covered(b.spec, labels)]
    others = [r for r in runs if r.name != name]
    cap = max_cost_usd
    for budget in covering:
        status = compute_budget_status(budget.spec, others, now)
        admission = compute_admission(budget.name, budget.spec, status, max_cost_usd, now)
        if not admission.admitted:
            return admission, [b.name for b in covering]
        if admission.cap_usd is not None:
            cap = admission.cap_usd if cap is None else min(cap, admission.cap_usd)
    return Admission(True, cap_usd=cap), [b.name for b in covering]
