"""kopf registrations only: one reconcile path for runs; our Jobs and Pods come from cache.py's watches."""

from __future__ import annotations

import copy
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import kopf
import structlog
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import GROUP, VERSION, HarnessBudgetSpec, HarnessRunStatus
from harness_operator.controller import metrics
from harness_operator.controller.cache import Change, KeyedQueue
from harness_operator.controller.errors import Permanent, Temporary, classify
from harness_operator.controller.kube import Kube, KubeReader
from harness_operator.controller.reconcile import Reconciler
from harness_operator.controller.retention import ExpiryQueue, compute_expiry
from harness_operator.core.budget import BudgetRef, RunCharge, build_run_charge
from harness_operator.core.fairqueue import QueueEntry, build_queue_entry
from harness_operator.core.status import is_progress_wanted

log = structlog.get_logger("harness_operator")
MAX_CHILD_EVENT_RETRIES = 6
CHILD_WORKERS = 4
BUDGET_RESYNC_SECONDS = 5.0
# Left out of kopf's diff base: they are immutable, so no diff needs them, and they may be as large as the
# CRD allows; a second copy in an annotation would push the run past the API server's 256 KiB limit on
# all annotations together, and kopf's own patch would fail with 422.
DIFF_BASE_IGNORED_FIELDS = ("spec.prompt", "spec.stdin", "spec.with", "spec.fallback")
_state: dict[str, Reconciler] = {}
_work: dict[str, KeyedQueue] = {}
_work_lock = threading.Lock()
_retention: dict[str, Any] = {}  # "queue": ExpiryQueue, "default": the chart's TTL (None: keep)


def install(reconciler: Reconciler) -> None:
    """Give the handlers their reconciler (set once by __main__ before kopf starts)."""
    _state["reconciler"] = reconciler


def reconcile_and_wake(namespace: str, name: str, retry: int = 0) -> None:
    """Reconcile a run, then each run it woke; API errors retry with a bounded delay or stop visibly."""
    pending = [(namespace, name)]
    seen: set[tuple[str, str]] = set()
    while pending:
        key = pending.pop(0)
        if key in seen:
            continue
        seen.add(key)
        try:
            pending += _state["reconciler"].reconcile(*key, retry)
        except Exception as exc:  # every error goes through the one classifier
            verdict = classify(exc, retry)
            metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
            if isinstance(verdict, Permanent):
                log.error(
                    "Reconcile failed", run=f"{key[0]}/{key[1]}", reason=verdict.reason, error=verdict.message
                )
                raise kopf.PermanentError(verdict.message) from exc
            raise kopf.TemporaryError(verdict.message, delay=verdict.delay) from exc


def install_progress_timer(interval: float) -> None:
    """Every `interval` seconds, for each run whose attempt runs (and only those), refresh its progress."""
    kopf.timer(GROUP, VERSION, "harnessruns", interval=interval, when=wants_progress)(progress_tick)


def wants_progress(body: kopf.Body, **_: Any) -> bool:
    return is_progress_wanted(_status_of(body))


def _status_of(body: kopf.Body) -> HarnessRunStatus | None:
    try:
        return HarnessRunStatus.model_validate(dict(body.get("status") or {}))
    except ValueError:
        return None


def progress_tick(namespace: str | None, name: str, **_: Any) -> None:
    """Best effort: a failed read is counted and logged, and the next tick tries again."""
    if not namespace:
        return
    try:
        _state["reconciler"].refresh_progress(namespace, name)
    except Exception as exc:
        verdict = classify(exc)
        metrics.RECONCILE_ERRORS.labels(kind=type(verdict).__name__).inc()
        log.warning("Progress read failed", run=f"{namespace}/{name}", error=verdict.message)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration", ignored_fields=DIFF_BASE_IGNORED_FIELDS
    )
    settings.posting.enabled = False  # we post our own Events; kopf's are noise
    settings.peering.standalone = True  # one replica (Deployment strategy Recreate); no peering CRDs
    settings.execution.max_workers = 8
    settings.networking.request_timeout = 30
    settings.watching.server_timeout = 300
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)


class IndexBudgets:
    """The reconciler's view of the two watch caches below: no LIST per admission."""

    def __init__(self, budgets: kopf.Index[str, BudgetRef], runs: kopf.Index[str, RunCharge]) -> None:
        self._budgets = budgets
        self._runs = runs

    def budgets(self, namespace: str) -> list[BudgetRef]:
        return list(self._budgets.get(namespace, []))

    def runs(self, namespace: str) -> list[RunCharge]:
        return list(self._runs.get(namespace, []))


