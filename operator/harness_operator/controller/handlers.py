"""kopf registrations only: each handler hands its call to the Controller (wiring.py) that __main__ put
in kopf's memo. kopf tells of budgets, schedules, pipelines and definitions (event handlers only: no
finalizer, no annotations), a few objects each. Runs are not kopf's: their watch cache (run_cache.py)
drives them, and the reconciler reads definitions and budgets from watch caches of its own
(reference_cache.py), warm in a standby too."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.reference_cache import build_budget_ref
from harness_operator.controller.run_cache import is_unfinished
from harness_operator.controller.wiring import Controller
from harness_operator.core.schedule import schedule_owner


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


@kopf.on.event(GROUP, VERSION, "harnessbudgets")
def budget_event(
    namespace: str | None, name: str, body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """Every budget at startup and on each change: the controller keeps its ledger settled and its
    status current from then on, on a tick of its own (no event marks a period's end). An event handler,
    like the definitions': kopf holds no finalizer on a budget (a kopf timer would, and after `helm
    uninstall` nobody would remove it, leaving the namespace Terminating); a deleted budget's ledger goes
    too, and the runs it held waiting are woken (an operator that was down missed the deletion: the
    ledger is replaced when a budget of the same name is created again)."""
    if not namespace:
        return
    controller = _controller(memo)
    if type == "DELETED":
        controller.forget_budget(namespace, name, str(body.metadata.uid or ""))
        return
    budget = build_budget_ref(body)
    if budget is not None:
        controller.budget_seen(budget, namespace, dict(body.get("status") or {}))


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


@kopf.on.event(GROUP, VERSION, "harnesspipelines")
def pipeline_event(
    namespace: str | None, name: str, type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """Every pipeline at startup and on each change (a cancel); our own status write comes back as an
    event and finds nothing to change. A finished pipeline a schedule controls is news to the schedule."""
    controller = _controller(memo)
    if not namespace:
        return
    if type != "DELETED":
        controller.reconcile_pipeline(namespace, name)
    owner = schedule_owner(body)
    if owner is not None and (type == "DELETED" or not is_unfinished(body)):
        controller.reconcile_schedule(namespace, owner[0])


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
