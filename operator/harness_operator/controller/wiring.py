"""The operator's parts wired in one place: the reconciler, the work queues the watch caches feed, the
expiry heap, and what each kopf handler asks of them (handlers.py finds this in kopf's memo)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

import kopf
import structlog

from harness_operator.controller import metrics
from harness_operator.controller.cache import Change, KeyedQueue
from harness_operator.controller.definitions import DefinitionReconciler
from harness_operator.controller.due import DueQueue
from harness_operator.controller.errors import Permanent, Temporary, classify
from harness_operator.controller.kube import Kube, KubeReader
from harness_operator.controller.progress import ProgressReader, ProgressTicks
from harness_operator.controller.reconcile import Reconciler
from harness_operator.controller.retention import ExpiryQueue, compute_expiry
from harness_operator.controller.run_cache import RUN_KIND, RunStore
from harness_operator.controller.schedules import ScheduleReconciler
from harness_operator.core.budget import BudgetRef, RunCharge
from harness_operator.core.fairqueue import QueueEntry

log = structlog.get_logger("harness_operator")
MAX_CHILD_EVENT_RETRIES = 6
CHILD_WORKERS = 4


class IndexBudgets:
    """The reconciler's view of the budget index and the run cache: no LIST per admission."""

    def __init__(self, budgets: kopf.Index[str, BudgetRef], runs: RunStore) -> None:
        self._budgets = budgets
        self._runs = runs

    def budgets(self, namespace: str) -> list[BudgetRef]:
        return list(self._budgets.get(namespace, []))

    def runs(self, namespace: str) -> list[RunCharge]:
        return self._runs.charges(namespace)


