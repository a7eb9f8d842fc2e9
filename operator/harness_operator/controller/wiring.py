"""The Controller the watch caches and kopf's handlers drive (handlers.py finds it in kopf's memo): its
work queues, retries and ticks over the reconcilers __main__ built, and the cached views those read
(budgets, the queue, definitions). Runs take no kopf handler: their watch cache (run_cache.py) drives
them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from harness_operator.controller import metrics
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import Change, KeyedQueue
from harness_operator.controller.definitions import DefinitionReconciler
from harness_operator.controller.due import DueQueue
from harness_operator.controller.errors import Permanent, Temporary, classify, compute_backoff
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.pipelines import PipelineReconciler
from harness_operator.controller.progress import ProgressReader, ProgressTicks
from harness_operator.controller.reconcile import Reconciler
from harness_operator.controller.reference_cache import ReferenceStore
from harness_operator.controller.retention import ExpiryQueue
from harness_operator.controller.run_cache import RunChange, RunEntry, RunStore
from harness_operator.controller.schedules import ScheduleReconciler
from harness_operator.core.queue.budget import BudgetRef, RunCharge
from harness_operator.core.queue.fairqueue import QueueEntry

log = structlog.get_logger("harness_operator")
MAX_RETRIES = 6  # of a schedule's or a definition's status: their next event or tick tries again
BUDGET_TICK_SECONDS = 5.0  # a budget's ledger settled and its status written again
CHILD_WORKERS = 4


class CachedBudgets:
    """The reconciler's view of the budgets' and the runs' watch caches: no LIST per admission."""

    def __init__(self, references: ReferenceStore, runs: RunStore) -> None:
        self._references = references
        self._runs = runs

    def budgets(self, namespace: str) -> list[BudgetRef]:
        return self._references.budgets(namespace)

    def runs(self, namespace: str) -> list[RunCharge]:
        return self._runs.charges(namespace)


