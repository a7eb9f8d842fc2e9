"""The budgets' reconciler (controller/budgets.py) against an API server that keeps ConfigMaps: a covered
run is admitted with its cap and reserved in the budget's ledger, a finished run is charged once, the
budget's status is written from its ledger when it changed, a spent budget holds (or fails) a run, and a
deleted budget's ledger goes with it."""

from datetime import UTC, datetime
from typing import Any

from tests.unit.controller.fake_kube import Budgets, ConfigMapApi

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.contract.result import ResultDocument
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.ledgers import ledger_name
from harness_operator.controller.reference_cache import build_budget_ref
from harness_operator.core.queue.budget import BudgetRef, RunCharge
from harness_operator.core.status.observed import FINISHED, Observed, ObservedAttempt
from harness_operator.core.status.status import compute_status

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
LEDGERS = "harness-system"


def budget(**spec: Any) -> BudgetRef:
    body = {
        "metadata": {"name": "team", "namespace": "ns", "uid": "b-uid", "generation": 3},
        "spec": {"period": "daily", "limits": {"maxCostUSD": 10}, **spec},
    }
    found = build_budget_ref(body)
    assert found is not None
    return found


def run(name: str = "r", max_cost: float | None = 4.0, labels: dict[str, str] | None = None) -> HarnessRun:
    limits = {"limits": {"maxCostUSD": max_cost}} if max_cost is not None else {}
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "labels": labels or {}},
            "spec": {"provider": "claude", "prompt": "p", **limits},
        }
    )


def reconciler(api: ConfigMapApi, source: Budgets) -> BudgetReconciler:
    return BudgetReconciler(api, LEDGERS, lambda: NOW, source)  # type: ignore[arg-type]


def test_a_run_no_budget_covers_starts_with_its_own_cap() -> None:
    api = ConfigMapApi()
    team = budget(selector={"matchLabels": {"team": "a"}})
    admission, names = reconciler(api, Budgets([team])).admit(run(labels={"team": "b"}))
    assert (admission.admitted, admission.cap_usd, names) == (True, 4.0, [])
    assert api.config_maps == {}


def test_a_covered_run_is_reserved_in_the_ledger_and_the_status_shows_it() -> None:
    api = ConfigMapApi()
    team = budget()
    budgets = reconciler(api, Budgets([team], [RunCharge("r", "r-uid", finished=False)]))
    admission, names = budgets.admit(run())
    assert (admission.admitted, admission.cap_usd, names) == (True, 4.0, ["team"])
    budgets.reserve(run(), admission.cap_usd, names, NOW)
    assert (LEDGERS, ledger_name("ns", "team")) in api.config_maps
    assert budgets.reconcile(team, "ns", {}) == []  # no run waits for room
    status = api.budget_status[("ns", "team")]
    assert (status["reservedUSD"], status["remainingUSD"], status["runs"]) == (4.0, 6.0, 1)
    assert status["observedGeneration"] == 3
    written = len(api.budget_status)
    api.budget_status.clear()
    budgets.reconcile(team, "ns", status)  # unchanged: not written again
    assert api.budget_status == {} and written == 1


def test_a_finished_run_is_charged_once_at_its_cost() -> None:
    api = ConfigMapApi()
    team = budget()
    budgets = reconciler(api, Budgets([team]))
    admission, names = budgets.admit(run())
    budgets.reserve(run(), admission.cap_usd, names, NOW)
    finished = HarnessRunStatus.model_validate(
        {
            "budget": {"names": ["team"], "reservedUSD": 4.0},
            "usage": {"costUSD": 3.0, "inputTokens": 10},
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
            "attempts": [{"index": 1, "provider": "claude"}],
        }
    )
    budgets.settle(run(), finished)
    budgets.settle(run(), finished)  # again (a retried reconcile): charged once
    budgets.reconcile(team, "ns", {})
    status = api.budget_status[("ns", "team")]
    assert (status["spentUSD"], status["reservedUSD"], status["remainingUSD"]) == (3.0, 0.0, 7.0)


def test_a_spent_budget_holds_a_run_or_fails_it() -> None:
    api = ConfigMapApi()
    waits = budget(limits={"maxRuns": 1})
    budgets = reconciler(api, Budgets([waits], [RunCharge("second", "second-uid", False, waiting=True)]))
    budgets.reserve(run("first"), None, ["team"], NOW)
    admission, _ = budgets.admit(run("second"))
    assert (admission.admitted, admission.fail) == (False, False)
    assert admission.message.startswith("HarnessBudget team: 1 of maxRuns 1 runs started this period")
    assert budgets.reconcile(waits, "ns", {}) == [("ns", "second")]  # whom room would wake
    fails = budget(limits={"maxRuns": 1}, whenExhausted="Fail")
    admission, _ = reconciler(api, Budgets([fails])).admit(run("second"))
    assert (admission.admitted, admission.fail) == (False, True)


def test_a_deleted_budget_takes_its_ledger_along_and_admits_no_more() -> None:
    api = ConfigMapApi()
    team = budget(limits={"maxRuns": 1})
    waiting = RunCharge("second", "second-uid", False, waiting=True)
    budgets = reconciler(api, Budgets([team], [waiting]))  # the watch cache still shows the budget
    budgets.reserve(run("first"), None, ["team"], NOW)
    assert budgets.forget("ns", "team", "b-uid") == [("ns", "second")]
    assert api.config_maps == {}
    admission, names = budgets.admit(run("second"))
    assert (admission.admitted, names) == (True, [])


def test_a_cancelled_run_whose_cost_is_unknown_shows_its_reservation_charged_as_its_ledger_does() -> None:
    """A run cancelled with no usage known: compute_status says on the run that its budget keeps its 0.5
    USD reservation, and why; the ledger settles the very same amount from that status."""
    api = ConfigMapApi()
    team = budget()
    budgets = reconciler(api, Budgets([team]))
    admission, names = budgets.admit(run(max_cost=0.5))
    budgets.reserve(run(max_cost=0.5), admission.cap_usd, names, NOW)
    admitted = run(max_cost=0.5).model_copy(
        update={"status": HarnessRunStatus.model_validate({"budget": {"names": names, "reservedUSD": 0.5}})}
    )
    cancelled = ResultDocument(attempt=1, provider="claude", exit_code=124, reason="Cancelled", message="c")
    seen = ObservedAttempt(1, "claude", "r-a1", "r-a1-x", FINISHED, result=cancelled)
    status = compute_status(admitted, Observed(["claude"], [seen], cancelled=True), NOW)
    assert status.phase == "Cancelled" and status.usage is None  # no cost to show: its charge says why
    assert status.budget is not None and status.budget.charge is not None
    charge = status.budget.charge
    assert (charge.amount_usd, charge.basis) == (0.5, "Reserved")
    assert "the run's reservation, kept because its cost is unknown" in charge.message
    assert status.to_api()["budget"]["charge"] == {
        "amountUSD": 0.5,
        "basis": "Reserved",
        "message": charge.message,
    }
    budgets.settle(admitted, status)
    budgets.reconcile(team, "ns", {})
    written = api.budget_status[("ns", "team")]
    assert (written["spentUSD"], written["unknownCostRuns"]) == (charge.amount_usd, 1)
