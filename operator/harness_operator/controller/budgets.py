"""HarnessBudgets' reconciler: admission of a starting run and its reservation in each covering
budget's ledger, a finished run's charge, and the budget's status from its ledger (the arithmetic is
core/queue/budget.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, Protocol

from harness_operator.api.v1alpha1 import HarnessBudgetStatus, HarnessRun, HarnessRunStatus, Limits
from harness_operator.controller import metrics
from harness_operator.controller.kube import Kube
from harness_operator.controller.ledgers import LedgerStore
from harness_operator.core.queue.budget import (
    Admission,
    BudgetRef,
    RunCharge,
    build_run_charge,
    compute_budget_status,
    compute_run_admission,
    is_covered,
    reserve,
    settle_all,
    settle_run,
)


class BudgetSource(Protocol):
    """The watch caches of HarnessBudgets (reference_cache.py) and of runs' charges (the run cache)."""

    def budgets(self, namespace: str) -> list[BudgetRef]: ...

    def runs(self, namespace: str) -> list[RunCharge]: ...


class BudgetReconciler:
    """The budgets of each namespace, read from the watch caches (`source`), kept in their ledgers."""

    def __init__(
        self, kube: Kube, ledger_namespace: str, clock: Callable[[], datetime], source: BudgetSource
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.source = source
        self.ledgers = LedgerStore(kube, ledger_namespace)
        # Budgets deleted that the watch cache may still hold for a moment: by uid, their namespace.
        self._deleted: dict[str, str] = {}

    def admit(self, run: HarnessRun) -> tuple[Admission, list[str]]:
        """Budget admission, from the budgets' watch cache and their ledgers: whether the run may start,
        its cap, and the names of the budgets covering it (none: no budget applies)."""
        ns = run.metadata["namespace"]
        labels = run.metadata.get("labels") or {}
        budgets = self.source.budgets(ns)
        live = {b.uid for b in budgets}
        self._deleted = {uid: n for uid, n in self._deleted.items() if n != ns or uid in live}
        covering = [b for b in budgets if b.uid not in self._deleted and is_covered(b.spec, labels)]
        limits = run.spec.limits or Limits()
        if not covering:
            return Admission(True, cap_usd=limits.max_cost_usd), []
        ledgers = [(b, self.ledgers.get(ns, b.name, b.uid)) for b in covering]
        return compute_run_admission(run.metadata["uid"], labels, limits.max_cost_usd, ledgers, self.clock())

    def reserve(self, run: HarnessRun, cap_usd: float | None, names: list[str], now: datetime) -> None:
        """The run's place, with its cap, in each budget's ledger (a retry keeps one place)."""
        ns, name, uid = run.metadata["namespace"], run.metadata["name"], run.metadata["uid"]
        refs = {b.name: b for b in self.source.budgets(ns)}
        for budget in names:
            take = partial(reserve, uid=uid, run=name, reserved_usd=cap_usd, now=now)
            self.ledgers.update(ns, budget, refs[budget].uid, take)

    def settle(self, run: HarnessRun, status: HarnessRunStatus) -> None:
        """Charge a finished run to the ledgers it was admitted in (once: a settled run is not open)."""
        if status.budget is None or not status.budget.names:
            return
        ns = run.metadata["namespace"]
        charge = build_run_charge({"metadata": run.metadata, "status": status.to_api()})
        refs = {b.name: b for b in self.source.budgets(ns)}
        now = self.clock()
        for name in status.budget.names:
            budget = refs.get(name)
            if budget is not None:  # deleted: its ledger went with it
                charged = partial(settle_run, budget.spec, run=charge, now=now)
                self.ledgers.update(ns, name, budget.uid, charged)

    def reconcile(
        self, budget: BudgetRef, namespace: str, status: dict[str, Any] | None
    ) -> list[tuple[str, str]]:
        """Settle the budget's runs that finished or are gone (the watch cache says which), write its
        status from its ledger if it changed; the runs waiting for budget room, to reconcile now (the
        period may have rolled over)."""
        runs = self.source.runs(namespace)
        now = self.clock()
        ledger = self.ledgers.update(
            namespace, budget.name, budget.uid, partial(settle_all, budget.spec, runs=runs, now=now)
        )
        computed = compute_budget_status(budget.spec, ledger, now, budget.generation)
        metrics.record_budget(namespace, budget.name, budget.spec, computed)
        old = HarnessBudgetStatus.model_validate(status or {})
        if old != computed:
            self.kube.patch_budget_status(namespace, budget.name, computed.to_api())
        return [(namespace, r.name) for r in runs if r.waiting]

    def forget(self, namespace: str, name: str, uid: str) -> list[tuple[str, str]]:
        """A deleted budget's ledger goes with it, and it admits no more; the runs waiting for budget
        room in its namespace, to reconcile now (it may have been what held them)."""
        self.ledgers.forget(namespace, name)
        metrics.forget_budget(namespace, name)
        self._deleted[uid] = namespace
        return [(namespace, r.name) for r in self.source.runs(namespace) if r.waiting]
