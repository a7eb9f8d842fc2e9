"""HarnessBudget arithmetic (pure): the current period, the ledger of what was spent, admission and caps.

Spend is kept in a ledger per budget that only grows within a period: a run takes its place when it is
admitted (its reserved cap), and is settled once, when it has finished or is gone, at its cost (at its
cap when the cost is unknown or the run was deleted first). Deleting a run, relabelling it or restarting
the operator gives nothing back; the budget's status is only a view of the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    BudgetCharge,
    BudgetPeriod,
    ChargeBasis,
    CostSource,
    HarnessBudgetSpec,
    HarnessBudgetStatus,
    WhenExhausted,
)
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.contract.usage import Tokens

BUDGET_EXHAUSTED = Reason.BudgetExhausted
# An attempt that ended with one of these never started its agent (the runner reports them before the
# agent's exec): it spent nothing, so a run whose attempts all ended so is settled at nothing.
AGENT_NEVER_RAN = frozenset({Reason.BinaryNotFound, Reason.SetupFailed, Reason.NetworkNotConfined})
ROLLING_BUCKETS = 100  # a rolling window's spend is kept in this many buckets (a bounded ledger)


@dataclass(frozen=True)
class BudgetRef:
    """One HarnessBudget of a namespace, as the watch cache holds it."""

    name: str
    spec: HarnessBudgetSpec
    generation: int | None = None
    uid: str = ""


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


class LedgerEntry(BaseModel):
    """A run admitted and not settled yet: it weighs its reserved cap."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    uid: str
    run: str
    admitted_at: str = Field(alias="admittedAt")
    reserved_usd: float | None = Field(default=None, alias="reservedUSD")


class LedgerBucket(BaseModel):
    """What the runs admitted in one bucket of time were charged when they were settled."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    start: str
    spent_usd: float = Field(default=0.0, alias="spentUSD")
    tokens: int = 0
    runs: int = 0
    unknown_cost_runs: int = Field(default=0, alias="unknownCostRuns")


class Ledger(BaseModel):
    """A budget's durable record: the open reservations and the settled spend of the current period."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    open: list[LedgerEntry] = Field(default_factory=list)
    buckets: list[LedgerBucket] = Field(default_factory=list)

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


@dataclass(frozen=True)
class Settlement:
    """What settling one run charges: its cost (or cap), its tokens, and whether the cost was unknown."""

    uid: str
    charge_usd: float
    tokens: int = 0
    unknown_cost: bool = False


@dataclass(frozen=True)
class RunCharge:
    """What the watch cache says of a run that a ledger needs: whether it finished, and what it cost."""

    name: str
    uid: str
    finished: bool
    attempted: bool = False  # an attempt started its agent (or may have: it has not ended yet)
    cost_usd: float | None = None
    tokens: int = 0
    waiting: bool = False  # waits Queued with BudgetExhausted
    cost_source: str | None = None  # usage.costSource: metered (the model gateway's), reported, ...


def _at(value: str) -> datetime:
    """A time the ledger holds (written here); one that is not a time counts as long past."""
    return parse_time(value) or datetime.min.replace(tzinfo=UTC)


def build_run_charge(run: Mapping[str, Any]) -> RunCharge:
    """A run's charge from the run object (as a watch delivers it): finished when its Succeeded
    condition is True or False."""
    meta = run.get("metadata") or {}
    status = run.get("status") or {}
    usage = status.get("usage") or {}
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    succeeded = next((c for c in conditions if c.get("type") == "Succeeded"), {})
    counts = (
        int(usage.get(k) or 0) for k in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")
    )
    cost = usage.get("costUSD")
    return RunCharge(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        finished=succeeded.get("status") in ("True", "False"),
        attempted=any((a or {}).get("reason") not in AGENT_NEVER_RAN for a in status.get("attempts") or []),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        tokens=Tokens(*counts).total or 0,
        waiting=succeeded.get("status") == "Unknown" and succeeded.get("reason") == BUDGET_EXHAUSTED,
        cost_source=usage.get("costSource"),
    )