class CachedQueue:
    """The reconciler's view of the run cache's queue: who waits before a run, and whom a freed slot
    wakes."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs

    def entries(self, namespace: str) -> list[QueueEntry]:
        return self._runs.queue(namespace)


class IndexDefinitions:
    """Definitions from the two definition indexes: no GET per reconcile. A name neither index holds is
    read from the API server before a run is refused, since the indexes may lag a definition just made."""

    def __init__(self, namespaced: kopf.Index[Any, Any], cluster: kopf.Index[Any, Any], kube: Kube) -> None:
        self._namespaced = namespaced
        self._cluster = cluster
        self._api = KubeReader(kube)

    def definition(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        if namespace:
            for spec in self._namespaced.get((namespace, name), []):
                return {"spec": spec}
            if name in self._cluster:
                return None  # the ClusterHarnessDefinition answers, from its index
        else:
            for spec in self._cluster.get(name, []):
                return {"spec": spec}
        return dict(self._api.definition(namespace, name) or {}) or None


class Controller:
    """What the handlers and the watch caches drive: one per process, built by __main__."""

    def __init__(
        self,
        reconciler: Reconciler,
        definitions: DefinitionReconciler | None = None,
        retention: ExpiryQueue | None = None,
        default_ttl: int | None = None,
        ttl_spares_applied: bool = True,
        max_retries: int = MAX_CHILD_EVENT_RETRIES,
        progress: ProgressReader | None = None,
        progress_interval: float = 0,
        schedules: ScheduleReconciler | None = None,
        runs: RunStore | None = None,
    ) -> None:
        self.reconciler = reconciler  # runs, with their budgets (reconciler.budgets)
        self.runs = RunStore() if runs is None else runs  # __main__'s, which a watch fills
        self.schedules = schedules
        self.progress = progress
        self.ticks = (
            ProgressTicks(self.refresh_progress, progress_interval) if progress_interval > 0 else None
        )
        self.definitions = definitions
        self.retention = retention
        self.default_ttl = default_ttl
        self.ttl_spares_applied = ttl_spares_applied
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self._children: KeyedQueue | None = None
        self._wake: KeyedQueue | None = None
        self.retries = DueQueue("reconcile-retries")  # temporary failures of calls kopf does not retry
        reconciler.wake_later = self.wake_after

    def use_indexes(self, kwargs: dict[str, Any]) -> None:
        """Hand kopf's indexes (every handler call has them) and the run cache to the reconciler once,
        then let the workers reconcile what the watch caches of Jobs and Pods report."""
        with self._lock:
            if self._children is not None:
                return
            reconciler = self.reconciler
            reconciler.definitions = IndexDefinitions(
                kwargs["definition_index"], kwargs["cluster_definition_index"], reconciler.kube
            )
            reconciler.queue_source = CachedQueue(self.runs)
            reconciler.budgets.source = IndexBudgets(kwargs["budget_index"], self.runs)
            if self.schedules is not None:
                self.schedules.runs = self.runs.scheduled
            self._wake = KeyedQueue(lambda key: self.wake_waiting_runs(key[0]), 1)
            self._children = KeyedQueue(lambda key: self.reconcile_after_child_event(*key), CHILD_WORKERS)

    def reconcile_and_wake(self, namespace: str, name: str, retry: int = 0) -> None:
        """Reconcile a run, then each run it woke; API errors retry with a bounded delay or stop visibly."""
        pending = [(namespace, name)]
        seen: set[tuple[str, str]] = set()
        while pending:
            key = pending.pop(0)
            if key in seen:
                continue
            seen.add(key)
            try:
                pending += self.reconciler.reconcile(*key, retry)
            except Exception as exc:  # every error goes through the one classifier
                verdict = classify(exc, retry)
                metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
                if isinstance(verdict, Permanent):
                    log.error(
                        "Reconcile failed",
                        run=f"{key[0]}/{key[1]}",
                        reason=verdict.reason,
                        error=verdict.message,
                    )
                    raise kopf.PermanentError(verdict.message) from exc
                raise kopf.TemporaryError(verdict.message, delay=verdict.delay) from exc

    def reconcile_after_child_event(self, namespace: str, name: str, retry: int = 0) -> None:
        """kopf does not retry event handlers, so a temporary failure here schedules its own bounded retry
        (in the retries queue, not a sleep in the handler); the next event of the Job or Pod also tries
        again."""
        try:
            self.reconcile_and_wake(namespace, name, retry)
        except kopf.TemporaryError as exc:
            if retry + 1 >= self.max_retries:
                log.error("Reconcile after child event gave up", run=f"{namespace}/{name}", error=str(exc))
                return
            log.warning(
                "Reconcile after child event failed; retrying", run=f"{namespace}/{name}", error=str(exc)
            )
            again = partial(self.reconcile_after_child_event, namespace, name, retry + 1)
            self._later(("run", namespace, name), exc.delay or 1.0, again)
        except kopf.PermanentError:
            pass  # reconcile_and_wake logged it with its reason

    def wake_after(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the run `delay` seconds from now (a retry whose backoff ends then starts); asked again
        for the same due time, nothing changes."""
        self.retries.start()
        again = partial(self.reconcile_after_child_event, namespace, name)
        self.retries.schedule(("backoff", namespace, name), delay, again, tag="backoff")

    def child_changed(self, change: Change) -> None:
        """A watch cache's change of one of our Jobs or Pods, deletion included (a Job or pod deleted
        mid-run ends its attempt as lost): its run is reconciled by a worker; a Job newly finished frees
        a slot, so the runs first in the namespace's queue are woken too."""
        children, wake = self._children, self._wake
        if children is None or wake is None:
            return  # no kopf handler ran yet: kopf's resume handlers reconcile every run at startup
        if change.run:
            children.put((change.namespace, change.run))
        if change.slot_freed:
            wake.put((change.namespace, ""))

    def wake_waiting_runs(self, namespace: str) -> None:
        """Reconcile the runs a freed slot lets move: the earliest queued, and those waiting on a run."""
        for key in self.reconciler.runs_waiting(namespace):
            if self._children is not None:
                self._children.put(key)

    def follow_progress(self, namespace: str, name: str, wanted: bool) -> None:
        """A run whose attempt runs has its progress read every tick; one that stopped or went away not."""
        if self.ticks is not None:
            self.ticks.follow(namespace, name, wanted)

    def refresh_progress(self, namespace: str, name: str) -> None:
        """Best effort: a failed read is counted and logged, and the next tick tries again."""
        try:
            if self.progress is not None:
                self.progress.refresh(namespace, name)
        except Exception as exc:
            verdict = classify(exc)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            log.warning("Progress read failed", run=f"{namespace}/{name}", error=verdict.message)

    def run_seen(self, type_: str | None, body: Mapping[str, Any]) -> None:
        """kopf's copy of a run, into the run cache before any handler reads it."""
        self.runs.apply(RUN_KIND, str(type_ or "MODIFIED"), body)

    def run_deleted(self, namespace: str, name: str) -> None:
        """A deleted run leaves the gauges; one deleted before it finished leaves its egress grant, which
        its deletion revokes."""
        self.reconciler.forget(namespace, name)
        try:
            self.reconciler.grants.revoke_run(namespace, name)
        except Exception as exc:  # left behind, the grant opens hosts only to the deleted plan Secret
            log.warning("Revoking the gateway grants failed", run=f"{namespace}/{name}", error=str(exc))

    def reconcile_budget(self, budget: BudgetRef, namespace: str, status: dict[str, Any]) -> None:
        """The budget's ledger settled and its status written; the runs waiting for it reconciled."""
        for key in self.reconciler.budgets.reconcile(budget, namespace, status):
            self.reconcile_after_child_event(*key)

    def forget_budget(self, namespace: str, name: str, uid: str) -> None:
        """A deleted budget: the runs it held waiting are reconciled (they start if nothing else holds
        them)."""
        for key in self.reconciler.budgets.forget(namespace, name, uid):
            self.reconcile_after_child_event(*key)

    def reconcile_schedule(self, namespace: str, name: str, retry: int = 0) -> None:
        """The schedule brought forward and woken again at its next time (one heap entry, no timer of
        its own); like child events, a temporary failure retries later, a bounded number of times."""
        if self.schedules is None:
            return
        self.retries.start()
        try:
            wake_in = self.schedules.reconcile(namespace, name)
        except Exception as exc:  # every error goes through the one classifier
            verdict = classify(exc, retry)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            what = f"{namespace}/{name}"
            if isinstance(verdict, Temporary) and retry + 1 < self.max_retries:
                log.warning("Schedule not reconciled; retrying", schedule=what, error=verdict.message)
                again = partial(self.reconcile_schedule, namespace, name, retry + 1)
                self._later(("harnessschedules", namespace, name), verdict.delay, again)
                return
            log.error("Schedule not reconciled", schedule=what, error=verdict.message)
            wake_in = None
        key = ("schedule-due", namespace, name)
        if wake_in is None:
            self.retries.forget(key)
        else:
            self.retries.schedule(key, wake_in, partial(self.reconcile_schedule, namespace, name))

    def schedule_deleted(self, namespace: str, name: str) -> None:
        """A deleted schedule is not woken again (its runs go with it, through their ownerReferences)."""
        self.retries.forget(("schedule-due", namespace, name))
        self.retries.forget(("harnessschedules", namespace, name))

    def check_definition(self, plural: str, namespace: str | None, name: str, retry: int = 0) -> None:
        """Like runs' child events, a temporary failure retries later, a bounded number of times."""
        what = f"{namespace}/{name}" if namespace else name
        if self.definitions is None:
            return
        try:
            self.definitions.reconcile(plural, namespace, name)
        except Exception as exc:  # every error goes through the one classifier
            verdict = classify(exc, retry)
            if isinstance(verdict, Temporary) and retry + 1 < self.max_retries:
                log.warning("Definition status not written; retrying", definition=what, error=verdict.message)
                again = partial(self.check_definition, plural, namespace, name, retry + 1)
                self._later((plural, namespace, name), verdict.delay, again)
                return
            log.error("Definition status not written", definition=what, error=verdict.message)

    def schedule_expiry(self, type_: str | None, body: kopf.Body) -> None:
        """A finished run with a TTL gets its deletion scheduled; a deleted one is forgotten."""
        namespace, name = body.metadata.namespace, body.metadata.name
        if self.retention is None or not namespace or not name:
            return
        delay = (
            None
            if type_ == "DELETED"
            else compute_expiry(body, self.default_ttl, datetime.now(UTC), self.ttl_spares_applied)
        )
        if delay is None:
            self.retention.forget(namespace, name)
        else:
            self.retention.schedule(namespace, name, body.metadata.uid or "", delay)

    @staticmethod
    def log_retention_error(namespace: str, name: str, exc: Exception) -> None:
        verdict = classify(exc)
        log.warning(
            "Deleting an expired run failed; retrying", run=f"{namespace}/{name}", error=verdict.message
        )

    def _later(self, key: tuple[str | None, ...], delay: float, call: Callable[[], None]) -> None:
        """`call()` `delay` seconds from now, replacing a retry of the same object (`key`) already
        waiting."""
        self.retries.start()
        self.retries.schedule(key, delay, call)
