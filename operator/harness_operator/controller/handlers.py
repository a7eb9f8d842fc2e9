"""kopf registrations only: each handler hands its call to the Controller (wiring.py) that __main__ put
in kopf's memo. kopf handles budgets' ticks and deletions, schedules and definitions' statuses: a few
objects each. Runs are not kopf's: their watch cache (run_cache.py) drives them, and the reconciler reads
definitions and budgets from watch caches of its own (reference_cache.py), warm in a standby too."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.reference_cache import build_budget_ref
from harness_operator.controller.wiring import Controller

BUDGET_RESYNC_SECONDS = 5.0


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
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.enabled = False  # we post our own Events; kopf's are noise
    settings.peering.standalone = True  # no peering CRDs: the Lease elects the one replica running kopf
    settings.execution.max_workers = 8
    settings.networking.request_timeout = 30
    settings.watching.server_timeout = 300
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)


@kopf.timer(GROUP, VERSION, "harnessbudgets", interval=BUDGET_RESYNC_SECONDS)
def budget_tick(namespace: str | None, body: kopf.Body, status: Any, memo: kopf.Memo, **_: Any) -> None:
    """Keep the budget's ledger settled and its status current, and start the runs waiting for it when
    the period rolled over (no event marks that moment; a tick does)."""
    budget = build_budget_ref(body)
    if namespace and budget is not None:
        _controller(memo).reconcile_budget(budget, namespace, dict(status or {}))


@kopf.on.delete(GROUP, VERSION, "harnessbudgets", optional=True)
def budget_deleted(namespace: str | None, name: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted budget's ledger goes too, and the runs it held waiting are woken (optional: no
    finalizer holds the budget for it; a ledger an operator that was down missed is replaced when a
    budget of the same name is created again)."""
    if namespace:
        _controller(memo).forget_budget(namespace, name, uid)


@kopf.on.event(GROUP, VERSION, "harnessschedules")
def schedule_event(namespace: str | None, name: str, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Every schedule at startup (a time missed while the operator was down is due now) and on each
    change; an event handler, so kopf keeps no annotations of its own on schedules. Our own status write
    comes back as an event and finds nothing to change."""
    controller = _controller(memo)
    if not namespace:
        return
    if type == "DELETED":
        controller.schedule_deleted(namespace, name)
    else:
        controller.reconcile_schedule(namespace, name)


@kopf.on.event(GROUP, VERSION, "harnessdefinitions")
@kopf.on.event(GROUP, VERSION, "clusterharnessdefinitions")
def definition_changed(
    body: kopf.Body, resource: kopf.Resource, type: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """An event handler, not create/update: kopf then keeps no annotations of its own on definitions.
    Our own status write comes back as an event and finds nothing to change."""
    controller = _controller(memo)
    if type != "DELETED":
        controller.check_definition(resource.plural, body.metadata.namespace, body.metadata.name)