def _bucket_seconds(spec: HarnessBudgetSpec) -> int:
    return max(1, (spec.window_seconds or 0) // ROLLING_BUCKETS)


def _bucket_start(spec: HarnessBudgetSpec, at: datetime) -> datetime:
    """The bucket a run admitted at `at` is charged to: its calendar period, or a slice of the window."""
    if spec.period != BudgetPeriod.rolling:
        return compute_period(spec, at)[0]
    size = _bucket_seconds(spec)
    return datetime.fromtimestamp(int(at.timestamp()) // size * size, UTC)


def _is_current(spec: HarnessBudgetSpec, bucket: LedgerBucket, now: datetime) -> bool:
    """Whether a bucket still counts: it is this calendar period's, or it ends inside the window (a
    rolling bucket counts until its last second has left the window)."""
    start = _at(bucket.start)
    if spec.period != BudgetPeriod.rolling:
        return start == compute_period(spec, now)[0]
    return start + timedelta(seconds=_bucket_seconds(spec)) > compute_period(spec, now)[0]


def reserve(ledger: Ledger, uid: str, run: str, reserved_usd: float | None, now: datetime) -> Ledger:
    """The ledger with run `uid` admitted at `now` with this cap; a run admitted again (its Job was never
    created) keeps its first admission time and takes the new cap instead of adding a second one."""
    earlier = next((e for e in ledger.open if e.uid == uid), None)
    admitted_at = earlier.admitted_at if earlier else timestamp(now)
    entry = LedgerEntry(uid=uid, run=run, admitted_at=admitted_at, reserved_usd=reserved_usd)
    if entry == earlier:
        return ledger
    return ledger.model_copy(update={"open": [*(e for e in ledger.open if e.uid != uid), entry]})


def settle(spec: HarnessBudgetSpec, ledger: Ledger, settlement: Settlement) -> Ledger:
    """The ledger with one open run moved to the bucket of its admission, charged once (not open: no
    change); the callers drop the buckets that no longer count, once."""
    entry = next((e for e in ledger.open if e.uid == settlement.uid), None)
    if entry is None:
        return ledger
    start = timestamp(_bucket_start(spec, _at(entry.admitted_at)))
    buckets = {b.start: b for b in ledger.buckets}
    old = buckets.get(start, LedgerBucket(start=start))
    buckets[start] = LedgerBucket(
        start=start,
        spent_usd=round(old.spent_usd + settlement.charge_usd, 6),
        tokens=old.tokens + settlement.tokens,
        runs=old.runs + 1,
        unknown_cost_runs=old.unknown_cost_runs + int(settlement.unknown_cost),
    )
    still_open = [e for e in ledger.open if e.uid != entry.uid]
    ordered = sorted(buckets.values(), key=lambda b: b.start)
    return ledger.model_copy(update={"open": still_open, "buckets": ordered})


def prune(spec: HarnessBudgetSpec, ledger: Ledger, now: datetime) -> Ledger:
    """The ledger without the buckets of past periods (or that left the window)."""
    current = [b for b in ledger.buckets if _is_current(spec, b, now)]
    return ledger if len(current) == len(ledger.buckets) else ledger.model_copy(update={"buckets": current})


def compute_charge(reserved_usd: float | None, run: RunCharge | None) -> tuple[float, ChargeBasis]:
    """What a finished run (None: deleted before it finished) is charged, and on what basis: its cost
    (metered or reported), nothing when no attempt started its agent, else its reservation (its cost is
    unknown)."""
    reserved = reserved_usd or 0.0
    if run is None:
        return reserved, ChargeBasis.reserved
    if run.cost_usd is not None:
        metered = run.cost_source == CostSource.metered
        return run.cost_usd, ChargeBasis.metered if metered else ChargeBasis.reported
    if not run.attempted:
        return 0.0, ChargeBasis.not_started
    return reserved, ChargeBasis.reserved


def compute_settlement(entry: LedgerEntry, run: RunCharge | None) -> Settlement | None:
    """How an open run is settled (compute_charge), or None while it runs."""
    if run is not None and not run.finished:
        return None
    amount, basis = compute_charge(entry.reserved_usd, run)
    tokens = run.tokens if run is not None else 0
    return Settlement(entry.uid, amount, tokens, unknown_cost=basis == ChargeBasis.reserved)


def build_budget_charge(names: Sequence[str], reserved_usd: float | None, run: RunCharge) -> BudgetCharge:
    """What a finished run's status says it was charged (the amount its ledgers settle), and why."""
    amount, basis = compute_charge(reserved_usd, run)
    budgets = ("HarnessBudget " if len(names) == 1 else "HarnessBudgets ") + ", ".join(names)
    why = {
        ChargeBasis.metered: f"{amount} USD charged to {budgets}: the cost the model gateway metered",
        ChargeBasis.reported: f"{amount} USD charged to {budgets}: the cost the sandbox reported "
        f"(costSource {run.cost_source}; no model gateway metered it)",
        ChargeBasis.reserved: f"{amount} USD charged to {budgets}: the run's reservation, kept because "
        "its cost is unknown (no meter or report priced what its agent spent)",
        ChargeBasis.not_started: f"nothing charged to {budgets}: no attempt started its agent",
    }
    return BudgetCharge(amount_usd=amount, basis=basis, message=why[basis])


def settle_run(spec: HarnessBudgetSpec, ledger: Ledger, run: RunCharge, now: datetime) -> Ledger:
    """The ledger with `run` settled if it is open there and has finished, and its old buckets dropped."""
    entry = next((e for e in ledger.open if e.uid == run.uid), None)
    settlement = None if entry is None else compute_settlement(entry, run)
    return ledger if settlement is None else prune(spec, settle(spec, ledger, settlement), now)


def settle_all(spec: HarnessBudgetSpec, ledger: Ledger, runs: Sequence[RunCharge], now: datetime) -> Ledger:
    """The ledger with every open run settled that has finished or is gone, and its old buckets dropped."""
    for settlement in compute_settlements(ledger, runs):
        ledger = settle(spec, ledger, settlement)
    return prune(spec, ledger, now)


def compute_settlements(ledger: Ledger, runs: Sequence[RunCharge]) -> list[Settlement]:
    """The open runs to settle now: those the watch cache shows finished, or no longer has (deleted;
    a run re-created under its name has another uid)."""
    by_uid = {r.uid: r for r in runs}
    found = (compute_settlement(e, by_uid.get(e.uid)) for e in ledger.open)
    return [s for s in found if s is not None]


def compute_budget_status(
    spec: HarnessBudgetSpec,
    ledger: Ledger,
    now: datetime,
    generation: int | None = None,
    excluding: str | None = None,
) -> HarnessBudgetStatus:
    """Spent (settled runs), reserved (open runs) and remaining for the current period, from the ledger;
    `excluding`: leave one open run out (its own admission is being decided again)."""
    start, end = compute_period(spec, now)
    buckets = [b for b in ledger.buckets if _is_current(spec, b, now)]
    open_runs = [e for e in ledger.open if e.uid != excluding]
    spent = sum(b.spent_usd for b in buckets)
    reserved = sum(e.reserved_usd or 0.0 for e in open_runs)
    if spec.period == BudgetPeriod.rolling and (buckets or open_runs):
        window = timedelta(seconds=spec.window_seconds or 0)
        bucket = timedelta(seconds=_bucket_seconds(spec))
        ends = [_at(b.start) + bucket for b in buckets]
        end = min([*ends, *(_at(e.admitted_at) for e in open_runs)]) + window
    limit = spec.limits.max_cost_usd
    return HarnessBudgetStatus(
        period_start=timestamp(start),
        period_end=timestamp(end),
        spent_usd=round(spent, 6),
        reserved_usd=round(reserved, 6),
        remaining_usd=None if limit is None else round(max(0.0, limit - spent - reserved), 6),
        tokens=sum(b.tokens for b in buckets),
        runs=sum(b.runs for b in buckets) + len(open_runs),
        unknown_cost_runs=sum(b.unknown_cost_runs for b in buckets),
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
    end = parse_time(status.period_end)
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
    uid: str,
    labels: Mapping[str, str],
    max_cost_usd: float | None,
    budgets: Sequence[tuple[BudgetRef, Ledger]],
    now: datetime,
) -> tuple[Admission, list[str]]:
    """(admission, names of the covering budgets) for run `uid`: refused by the first covering budget
    that is spent, else admitted with the smallest cap any of them grants. The run's own earlier
    reservation (an admission whose Job was never created) is left out, so it is not counted twice."""
    covering = [(b, ledger) for b, ledger in budgets if is_covered(b.spec, labels)]
    names = [b.name for b, _ in covering]
    cap = max_cost_usd
    for budget, ledger in covering:
        status = compute_budget_status(budget.spec, ledger, now, excluding=uid)
        admission = compute_admission(budget.name, budget.spec, status, max_cost_usd, now)
        if not admission.admitted:
            return admission, names
        if admission.cap_usd is not None:
            cap = admission.cap_usd if cap is None else min(cap, admission.cap_usd)
    return Admission(True, cap_usd=cap), names
