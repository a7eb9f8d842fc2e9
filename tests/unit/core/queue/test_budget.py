"""HarnessBudget arithmetic: periods, the ledger that only grows, admission and the caps that keep
concurrent runs from overspending together."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.v1alpha1 import HarnessBudget, HarnessBudgetSpec
from harness_operator.controller.ledgers import build_ledger_config_map, ledger_name, parse_ledger_config_map
from harness_operator.core.objects.cel import check_rules
from harness_operator.core.queue.budget import (
    Admission,
    BudgetRef,
    Ledger,
    LedgerEntry,
    RunCharge,
    build_budget_charge,
    build_run_charge,
    compute_admission,
    compute_budget_status,
    compute_period,
    compute_run_admission,
    compute_settlement,
    is_covered,
    prune,
    reserve,
    settle_all,
    settle_run,
)

NOW = datetime(2026, 12, 2, 15, 30, tzinfo=UTC)  # a Wednesday


def spec(**fields: Any) -> HarnessBudgetSpec:
    return HarnessBudgetSpec.model_validate({"period": "daily", "limits": {"maxCostUSD": 10}, **fields})


@pytest.mark.parametrize(
    ("fields", "start", "end"),
    [
        ({"period": "daily"}, "2026-12-02T00:00", "2026-12-03T00:00"),
        ({"period": "weekly"}, "2026-11-30T00:00", "2026-12-07T00:00"),
        ({"period": "monthly"}, "2026-12-01T00:00", "2027-01-01T00:00"),
        ({"period": "rolling", "windowSeconds": 3600}, "2026-12-02T14:30", "2026-12-02T16:30"),
    ],
)
def test_periods(fields, start, end) -> None:
    got = compute_period(spec(**fields), NOW)
    assert [t.strftime("%Y-%m-%dT%H:%M") for t in got] == [start, end]


def test_selector_covers_matching_runs_only() -> None:
    assert is_covered(spec(), {})
    team = spec(selector={"matchLabels": {"team": "a"}})
    assert is_covered(team, {"team": "a", "x": "y"})
    assert not is_covered(team, {"team": "b"})
    assert not is_covered(team, {})


def admitted(ledger: Ledger, uid: str, cap: float | None, at: datetime) -> Ledger:
    return reserve(ledger, uid, f"run-{uid}", cap, at)


def finished(uid: str, cost: float | None = None, tokens: int = 0, attempted: bool = True) -> RunCharge:
    return RunCharge(f"run-{uid}", uid, finished=True, attempted=attempted, cost_usd=cost, tokens=tokens)


def test_spend_is_what_the_ledger_settled_this_period() -> None:
    budget = spec()
    ledger = Ledger()
    for uid, at in (("old", NOW - timedelta(days=1)), ("done", NOW), ("unknown", NOW), ("flying", NOW)):
        ledger = admitted(ledger, uid, 1.5 if uid == "unknown" else 3, at)
    runs = [
        finished("old", 5),
        finished("done", 2, tokens=100),
        finished("unknown"),
        RunCharge("f", "flying", False),
    ]
    ledger = settle_all(budget, ledger, runs, NOW)
    status = compute_budget_status(budget, ledger, NOW)
    # Yesterday's run is charged to yesterday's bucket, which no longer counts (and is dropped).
    assert [b.start for b in ledger.buckets] == ["2026-12-02T00:00:00Z"]
    assert (status.spent_usd, status.reserved_usd, status.remaining_usd) == (3.5, 3.0, 3.5)
    assert (status.runs, status.tokens, status.unknown_cost_runs) == (3, 100, 1)
    assert status.period_end == "2026-12-03T00:00:00Z"
    # Settling again charges nothing more: a settled run is no longer open.
    assert settle_all(budget, ledger, runs, NOW) == ledger


def test_what_was_spent_stays_spent_whatever_happens_to_the_run() -> None:
    budget = spec()
    ledger = admitted(admitted(Ledger(), "deleted", 4, NOW), "spent", 4, NOW)
    ledger = settle_all(budget, ledger, [finished("spent", 2.7)], NOW)  # "deleted" is gone from the cache
    status = compute_budget_status(budget, ledger, NOW)
    # Deleted before it finished: charged at its cap, its cost unknown; the finished one at its cost.
    assert (status.spent_usd, status.reserved_usd, status.unknown_cost_runs) == (6.7, 0.0, 1)
    # The finished run then deleted (or relabelled out of the selector): nothing is given back.
    assert compute_budget_status(budget, settle_all(budget, ledger, [], NOW), NOW) == status


def test_a_run_that_never_started_an_attempt_costs_nothing() -> None:
    ledger = admitted(Ledger(), "a", 5, NOW)
    ledger = settle_run(spec(), ledger, finished("a", attempted=False), NOW)
    assert compute_budget_status(spec(), ledger, NOW).spent_usd == 0
    assert (
        compute_settlement(LedgerEntry(uid="a", run="a", admittedAt="x"), RunCharge("a", "a", False)) is None
    )


def charge(*attempts: dict[str, Any]) -> RunCharge:
    condition = {"type": "Succeeded", "status": "False", "reason": "Failed"}
    return build_run_charge(
        {
            "metadata": {"name": "r", "uid": "a"},
            "status": {"conditions": [condition], "attempts": list(attempts)},
        }
    )


def test_a_run_whose_agent_never_ran_costs_nothing_and_one_that_may_have_its_cap() -> None:
    """BinaryNotFound, SetupFailed, NetworkNotConfined: the runner ended the attempt before the agent's
    exec, so nothing was spent; an attempt that ran (or was lost) with an unknown cost weighs its cap."""
    never = charge(
        {"index": 1, "provider": "amp", "reason": "BinaryNotFound"},
        {"index": 2, "provider": "x", "reason": "SetupFailed"},
    )
    ran = charge(
        {"index": 1, "provider": "amp", "reason": "BinaryNotFound"},
        {"index": 2, "provider": "y", "reason": "ProviderFailed"},
    )
    lost = charge({"index": 1, "provider": "claude", "reason": "JobLost"})
    entry = LedgerEntry(uid="a", run="r", admittedAt="x", reservedUSD=5)
    assert not never.attempted and ran.attempted and lost.attempted
    settled = [compute_settlement(entry, c) for c in (never, ran, lost)]
    assert [(s.charge_usd, s.unknown_cost) if s else None for s in settled] == [
        (0.0, False),
        (5, True),
        (5, True),
    ]


def test_a_run_admitted_again_keeps_one_place() -> None:
    once = admitted(Ledger(), "a", 5, NOW)
    again = admitted(once, "a", 3, NOW + timedelta(minutes=1))
    assert [(e.uid, e.reserved_usd, e.admitted_at) for e in again.open] == [("a", 3, "2026-12-02T15:30:00Z")]
    assert admitted(again, "a", 3, NOW) == again
    # Its own reservation is left out when its admission is decided again.
    assert compute_budget_status(spec(), again, NOW, excluding="a").reserved_usd == 0


def test_a_starting_run_gets_the_smaller_of_its_cap_and_what_is_left() -> None:
    status = compute_budget_status(spec(), admitted(Ledger(), "a", 7, NOW), NOW)
    assert compute_admission("b", spec(), status, 5, NOW).cap_usd == 3.0
    assert compute_admission("b", spec(), status, 1, NOW).cap_usd == 1.0
    assert compute_admission("b", spec(), status, None, NOW).cap_usd == 3.0
    assert compute_admission("b", spec(defaultReservationUSD=0.5), status, None, NOW).cap_usd == 0.5


def test_two_concurrent_runs_cannot_overspend_together() -> None:
    budget = BudgetRef("team", spec(), uid="u")
    ledger = Ledger()
    caps = []
    for uid in ("one", "two", "three"):
        admission, names = compute_run_admission(uid, {}, 8, [(budget, ledger)], NOW)
        if admission.admitted:
            ledger = admitted(ledger, uid, admission.cap_usd, NOW)
        caps.append((admission.admitted, admission.cap_usd, names))
    assert caps[:2] == [(True, 8, ["team"]), (True, 2, ["team"])]
    assert caps[2][0] is False
    assert compute_run_admission(
        "x", {"a": "b"}, 8, [(BudgetRef("t", spec(selector={"matchLabels": {"a": "c"}})), ledger)], NOW
    ) == (
        Admission(True, cap_usd=8),
        [],
    )


def test_exhausted_budget_waits_until_the_rolling_window_moves_on() -> None:
    rolling = spec(period="rolling", windowSeconds=120, limits={"maxRuns": 1})
    ledger = settle_all(
        rolling, admitted(Ledger(), "one", None, NOW - timedelta(seconds=30)), [finished("one", 0.1)], NOW
    )
    blocked = compute_admission("b", rolling, compute_budget_status(rolling, ledger, NOW), None, NOW)
    # Buckets of windowSeconds/100 (1 s here): the run counts until its bucket has left the window.
    assert not blocked.admitted and blocked.retry_at == NOW + timedelta(seconds=91)
    assert "1 of maxRuns 1 runs started" in blocked.message and "waits until" in blocked.message
    later = NOW + timedelta(seconds=91)
    assert compute_admission(
        "b", rolling, compute_budget_status(rolling, ledger, later), None, later
    ).admitted
    assert prune(rolling, ledger, later).buckets == []


def test_a_rolling_ledger_stays_bounded() -> None:
    rolling = spec(period="rolling", windowSeconds=86400)
    ledger = Ledger()
    steps = 3 * 24 * 12  # three days of one run every five minutes
    for step in range(steps):
        at = NOW + timedelta(minutes=5 * step)
        ledger = settle_all(rolling, admitted(ledger, str(step), 0.01, at), [finished(str(step), 0.01)], at)
    assert len(ledger.buckets) <= 101 and ledger.open == []
    status = compute_budget_status(rolling, ledger, NOW + timedelta(minutes=5 * (steps - 1)))
    assert 288 <= status.runs <= 288 + 3  # the last day's runs, give or take one bucket (864 s)


def test_fail_mode_fails_instead_of_waiting() -> None:
    budget = spec(whenExhausted="Fail", limits={"maxTokens": 10})
    ledger = settle_run(budget, admitted(Ledger(), "a", None, NOW), finished("a", 0, tokens=10), NOW)
    result = compute_admission("team", budget, compute_budget_status(budget, ledger, NOW), None, NOW)
    assert (result.admitted, result.retry_at) == (False, None)
    assert "HarnessBudget team: 10 of maxTokens 10 tokens used" in result.message and "Fail" in result.message


def test_a_ledger_of_an_earlier_budget_of_the_same_name_is_not_inherited() -> None:
    ledger = admitted(Ledger(), "a", 5, NOW)
    body = build_ledger_config_map("harness-system", "team-a", "daily", "uid-1", ledger, "")
    assert body["metadata"]["name"] == ledger_name("team-a", "daily") == "budget-ledger.team-a.daily"
    assert "resourceVersion" not in body["metadata"]
    stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}}
    assert parse_ledger_config_map(stored, "uid-1") == (ledger, "7")
    assert parse_ledger_config_map(stored, "uid-2") == (Ledger(), "7")  # replaced, not inherited
    assert parse_ledger_config_map(None, "uid-1") == (Ledger(), "")
    assert len(ledger_name("n" * 63, "b" * 253)) == 253


@pytest.mark.parametrize(
    ("spec_doc", "problem"),
    [
        ({"period": "daily", "limits": {}}, "set at least one of maxCostUSD, maxTokens or maxRuns"),
        (
            {"period": "rolling", "limits": {"maxRuns": 1}},
            "spec.windowSeconds is required for period rolling",
        ),
        (
            {"period": "daily", "windowSeconds": 60, "limits": {"maxRuns": 1}},
            "spec.windowSeconds is required",
        ),
    ],
)
def test_cel_rejects_bad_budgets(spec_doc, problem) -> None:
    doc = {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessBudget", "metadata": {"name": "b"}}
    messages = [v.message for v in check_rules(crd_schema_for("HarnessBudget"), {**doc, "spec": spec_doc})]
    assert any(problem in m for m in messages), messages
    HarnessBudget.model_validate({**doc, "spec": {"period": "daily", "limits": {"maxRuns": 1}}})


def ended(usage: dict[str, Any] | None, *attempts: dict[str, Any]) -> RunCharge:
    condition = {"type": "Succeeded", "status": "False", "reason": "Cancelled"}
    status = {"conditions": [condition], "attempts": list(attempts), "usage": usage}
    return build_run_charge({"metadata": {"name": "r", "uid": "a"}, "status": status})


RAN = {"index": 1, "provider": "claude", "reason": "Cancelled"}


@pytest.mark.parametrize(
    ("run", "names", "expected"),
    [
        (
            ended({"costUSD": 0.0123, "costSource": "metered"}, RAN),
            ["team"],
            (
                0.0123,
                "Metered",
                "0.0123 USD charged to HarnessBudget team: the cost the model gateway metered",
            ),
        ),
        (
            ended({"costUSD": 0.2, "costSource": "reported"}, RAN),
            ["team", "org"],
            (
                0.2,
                "Reported",
                "0.2 USD charged to HarnessBudgets team, org: the cost the sandbox reported (costSource "
                "reported; no model gateway metered it)",
            ),
        ),
        (
            ended(None, RAN),
            ["team"],
            (
                0.5,
                "Reserved",
                "0.5 USD charged to HarnessBudget team: the run's reservation, kept because its cost is "
                "unknown (no meter or report priced what its agent spent)",
            ),
        ),
        (
            ended(None, {"index": 1, "provider": "amp", "reason": "BinaryNotFound"}),
            ["team"],
            (0.0, "NotStarted", "nothing charged to HarnessBudget team: no attempt started its agent"),
        ),
    ],
)
def test_a_finished_run_says_what_it_was_charged_and_its_ledger_settles_the_same(
    run: RunCharge, names: list[str], expected: tuple[float, str, str]
) -> None:
    charge = build_budget_charge(names, 0.5, run)
    assert (charge.amount_usd, charge.basis, charge.message) == expected
    settled = compute_settlement(LedgerEntry(uid="a", run="r", admittedAt="x", reservedUSD=0.5), run)
    assert settled is not None and settled.charge_usd == charge.amount_usd
    assert settled.unknown_cost == (charge.basis == "Reserved")
