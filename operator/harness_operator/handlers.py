"""kopf registrations only: one reconcile path for runs, plus watches on our labelled Jobs and Pods."""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf
import structlog
from pydantic import ValidationError

from harness_operator import metrics
from harness_operator.api.v1alpha1 import GROUP, VERSION, HarnessBudgetSpec, HarnessRunStatus
from harness_operator.budget import BudgetRef, RunCharge, build_run_charge
from harness_operator.errors import Permanent, Temporary, classify
from harness_operator.naming import ANNOTATION_RUN, LABEL_MANAGED_BY, MANAGED_BY
from harness_operator.reconcile import Reconciler
from harness_operator.status import is_job_finished, is_progress_wanted

log = structlog.get_logger("harness_operator")
OURS = {LABEL_MANAGED_BY: MANAGED_BY}
MAX_CHILD_EVENT_RETRIES = 6
BUDGET_RESYNC_SECONDS = 5.0
# Left out of kopf's diff base: they are immutable, so no diff needs them, and they may be as large as the
# CRD allows; a second copy in an annotation would push the run past the API server's 256 KiB limit on
# all annotations together, and kopf's own patch would fail with 422.
DIFF_BASE_IGNORED_FIELDS = ("spec.prompt", "spec.stdin")
_state: dict[str, Reconciler] = {}


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
            pending += _state["reconciler"].reconcile(*key)
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
    return {namespace or "": BudgetRef(name, parsed, meta.get("generation"))}


@kopf.index(GROUP, VERSION, "harnessruns")
def run_index(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, RunCharge]:
    """Every run's weight in budgets (start, cost, reservation), by namespace."""
    return {namespace or "": build_run_charge(body)}


def _use_indexes(kwargs: dict[str, Any]) -> None:
    reconciler = _state["reconciler"]
    if isinstance(reconciler.budget_source, IndexBudgets):
        return
    reconciler.budget_source = IndexBudgets(kwargs["budget_index"], kwargs["run_index"])


@kopf.on.resume(GROUP, VERSION, "harnessruns")
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


@kopf.on.event("batch", "v1", "jobs", labels=OURS)
@kopf.on.event("", "v1", "pods", labels=OURS)
def child_changed(body: kopf.Body, **kwargs: Any) -> None:
    """Every change, deletion included: a Job or pod deleted mid-run ends its attempt as lost."""
    _use_indexes(kwargs)
    run = (body.metadata.annotations or {}).get(ANNOTATION_RUN)
    if run and body.metadata.namespace:
        reconcile_after_child_event(body.metadata.namespace, run)
        if body.get("kind") == "Job" and is_job_finished(dict(body)):
            wake_waiting_runs(body.metadata.namespace)


def wake_waiting_runs(namespace: str) -> None:
    """A finished Job frees a slot of its namespace: reconcile the runs queued (or waiting) there."""
    try:
        woken = _state["reconciler"].runs_waiting(namespace)
    except Exception as exc:  # the next finished Job or the run's own events try again
        log.warning("Listing the runs waiting for a slot failed", namespace=namespace, error=str(exc))
        return
    for key in woken:
        reconcile_after_child_event(*key)


@kopf.timer(GROUP, VERSION, "harnessbudgets", interval=BUDGET_RESYNC_SECONDS)
def budget_tick(namespace: str | None, name: str, spec: Any, meta: Any, status: Any, **kwargs: Any) -> None:
    """Keep the budget's status current and start the runs waiting for it when the period rolled over
    (no event marks that moment; a tick does)."""
    _use_indexes(kwargs)
    if not namespace:
        return
    try:
        budget = BudgetRef(name, HarnessBudgetSpec.model_validate(dict(spec)), meta.get("generation"))
    except ValidationError:
        return
    for key in _state["reconciler"].reconcile_budget(budget, namespace, dict(status or {})):
        reconcile_after_child_event(*key)


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
def definition_changed(body: kopf.Body, resource: kopf.Resource, type: str | None, **_: Any) -> None:
    """An event handler, not create/update: kopf then keeps no annotations of its own on definitions.
    Our own status write comes back as an event and finds nothing to change."""
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
