"""kopf registrations only: each handler hands its call to the Controller (wiring.py) that __main__ put
in kopf's memo; the indexes (of budgets and definitions: runs are in controller/run_cache.py, which
kopf's run events also feed) are the watch caches the reconciler reads instead of LISTs."""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import GROUP, VERSION, HarnessBudgetSpec, HarnessRunStatus
from harness_operator.controller.wiring import Controller
from harness_operator.core.budget import BudgetRef
from harness_operator.core.progress import is_progress_wanted
from harness_operator.core.schedule import schedule_owner

BUDGET_RESYNC_SECONDS = 5.0
# Left out of kopf's diff base: they are immutable, so no diff needs them, and they may be as large as the
# CRD allows; a second copy in an annotation would push the run past the API server's 256 KiB limit on
# all annotations together, and kopf's own patch would fail with 422.
DIFF_BASE_IGNORED_FIELDS = ("spec.prompt", "spec.stdin", "spec.with", "spec.fallback", "spec.outputSchema")


def memo_for(controller: Controller) -> kopf.Memo:
    """What kopf hands every handler (as `memo`): the process's one Controller."""
    return kopf.Memo(controller=controller)


def _controller(memo: kopf.Memo) -> Controller:
    controller: Controller = memo.controller
    return controller


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration", ignored_fields=DIFF_BASE_IGNORED_FIELDS
    )
    settings.posting.enabled = False  # we post our own Events; kopf's are noise
    settings.peering.standalone = True  # no peering CRDs: the Lease elects the one replica running kopf
    settings.execution.max_workers = 8
    settings.networking.request_timeout = 30
    settings.watching.server_timeout = 300
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def wants_progress(body: kopf.Body) -> bool:
    """The run's latest status says its attempt runs (its progress is to be read)."""
    try:
        status = HarnessRunStatus.model_validate(dict(body.get("status") or {}))
    except ValueError:
        return False
    return is_progress_wanted(status)


@kopf.index(GROUP, VERSION, "harnessbudgets")
def budget_index(namespace: str | None, name: str, spec: Any, meta: Any, **_: Any) -> dict[str, BudgetRef]:
    """Every valid HarnessBudget, by namespace (kopf fills it before any handler runs)."""
    try:
        parsed = HarnessBudgetSpec.model_validate(dict(spec))
    except ValidationError:
        return {}  # the CRD's schema and CEL rules keep these out; an old object is skipped, not fatal
    return {namespace or "": BudgetRef(name, parsed, meta.get("generation"), str(meta.get("uid", "")))}


@kopf.index(GROUP, VERSION, "harnessdefinitions")
def definition_index(namespace: str | None, name: str, spec: Any, **_: Any) -> dict[Any, Any]:
    """Every HarnessDefinition's spec, by (namespace, name)."""
    return {(namespace, name): copy.deepcopy(dict(spec))}


@kopf.index(GROUP, VERSION, "clusterharnessdefinitions")
def cluster_definition_index(name: str, spec: Any, **_: Any) -> dict[Any, Any]:
    """Every ClusterHarnessDefinition's spec, by name."""
    return {name: copy.deepcopy(dict(spec))}


def is_unfinished(body: kopf.Body, **_: Any) -> bool:
    """Finished runs are left alone at startup: thousands of them cost no read and no reconcile."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Succeeded" and c.get("status") in ("True", "False") for c in conditions)


@kopf.on.resume(GROUP, VERSION, "harnessruns", when=is_unfinished)
@kopf.on.create(GROUP, VERSION, "harnessruns")
@kopf.on.update(GROUP, VERSION, "harnessruns", field="spec")
def run_changed(namespace: str | None, name: str, retry: int, memo: kopf.Memo, **kwargs: Any) -> None:
    controller = _controller(memo)
    controller.use_indexes(kwargs)
    if namespace:
        controller.reconcile_and_wake(namespace, name, retry)


@kopf.on.event(GROUP, VERSION, "harnessruns")
def run_event(
    namespace: str | None, type: str | None, body: kopf.Body, memo: kopf.Memo, **kwargs: Any
) -> None:
    """A deleted run leaves the gauges, and one deleted before it finished its egress grant (an event
    handler: kopf calls deletion handlers only behind a finalizer, which runs do not get). Every run is
    seen once at startup and again on each change: a finished run with a TTL gets its deletion scheduled,
    a running one its progress ticks (nothing is polled); a schedule's run that finished or went is
    news to its schedule (history limits, Forbid's waiting time, its active runs)."""
    controller = _controller(memo)
    controller.run_seen(type, body)
    deleted = type == "DELETED"
    if namespace and body.metadata.name:
        if deleted:
            controller.run_deleted(namespace, body.metadata.name)
        # is_unfinished first: a finished run (most, at startup) costs no status parse here
        unfinished = is_unfinished(body)
        wanted = not deleted and unfinished and wants_progress(body)
        controller.follow_progress(namespace, body.metadata.name, wanted)
        owner = schedule_owner(body)
        if owner is not None and (deleted or not unfinished):
            controller.use_indexes(kwargs)
            controller.reconcile_schedule(namespace, owner[0])
    controller.schedule_expiry(type, body)


@kopf.timer(GROUP, VERSION, "harnessbudgets", interval=BUDGET_RESYNC_SECONDS)
def budget_tick(
    namespace: str | None, name: str, spec: Any, meta: Any, status: Any, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Keep the budget's ledger settled and its status current, and start the runs waiting for it when
    the period rolled over (no event marks that moment; a tick does)."""
    controller = _controller(memo)
    controller.use_indexes(kwargs)
    if not namespace:
        return
    try:
        parsed = HarnessBudgetSpec.model_validate(dict(spec))
    except ValidationError:
        return
    budget = BudgetRef(name, parsed, meta.get("generation"), str(meta.get("uid", "")))
    controller.reconcile_budget(budget, namespace, dict(status or {}))


@kopf.on.delete(GROUP, VERSION, "harnessbudgets", optional=True)
def budget_deleted(namespace: str | None, name: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted budget's ledger goes too, and the runs it held waiting are woken (optional: no
    finalizer holds the budget for it; a ledger an operator that was down missed is replaced when a
    budget of the same name is created again)."""
    if namespace:
        _controller(memo).forget_budget(namespace, name, uid)


@kopf.on.event(GROUP, VERSION, "harnessschedules")
def schedule_event(
    namespace: str | None, name: str, type: str | None, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Every schedule at startup (a time missed while the operator was down is due now) and on each
    change; an event handler, so kopf keeps no annotations of its own on schedules. Our own status write
    comes back as an event and finds nothing to change."""
    controller = _controller(memo)
    controller.use_indexes(kwargs)
    if not namespace:
        return
    if type == "DELETED":
        controller.schedule_deleted(namespace, name)
    else:
        controller.reconcile_schedule(namespace, name)


@kopf.on.event(GROUP, VERSION, "harnessdefinitions")
@kopf.on.event(GROUP, VERSION, "clusterharnessdefinitions")
def definition_changed(
    body: kopf.Body, resource: kopf.Resource, type: str | None, memo: kopf.Memo, **kwargs: Any
) -> None:
    """An event handler, not create/update: kopf then keeps no annotations of its own on definitions.
    Our own status write comes back as an event and finds nothing to change."""
    controller = _controller(memo)
    controller.use_indexes(kwargs)
    if type != "DELETED":
        controller.check_definition(resource.plural, body.metadata.namespace, body.metadata.name)