@kopf.index(GROUP, VERSION, "harnessbudgets")
def budget_index(namespace: str | None, name: str, spec: Any, meta: Any, **_: Any) -> dict[str, BudgetRef]:
    """Every valid HarnessBudget, by namespace (kopf fills it before any handler runs)."""
    try:
        parsed = HarnessBudgetSpec.model_validate(dict(spec))
    except ValidationError:
        return {}  # the CRD's schema and CEL rules keep these out; an old object is skipped, not fatal
    return {namespace or "": BudgetRef(name, parsed, meta.get("generation"), str(meta.get("uid", "")))}


@kopf.index(GROUP, VERSION, "harnessruns")
def run_index(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, RunCharge]:
    """Every run's weight in budgets (start, cost, reservation), by namespace."""
    return {namespace or "": build_run_charge(body)}


@kopf.index(GROUP, VERSION, "harnessruns")
def queue_index(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, QueueEntry]:
    """Every run that has not started (queued, or waiting for an output or budget room), by namespace."""
    entry = build_queue_entry(body)
    return {} if entry is None else {namespace or "": entry}


class IndexQueue:
    """The reconciler's view of queue_index: who waits before a run, and whom a freed slot wakes."""

    def __init__(self, index: kopf.Index[str, QueueEntry]) -> None:
        self._index = index

    def entries(self, namespace: str) -> list[QueueEntry]:
        return list(self._index.get(namespace, []))


@kopf.index(GROUP, VERSION, "harnessdefinitions")
def definition_index(namespace: str | None, name: str, spec: Any, **_: Any) -> dict[Any, Any]:
    """Every HarnessDefinition's spec, by (namespace, name)."""
    return {(namespace, name): copy.deepcopy(dict(spec))}


@kopf.index(GROUP, VERSION, "clusterharnessdefinitions")
def cluster_definition_index(name: str, spec: Any, **_: Any) -> dict[Any, Any]:
    """Every ClusterHarnessDefinition's spec, by name."""
    return {name: copy.deepcopy(dict(spec))}


class IndexDefinitions:
    """Definitions from the two indexes above: no GET per reconcile. A name neither index holds is
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


def _use_indexes(kwargs: dict[str, Any]) -> None:
    """Hand kopf's indexes to the reconciler (the first handler call has them), then let the workers
    reconcile what the watch caches of Jobs and Pods report."""
    reconciler = _state["reconciler"]
    if "children" in _work:
        return
    reconciler.definitions = IndexDefinitions(
        kwargs["definition_index"], kwargs["cluster_definition_index"], reconciler.kube
    )
    reconciler.queue_source = IndexQueue(kwargs["queue_index"])
    reconciler.budget_source = IndexBudgets(kwargs["budget_index"], kwargs["run_index"])
    with _work_lock:
        if "children" not in _work:
            _work["wake"] = KeyedQueue(lambda key: wake_waiting_runs(key[0]), 1)
            _work["children"] = KeyedQueue(lambda key: reconcile_after_child_event(*key), CHILD_WORKERS)


def is_unfinished(body: kopf.Body, **_: Any) -> bool:
    """Finished runs are left alone at startup: thousands of them cost no read and no reconcile."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Succeeded" and c.get("status") in ("True", "False") for c in conditions)


@kopf.on.resume(GROUP, VERSION, "harnessruns", when=is_unfinished)
@kopf.on.create(GROUP, VERSION, "harnessruns")
@kopf.on.update(GROUP, VERSION, "harnessruns", field="spec")
def run_changed(namespace: str | None, name: str, retry: int, **kwargs: Any) -> None:
    _use_indexes(kwargs)
    if namespace:
        reconcile_and_wake(namespace, name, retry)


@kopf.on.event(GROUP, VERSION, "harnessruns")
def run_event(namespace: str | None, name: str, type: str | None, **_: Any) -> None:
    """A run deleted before it finished leaves its egress grant; its deletion revokes it (an event
    handler: kopf calls deletion handlers only behind a finalizer, which runs do not get)."""
    if type == "DELETED" and namespace:
        try:
            _state["reconciler"].revoke_egress(namespace, name)
        except Exception as exc:  # left behind, the grant opens hosts only to the deleted plan Secret
            log.warning("Revoking the egress grant failed", run=f"{namespace}/{name}", error=str(exc))


def child_changed(change: Change) -> None:
    """A watch cache's change of one of our Jobs or Pods, deletion included (a Job or pod deleted
    mid-run ends its attempt as lost): its run is reconciled by a worker; a Job newly finished frees a
    slot, so the runs first in the namespace's queue are woken too."""
    if "children" not in _work:
        return  # no kopf handler ran yet: kopf's resume handlers reconcile every run at startup
    if change.run:
        _work["children"].put((change.namespace, change.run))
    if change.slot_freed:
        _work["wake"].put((change.namespace, ""))