class CachedQueue:
    """The reconciler's view of the run cache's queue: who waits before a run, and whom a freed slot
    wakes."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs

    def entries(self, namespace: str) -> list[QueueEntry]:
        return self._runs.queue(namespace)


class CachedDefinitions:
    """Definitions from the definitions' watch caches: no GET per reconcile. A name neither cache holds
    is read from the API server before a run is refused, since the caches may lag a definition just
    made."""

    def __init__(self, references: ReferenceStore, kube: Kube) -> None:
        self._references = references
        self._api = KubeReader(kube)

    def definition(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        if namespace:
            spec = self._references.definition(namespace, name)
            if spec is not None:
                return {"spec": spec}
            if self._references.cluster_definition(name) is not None:
                return None  # the ClusterHarnessDefinition answers, from its cache
        else:
            spec = self._references.cluster_definition(name)
            if spec is not None:
                return {"spec": spec}
        return dict(self._api.definition(namespace, name) or {}) or None


class Controller:
    """What the watch caches and the handlers drive: one per process, built by __main__. Until `lead`,
    the caches fill and nothing is acted on (a standby)."""

    def __init__(
        self,
        reconciler: Reconciler,
        definitions: DefinitionReconciler | None = None,
        retention: ExpiryQueue | None = None,
        max_retries: int = MAX_RETRIES,
        progress: ProgressReader | None = None,
        progress_interval: float = 0,
        schedules: ScheduleReconciler | None = None,
        runs: RunStore | None = None,
        budget_tick_seconds: float = BUDGET_TICK_SECONDS,
        budgets: BudgetReconciler | None = None,
        grants: Grants | None = None,
        pipelines: PipelineReconciler | None = None,
    ) -> None:
        self.reconciler = reconciler  # runs
        self.budgets = budgets  # their ledgers, ticked here
        self.grants = grants  # a deleted run's go with it
        self.runs = RunStore() if runs is None else runs  # __main__'s, which a watch fills
        self.schedules = schedules
        self.pipelines = pipelines
        self.progress = progress
        self.ticks = (
            ProgressTicks(self.refresh_progress, progress_interval) if progress_interval > 0 else None
        )
        self.definitions = definitions
        self.retention = retention
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._children: KeyedQueue | None = None
        self._wake: KeyedQueue | None = None
        self.retries = DueQueue("reconcile-retries")  # temporary failures, and work off the watch threads
        self._budgets: dict[tuple[str, str], tuple[BudgetRef, dict[str, Any]]] = {}  # as last seen
        self.budget_tick_seconds = budget_tick_seconds

    def lead(self) -> None:
        """This replica leads: the workers start, and every run held is acted on as when first seen
        (the unfinished reconciled, the finished given their expiry, the running their progress ticks)."""
        with self._lock:
            if self._children is not None or self._stopped.is_set():
                return
            self._wake = KeyedQueue(lambda key: self.wake_waiting_runs(key[0]), 1)
            self._children = KeyedQueue(lambda key: self.reconcile_retrying(*key), CHILD_WORKERS)
        threading.Thread(target=self._resume, name="resume", daemon=True).start()

    def stop(self) -> None:
        """This replica stops acting (a SIGTERM, or its leadership lost), at once rather than when kopf
        has stopped: no event is acted on from now, and no queued or retried reconcile starts (one under
        way finishes). A replica that may no longer lead, or runs an older release's settings, must not
        reconcile a run the new leader reconciles."""
        self._stopped.set()

    def _resume(self) -> None:
        while True:
            try:
                changes = self.runs.every_run()
                break
            except TimeoutError as exc:  # the API server is slow or down: the watch lists again
                log.warning("Waiting for the run cache", error=str(exc))
        for change in changes:
            self.run_changed(change, resuming=True)

    def reconcile_retrying(self, namespace: str, name: str, retry: int = 0) -> None:
        """Reconcile a run, then each run it woke. A temporary API error reconciles that run again later
        (backing off to a minute, for as long as it takes: a run is never left unreconciled), and so
        does an error the classifier does not know (logged with its traceback, as kopf retried those); a
        permanent one stops, logged with its reason."""
        if self._stopped.is_set():
            return
        pending = [(namespace, name)]
        seen: set[tuple[str, str]] = set()
        while pending:
            key = pending.pop(0)
            if key in seen:
                continue
            seen.add(key)
            attempt = retry if key == (namespace, name) else 0
            try:
                requeue = self.reconciler.reconcile(*key, attempt)
                pending += requeue.now
                if requeue.after is not None:  # a retry waiting out its backoff
                    self.wake_after(*key, requeue.after)
            except Exception as exc:  # every error goes through the one classifier
                run = f"{key[0]}/{key[1]}"
                try:
                    verdict = classify(exc, attempt)
                except Exception:  # not the API server's: a bug, or a transport error it does not know
                    log.exception("Reconcile failed unexpectedly; retrying", run=run)
                    verdict = Temporary(compute_backoff(attempt), f"{type(exc).__name__}: {exc}")
                metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
                if isinstance(verdict, Permanent):
                    log.error("Reconcile failed", run=run, reason=verdict.reason, error=verdict.message)
                    continue
                log.warning("Reconcile failed; retrying", run=run, error=verdict.message)
                again = partial(self.reconcile_retrying, *key, attempt + 1)
                self._later(("run", *key), verdict.delay, again)

    def wake_after(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the run `delay` seconds from now (a retry whose backoff ends then starts); asked again
        for the same due time, nothing changes."""
        self.retries.start()
        again = partial(self.reconcile_retrying, namespace, name)
        self.retries.schedule(("backoff", namespace, name), delay, again, tag="backoff")

    def child_changed(self, change: Change) -> None:
        """A watch cache's change of one of our Jobs or Pods, deletion included (a Job or pod deleted
        mid-run ends its attempt as lost): its run is reconciled by a worker; a Job newly finished frees
        a slot, so the runs first in the namespace's queue are woken too."""
        children, wake = self._children, self._wake
        if children is None or wake is None or self._stopped.is_set():
            return  # a standby, or stopped: the new leader reconciles every unfinished run
        if change.run:
            children.put((change.namespace, change.run))
        if change.slot_freed:
            wake.put((change.namespace, ""))

    def run_changed(self, change: RunChange, resuming: bool = False) -> None:
        """A run's watch event (or, on `lead`, each run held): a new or changed unfinished run is
        reconciled by a worker; a running one has its progress ticks (nothing is polled); a finished one
        with a TTL its deletion scheduled; a deleted one leaves the gauges and its egress grant; a
        schedule's run that finished or went is news to its schedule (its history limits, Forbid's
        waiting, its active runs; on `lead` the schedules are reconciled anyway); any change of a
        pipeline's run is news to its pipeline (its steps, phases and costs). Nothing here waits on the
        API server: the watch thread goes on at once."""
        children = self._children
        if children is None or self._stopped.is_set():
            return  # a standby, or stopped: the new leader acts on every run it holds
        namespace, name, entry = change.namespace, change.name, change.entry
        if change.deleted:
            self._later(("run-deleted", namespace, name), 0, partial(self.run_deleted, namespace, name))
        if change.reconcile:
            children.put((namespace, name))
        self.follow_progress(namespace, name, not change.deleted and entry.progress)
        finished_or_gone = change.deleted or not entry.unfinished
        if entry.schedule is not None and finished_or_gone and not resuming:
            again = partial(self.reconcile_schedule, namespace, entry.schedule)
            self._later(("schedule-due", namespace, entry.schedule), 0, again)
        if entry.pipeline is not None and not resuming:
            again = partial(self.reconcile_pipeline, namespace, entry.pipeline)
            self._later(("harnesspipelines", namespace, entry.pipeline), 0, again)
        self.schedule_expiry(namespace, name, entry, change.deleted)

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
        if self._stopped.is_set():
            return
        try:
            if self.progress is not None:
                self.progress.refresh(namespace, name)
        except Exception as exc:
            verdict = classify(exc)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            log.warning("Progress read failed", run=f"{namespace}/{name}", error=verdict.message)

    def run_deleted(self, namespace: str, name: str) -> None:
        """A deleted run leaves the gauges; one deleted before it finished leaves its egress grant, which
        its deletion revokes."""
        self.reconciler.forget(namespace, name)
        if self.grants is None:
            return
        try:
            self.grants.revoke_run(namespace, name)
        except Exception as exc:  # left behind, the grant opens hosts only to the deleted plan Secret
            log.warning("Revoking the gateway grants failed", run=f"{namespace}/{name}", error=str(exc))

    def reconcile_budget(self, budget: BudgetRef, namespace: str, status: dict[str, Any]) -> None:
        """The budget's ledger settled and its status written; the runs waiting for it reconciled."""
        if self._stopped.is_set() or self.budgets is None:
            return
        for key in self.budgets.reconcile(budget, namespace, status):
            self.reconcile_retrying(*key)

    def budget_seen(self, budget: BudgetRef, namespace: str, status: dict[str, Any]) -> None:
        """A budget listed or changed: reconciled now, then every `budget_tick_seconds` (no event marks a
        period's end) on the operator's own heap, not a kopf timer, which would hold a finalizer on every
        budget: after `helm uninstall`, nothing would remove it, and the namespace would never delete."""
        with self._lock:
            fresh = (namespace, budget.name) not in self._budgets
            self._budgets[(namespace, budget.name)] = (budget, status)
        if fresh:
            self.retries.start()
            self.retries.schedule(
                ("budget-tick", namespace, budget.name), 0, partial(self._tick_budget, namespace, budget.name)
            )

    def _tick_budget(self, namespace: str, name: str) -> None:
        with self._lock:
            seen = self._budgets.get((namespace, name))
        if seen is None or self._stopped.is_set():
            return
        try:
            self.reconcile_budget(seen[0], namespace, seen[1])
        except Exception as exc:  # every error goes through the one classifier; the next tick retries
            verdict = classify(exc)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            log.warning(
                "Budget not reconciled; retrying", budget=f"{namespace}/{name}", error=verdict.message
            )
        again = partial(self._tick_budget, namespace, name)
        self.retries.schedule(("budget-tick", namespace, name), self.budget_tick_seconds, again)

    def forget_budget(self, namespace: str, name: str, uid: str) -> None:
        """A deleted budget: ticked no more, and the runs it held waiting are reconciled (they start if
        nothing else holds them)."""
        with self._lock:
            self._budgets.pop((namespace, name), None)
        self.retries.forget(("budget-tick", namespace, name))
        if self._stopped.is_set() or self.budgets is None:
            return
        for key in self.budgets.forget(namespace, name, uid):
            self.reconcile_retrying(*key)

    def reconcile_schedule(self, namespace: str, name: str, retry: int = 0) -> None:
        """The schedule brought forward and woken again at its next time (one heap entry, no timer of
        its own); like child events, a temporary failure retries later, a bounded number of times."""
        if self.schedules is None or self._stopped.is_set():
            return
        self.retries.start()
        again = partial(self.reconcile_schedule, namespace, name)
        retrying, wake_in = self._tried("schedule", namespace, name, retry, self.schedules.reconcile, again)
        if retrying:
            return
        key = ("schedule-due", namespace, name)
        if wake_in is None:
            self.retries.forget(key)
        else:
            self.retries.schedule(key, wake_in, partial(self.reconcile_schedule, namespace, name))

    def schedule_deleted(self, namespace: str, name: str) -> None:
        """A deleted schedule is not woken again (its runs go with it, through their ownerReferences)."""
        self.retries.forget(("schedule-due", namespace, name))
        self.retries.forget(("harnessschedules", namespace, name))

    def reconcile_pipeline(self, namespace: str, name: str, retry: int = 0) -> None:
        """The pipeline brought forward; like a schedule, a temporary failure retries later, a bounded
        number of times (its runs' next change tries again too)."""
        if self.pipelines is None or self._stopped.is_set():
            return
        again = partial(self.reconcile_pipeline, namespace, name)
        self._tried("pipeline", namespace, name, retry, self.pipelines.reconcile, again)

    def _tried(
        self,
        kind: str,
        namespace: str,
        name: str,
        retry: int,
        reconcile: Callable[[str, str], Any],
        again: Callable[[int], None],
    ) -> tuple[bool, Any]:
        """(retrying, result) of reconcile(namespace, name), every error through the one classifier: a
        temporary one is tried again later (`again(retry + 1)`), a bounded number of times."""
        try:
            return False, reconcile(namespace, name)
        except Exception as exc:
            verdict = classify(exc, retry)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            what = {kind: f"{namespace}/{name}"}
            if isinstance(verdict, Temporary) and retry + 1 < self.max_retries:
                log.warning(f"{kind.capitalize()} not reconciled; retrying", **what, error=verdict.message)
                self._later((f"harness{kind}s", namespace, name), verdict.delay, partial(again, retry + 1))
                return True, None
            log.error(f"{kind.capitalize()} not reconciled", **what, error=verdict.message)
            return False, None

    def check_definition(self, plural: str, namespace: str | None, name: str, retry: int = 0) -> None:
        """Like runs' child events, a temporary failure retries later, a bounded number of times."""
        what = f"{namespace}/{name}" if namespace else name
        if self.definitions is None or self._stopped.is_set():
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

    def schedule_expiry(self, namespace: str, name: str, entry: RunEntry, deleted: bool) -> None:
        """A finished run with a TTL gets its deletion scheduled; a deleted one is forgotten."""
        if self.retention is None:
            return
        if deleted or entry.expires_at is None:
            self.retention.forget(namespace, name)
        else:
            self.retention.schedule(namespace, name, entry.uid, max(0.0, entry.expires_at - time.time()))

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
