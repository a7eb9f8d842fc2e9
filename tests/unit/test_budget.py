"""HarnessBudget arithmetic: periods, spend derived from runs, admission and the caps that keep
concurrent runs from overspending together."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.v1alpha1 import HarnessBudget, HarnessBudgetSpec
from harness_operator.budget import (
    RunCharge,
    compute_admission,
    compute_budget_status,
    compute_period,
    is_covered,
)
from harness_operator.cel import check_rules

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


def test_spend_is_derived_from_runs_of_the_period() -> None:
    runs = [
        RunCharge("old", NOW - timedelta(days=1), finished=True, cost_usd=5),  # yesterday: not counted
        RunCharge("done", NOW - timedelta(hours=1), finished=True, cost_usd=2, tokens=100),
        RunCharge("unknown", NOW - timedelta(hours=1), finished=True, reserved_usd=1.5),  # counted at its cap
        RunCharge("flying", NOW, finished=False, reserved_usd=3, tokens=7),
    ]
    status = compute_budget_status(spec(), runs, NOW)
    assert (status.spent_usd, status.reserved_usd, status.remaining_usd) == (3.5, 3.0, 3.5)
    assert (status.runs, status.tokens, status.unknown_cost_runs) == (3, 107, 1)
    assert status.period_end == "2026-12-03T00:00:00Z"
    # The same runs give the same figures: a restarted operator recomputes, it does not re-add.
    assert compute_budget_status(spec(), runs, NOW) == status


def test_a_starting_run_gets_the_smaller_of_its_cap_and_what_is_left() -> None:
    status = compute_budget_status(spec(), [RunCharge("a", NOW, finished=False, reserved_usd=7)], NOW)
    assert compute_admission("b", spec(), status, 5, NOW).cap_usd == 3.0
    assert compute_admission("b", spec(), status, 1, NOW).cap_usd == 1.0
    assert compute_admission("b", spec(), status, None, NOW).cap_usd == 3.0
    assert compute_admission("b", spec(defaultReservationUSD=0.5), status, None, NOW).cap_usd == 0.5


def test_two_concurrent_runs_cannot_overspend_together() -> None:
    budget = spec()
    first = compute_admission("b", budget, compute_budget_status(budget, [], NOW), 8, NOW)
    flying = [RunCharge("one", NOW, finished=False, reserved_usd=first.cap_usd)]
    second = compute_admission("b", budget, compute_budget_status(budget, flying, NOW), 8, NOW)
    assert first.cap_usd == 8 and second.cap_usd == 2
    assert first.cap_usd + second.cap_usd <= budget.limits.max_cost_usd
    both = [*flying, RunCharge("two", NOW, finished=False, reserved_usd=second.cap_usd)]
    third = compute_admission("b", budget, compute_budget_status(budget, both, NOW), 8, NOW)
    assert (third.admitted, third.reason) == (False, "BudgetExhausted")


def test_exhausted_budget_waits_until_the_rolling_window_moves_on() -> None:
    rolling = spec(period="rolling", windowSeconds=120, limits={"maxRuns": 1})
    runs = [RunCharge("one", NOW - timedelta(seconds=30), finished=True, cost_usd=0.1)]
    blocked = compute_admission("b", rolling, compute_budget_status(rolling, runs, NOW), None, NOW)
    assert not blocked.admitted and blocked.retry_at == NOW + timedelta(seconds=90)
    assert "1 of maxRuns 1 runs started" in blocked.message and "waits until" in blocked.message
    later = NOW + timedelta(seconds=91)
    assert compute_admission("b", rolling, compute_budget_status(rolling, runs, later), None, later).admitted


def test_fail_mode_fails_instead_of_waiting() -> None:
    budget = spec(whenExhausted="Fail", limits={"maxTokens": 10})
    status = compute_budget_status(budget, [RunCharge("a", NOW, finished=True, tokens=10, cost_usd=0)], NOW)
    result = compute_admission("team", budget, status, None, NOW)
    assert (result.admitted, result.retry_at) == (False, None)
    assert "HarnessBudget team: 10 of maxTokens 10 tokens used" in result.message and "Fail" in result.message


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