def wake_waiting_runs(namespace: str) -> None:
    """Reconcile the runs a freed slot lets move: the earliest queued, and those waiting on a run."""
    for key in _state["reconciler"].runs_waiting(namespace):
        _work["children"].put(key)


@kopf.timer(GROUP, VERSION, "harnessbudgets", interval=BUDGET_RESYNC_SECONDS)
def budget_tick(namespace: str | None, name: str, spec: Any, meta: Any, status: Any, **kwargs: Any) -> None:
    """Keep the budget's status current and start the runs waiting for it when the period rolled over
    (no event marks that moment; a tick does)."""
    _use_indexes(kwargs)
    if not namespace:
        return
    try:
        parsed = HarnessBudgetSpec.model_validate(dict(spec))
    except ValidationError:
        return
    budget = BudgetRef(name, parsed, meta.get("generation"), str(meta.get("uid", "")))
    for key in _state["reconciler"].reconcile_budget(budget, namespace, dict(status or {})):
        reconcile_after_child_event(*key)


@kopf.on.delete(GROUP, VERSION, "harnessbudgets", optional=True)
def budget_deleted(namespace: str | None, name: str, **_: Any) -> None:
    """A deleted budget's ledger goes too (optional: no finalizer holds the budget for it; a ledger an
    operator that was down missed is replaced when a budget of the same name is created again)."""
    if namespace:
        _state["reconciler"].forget_budget(namespace, name)


def reconcile_after_child_event(namespace: str, name: str, retry: int = 0) -> None:
    """kopf does not retry event handlers, so a temporary failure here schedules its own bounded retry
    (a timer, not a sleep in the handler); the next event of the Job or Pod also tries again."""
    try:
        reconcile_and_wake(namespace, name, retry)
    except kopf.TemporaryError as exc:
        if retry + 1 >= MAX_CHILD_EVENT_RETRIES:
            log.error("Reconcile after child event gave up", run=f"{namespace}/{name}", error=str(exc))
            return
        log.warning("Reconcile after child event failed; retrying", run=f"{namespace}/{name}", error=str(exc))
        timer = threading.Timer(exc.delay or 1.0, reconcile_after_child_event, (namespace, name, retry + 1))
        timer.daemon = True
        timer.start()
    except kopf.PermanentError:
        pass  # reconcile_and_wake logged it with its reason


@kopf.on.event(GROUP, VERSION, "harnessdefinitions")
@kopf.on.event(GROUP, VERSION, "clusterharnessdefinitions")
def definition_changed(body: kopf.Body, resource: kopf.Resource, type: str | None, **kwargs: Any) -> None:
    """An event handler, not create/update: kopf then keeps no annotations of its own on definitions.
    Our own status write comes back as an event and finds nothing to change."""
    _use_indexes(kwargs)
    if type != "DELETED":
        check_definition(resource.plural, body.metadata.namespace, body.metadata.name)


def check_definition(plural: str, namespace: str | None, name: str, retry: int = 0) -> None:
    """Like runs' child events, a temporary failure retries on a timer, a bounded number of times."""
    what = f"{namespace}/{name}" if namespace else name
    try:
        _state["reconciler"].reconcile_definition(plural, namespace, name)
    except Exception as exc:  # every error goes through the one classifier
        verdict = classify(exc, retry)
        if isinstance(verdict, Temporary) and retry + 1 < MAX_CHILD_EVENT_RETRIES:
            log.warning("Definition status not written; retrying", definition=what, error=verdict.message)
            timer = threading.Timer(verdict.delay, check_definition, (plural, namespace, name, retry + 1))
            timer.daemon = True
            timer.start()
            return
        log.error("Definition status not written", definition=what, error=verdict.message)


def install_retention(queue: ExpiryQueue, default_ttl: int | None) -> None:
    """Give the run watch below its expiry heap and the operator's default TTL (set once by __main__)."""
    _retention.update(queue=queue, default=default_ttl)


@kopf.on.event(GROUP, VERSION, "harnessruns")
def run_retention(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Every run is seen once when the operator starts and again on each change: a finished run with a
    TTL gets its deletion scheduled; nothing is polled, and a run still in flight costs nothing here."""
    queue: ExpiryQueue | None = _retention.get("queue")
    namespace, name = body.metadata.namespace, body.metadata.name
    if queue is None or not namespace or not name:
        return
    delay = None if type == "DELETED" else compute_expiry(body, _retention["default"], datetime.now(UTC))
    if delay is None:
        queue.forget(namespace, name)
    else:
        queue.schedule(namespace, name, body.metadata.uid or "", delay)


def log_retention_error(namespace: str, name: str, exc: Exception) -> None:
    verdict = classify(exc)
    log.warning("Deleting an expired run failed; retrying", run=f"{namespace}/{name}", error=verdict.message)
