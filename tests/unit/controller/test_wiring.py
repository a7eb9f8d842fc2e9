"""The Controller the watch caches and the handlers drive: a run's temporary API errors are retried later
(its retries queue) until it reconciles; permanent ones stop; nothing is acted on until it leads, then
every run held is; a run's changes reconcile it, tick its progress, schedule its expiry and tell its
schedule; a freed slot wakes the queue; definitions and budgets come from the watch caches."""

import threading
import time
import types
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness_operator.api.common import API_VERSION
from harness_operator.controller.cache import Change
from harness_operator.controller.reconcile import Requeue
from harness_operator.controller.reference_cache import (
    BUDGET_KIND,
    CLUSTER_DEFINITION_KIND,
    DEFINITION_KIND,
    ReferenceStore,
    build_budget_ref,
)
from harness_operator.controller.run_cache import RUN_KIND, RunStore
from harness_operator.controller.wiring import CachedBudgets, CachedDefinitions, Controller
from harness_operator.core.resolve.resolution import resolve_definition


class FlakyReconciler:
    """Stands in for Reconciler at the controller's seam: fails `failures` times with an API error
    (a 429 asks for `retry_after` seconds)."""

    def __init__(self, failures: int, status: int = 503, retry_after: str | None = None) -> None:
        self.failures = failures
        self.status = status
        self.retry_after = retry_after
        self.calls: list[tuple[str, str]] = []
        self.done = threading.Event()

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> Requeue:
        self.calls.append((namespace, name))
        if len(self.calls) <= self.failures:
            exc = ApiException(status=self.status, reason="Service Unavailable")
            exc.headers = {"Retry-After": self.retry_after} if self.retry_after else None
            raise exc
        self.done.set()
        return Requeue()


def test_a_temporary_failure_after_a_child_event_is_retried() -> None:
    flaky = FlakyReconciler(failures=2)
    Controller(flaky, max_retries=3).reconcile_retrying("ns", "run")  # type: ignore[arg-type]
    assert flaky.done.wait(timeout=10), flaky.calls
    assert flaky.calls == [("ns", "run")] * 3


def join_retries(controller: Controller) -> None:
    """Wait for every scheduled retry, including the ones a retry schedules in turn."""
    deadline = time.monotonic() + 10
    while len(controller.retries) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not len(controller.retries), "retries still scheduled after 10 s"


def test_a_run_is_retried_for_as_long_as_it_takes() -> None:
    """Unlike a schedule's or a definition's status (bounded by max_retries), a run is never left
    unreconciled: a create that fails through a long API server outage is still made."""
    flaky = FlakyReconciler(failures=12, status=429, retry_after="0.01")
    controller = Controller(flaky, max_retries=3)  # type: ignore[arg-type]
    controller.reconcile_retrying("ns", "run")
    assert flaky.done.wait(timeout=10), flaky.calls
    join_retries(controller)
    assert len(flaky.calls) == 13


def test_a_403_just_after_an_api_server_restart_is_retried() -> None:
    flaky = FlakyReconciler(failures=1, status=403)
    Controller(flaky, max_retries=3).reconcile_retrying("ns", "run")  # type: ignore[arg-type]
    assert flaky.done.wait(timeout=10), flaky.calls
    assert flaky.calls == [("ns", "run")] * 2


def test_a_permanent_failure_is_not_retried() -> None:
    flaky = FlakyReconciler(failures=100, status=422)
    controller = Controller(flaky, max_retries=3)  # type: ignore[arg-type]
    controller.reconcile_retrying("ns", "run")
    join_retries(controller)
    assert len(flaky.calls) == 1


class WakingReconciler:
    """Records the runs reconciled and the runs forgotten; one run waits for a slot in the namespace."""

    def __init__(self, expected: int = 2) -> None:
        self.calls: list[tuple[str, str]] = []
        self.forgotten: list[tuple[str, str]] = []
        self.revoked: list[tuple[str, str]] = []
        self.expected = expected
        self.woken = threading.Event()
        self.grants = types.SimpleNamespace(revoke_run=lambda ns, name: self.revoked.append((ns, name)))

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> Requeue:
        self.calls.append((namespace, name))
        if len(set(self.calls)) >= self.expected:
            self.woken.set()
        return Requeue()

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))

    def runs_waiting(self, namespace: str) -> list[tuple[str, str]]:
        return [(namespace, "queued")]


def synced_runs(*bodies: dict[str, Any]) -> RunStore:
    store = RunStore(lambda body, now: 60.0 if body["metadata"]["name"].startswith("done") else None)
    store.replace(RUN_KIND, None, list(bodies))
    return store


def run(name: str, status: dict[str, Any] | None = None, generation: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation, **meta},
        "status": status or {},
    }


ENDED = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]}


class Expiries:
    """Stands in for the ExpiryQueue: what is scheduled for deletion."""

    def __init__(self) -> None:
        self.due: dict[tuple[str, str], tuple[str, float]] = {}

    def schedule(self, namespace: str, name: str, uid: str, delay: float) -> None:
        self.due[(namespace, name)] = (uid, delay)

    def forget(self, namespace: str, name: str) -> None:
        self.due.pop((namespace, name), None)


def test_a_freed_slot_wakes_the_runs_waiting_for_it() -> None:
    """A Job's change reconciles its run; a Job leaving flight also wakes the queue's first runs."""
    waking = WakingReconciler()
    controller = Controller(waking, runs=synced_runs())  # type: ignore[arg-type]
    controller.lead()
    controller.child_changed(Change("ns", "done", slot_freed=False))
    controller.child_changed(Change("ns", "done", slot_freed=True))
    assert waking.woken.wait(10)  # both the run of the Job and the run first in the queue


def test_a_standby_acts_on_nothing_and_on_leading_acts_on_every_run_it_holds() -> None:
    """A standby's caches fill but it reconciles nothing; once it leads, each unfinished run is
    reconciled and each finished one with a TTL gets its deletion scheduled, as after a restart."""
    waking = WakingReconciler(expected=2)
    runs = synced_runs(run("queued"), run("running", {"conditions": []}), run("done", ENDED))
    expiries = Expiries()
    controller = Controller(waking, retention=expiries, runs=runs)  # type: ignore[arg-type]
    controller.child_changed(Change("ns", "running", slot_freed=True))
    controller.run_changed(runs.apply(RUN_KIND, "ADDED", run("new")))
    time.sleep(0.2)
    assert waking.calls == [] and expiries.due == {}
    runs.apply(RUN_KIND, "DELETED", run("new"))
    controller.lead()
    assert waking.woken.wait(10)
    time.sleep(0.2)
    assert sorted(set(waking.calls)) == [("ns", "queued"), ("ns", "running")]
    assert list(expiries.due) == [("ns", "done")] and expiries.due[("ns", "done")][0] == "uid-done"
    assert 59 < expiries.due[("ns", "done")][1] <= 60


def test_a_run_is_reconciled_when_new_or_changed_and_a_deleted_one_is_forgotten() -> None:
    waking = WakingReconciler(expected=1)
    runs = synced_runs()
    expiries = Expiries()
    controller = Controller(waking, retention=expiries, runs=runs, grants=waking.grants)  # type: ignore[arg-type]
    controller.lead()
    controller.run_changed(runs.apply(RUN_KIND, "ADDED", run("a")))
    assert waking.woken.wait(10)
    controller.run_changed(runs.apply(RUN_KIND, "MODIFIED", run("a", {"phase": "Running"})))  # ours
    time.sleep(0.2)
    assert waking.calls == [("ns", "a")]
    controller.run_changed(runs.apply(RUN_KIND, "MODIFIED", run("a", {"phase": "Running"}, generation=2)))
    deadline = time.monotonic() + 10
    while len(waking.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waking.calls == [("ns", "a")] * 2  # the cancel, a spec change
    controller.run_changed(runs.apply(RUN_KIND, "MODIFIED", run("done-a", ENDED)))
    assert ("ns", "done-a") in expiries.due
    controller.run_changed(runs.apply(RUN_KIND, "DELETED", run("done-a", ENDED)))
    join_retries(controller)
    assert waking.forgotten == [("ns", "done-a")] and waking.revoked == [("ns", "done-a")]
    assert expiries.due == {} and waking.calls == [("ns", "a")] * 2


class CountingSchedules:
    """Stands in for ScheduleReconciler: counts its reconciles."""

    def __init__(self, runs: Any = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.runs = runs

    def reconcile(self, namespace: str, name: str) -> float | None:
        self.calls.append((namespace, name))
        return None


def test_a_schedules_run_that_finished_or_went_is_news_to_its_schedule() -> None:
    owner = {"apiVersion": API_VERSION, "kind": "HarnessSchedule", "name": "nightly", "uid": "s-uid"}
    mine = {"ownerReferences": [{**owner, "controller": True}]}
    runs = synced_runs(run("nightly-1", ENDED, **mine))
    schedules = CountingSchedules(runs.scheduled)  # as __main__ builds it, over the run cache
    controller = Controller(WakingReconciler(), schedules=schedules, runs=runs)  # type: ignore[arg-type]
    assert schedules.runs("ns", "s-uid")[0].name == "nightly-1"  # it reads its runs from the cache
    controller.lead()
    time.sleep(0.2)
    assert schedules.calls == []  # on leading, kopf reconciles every schedule anyway
    controller.run_changed(runs.apply(RUN_KIND, "MODIFIED", run("nightly-2", {"phase": "Running"}, **mine)))
    join_retries(controller)
    assert schedules.calls == []  # a run that runs is no news
    controller.run_changed(runs.apply(RUN_KIND, "MODIFIED", run("nightly-2", ENDED, **mine)))
    join_retries(controller)
    controller.run_changed(runs.apply(RUN_KIND, "DELETED", run("nightly-1", ENDED, **mine)))
    join_retries(controller)
    assert schedules.calls == [("ns", "nightly")] * 2


class DefinitionsApi:
    """The API server's definitions, counting the GETs a cache miss costs."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, str | None, str]] = []

    def fetch_definition_object(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.gets.append((plural, namespace, name))
        return {"spec": {"binary": "new"}} if name == "just-made" and namespace else None


def definition(name: str, binary: str, namespace: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"binary": binary}}


def test_definitions_come_from_the_caches_and_a_miss_is_read_before_a_run_is_refused() -> None:
    api = DefinitionsApi()
    references = ReferenceStore()
    references.replace(DEFINITION_KIND, None, [definition("mine", "ns", "team")])
    references.replace(
        CLUSTER_DEFINITION_KIND, None, [definition("mine", "cluster"), definition("shared", "cluster")]
    )
    reader = CachedDefinitions(references, api)  # type: ignore[arg-type]

    def binary(namespace: str, name: str) -> str | None:
        found = resolve_definition(reader, namespace, name)
        return None if found is None else found.binary

    assert binary("team", "mine") == "ns"  # namespaced first
    assert binary("other", "mine") == "cluster"
    assert binary("team", "shared") == "cluster"
    assert api.gets == []
    assert binary("team", "just-made") == "new"  # the cache lags
    assert binary("team", "unknown") is None
    assert api.gets == [
        ("harnessdefinitions", "team", "just-made"),
        ("harnessdefinitions", "team", "unknown"),
        ("clusterharnessdefinitions", None, "unknown"),
    ]


def test_budgets_and_charges_come_from_the_caches() -> None:
    references = ReferenceStore()
    budget = {"metadata": {"name": "b", "namespace": "ns", "uid": "b-uid", "generation": 2}}
    references.replace(
        BUDGET_KIND,
        None,
        [
            {**budget, "spec": {"period": "daily", "limits": {"maxCostUSD": 10}}},
            {**budget, "metadata": {"name": "bad", "namespace": "ns"}, "spec": {"limits": {"maxRuns": 0}}},
        ],
    )
    source = CachedBudgets(references, synced_runs(run("a")))
    assert [(b.name, b.uid, b.generation) for b in source.budgets("ns")] == [("b", "b-uid", 2)]
    assert source.budgets("other") == []
    assert [c.name for c in source.runs("ns")] == ["a"]


class TickingSchedules:
    """Stands in for ScheduleReconciler: due again in 0.05 s twice, then not at all; one 503 first."""

    def __init__(self) -> None:
        self.calls = 0
        self.done = threading.Event()

    def reconcile(self, namespace: str, name: str) -> float | None:
        self.calls += 1
        if self.calls == 1:
            raise ApiException(status=503, reason="Service Unavailable")
        if self.calls < 4:
            return 0.05
        self.done.set()
        return None


def test_a_schedule_is_woken_at_its_next_time_and_a_failure_retries() -> None:
    schedules = TickingSchedules()
    controller = Controller(WakingReconciler(), schedules=schedules)  # type: ignore[arg-type]
    controller.reconcile_schedule("ns", "nightly")
    assert schedules.done.wait(10)
    join_retries(controller)
    assert schedules.calls == 4  # the failure, its retry, two wakes; None: nothing left scheduled


def test_a_deleted_schedule_is_not_woken_again() -> None:
    schedules = TickingSchedules()
    schedules.calls = 1  # no failure first
    controller = Controller(WakingReconciler(), schedules=schedules)  # type: ignore[arg-type]
    controller.reconcile_schedule("ns", "nightly")
    controller.schedule_deleted("ns", "nightly")
    time.sleep(0.2)
    assert schedules.calls == 2 and not len(controller.retries)


class BuggyReconciler(FlakyReconciler):
    """Fails once with an error that is not the API server's."""

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> Requeue:
        self.calls.append((namespace, name))
        if len(self.calls) == 1:
            raise ValueError("a bug, or an error nobody foresaw")
        self.done.set()
        return Requeue()


def test_an_unforeseen_error_is_retried_too() -> None:
    buggy = BuggyReconciler(failures=1)
    controller = Controller(buggy)  # type: ignore[arg-type]
    controller.reconcile_retrying("ns", "run")
    assert buggy.done.wait(timeout=10), buggy.calls
    assert buggy.calls == [("ns", "run")] * 2


def test_a_stopped_controller_acts_on_nothing_more() -> None:
    """On SIGTERM or a lost Lease the replica stops acting at once: the new leader may be acting."""
    waking = WakingReconciler(expected=1)
    runs = synced_runs()
    controller = Controller(waking, runs=runs)  # type: ignore[arg-type]
    controller.lead()
    controller.stop()
    controller.run_changed(runs.apply(RUN_KIND, "ADDED", run("a")))
    controller.child_changed(Change("ns", "a", slot_freed=True))
    controller.reconcile_retrying("ns", "a")
    controller.wake_after("ns", "a", 0)
    time.sleep(0.3)
    assert waking.calls == []


class TickedBudgets:
    """Stands in for BudgetReconciler: records each reconcile's status; the second one fails (503)."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.forgotten: list[tuple[str, str, str]] = []
        self.ticked = threading.Event()

    def reconcile(self, budget: Any, namespace: str, status: dict[str, Any]) -> list[tuple[str, str]]:
        self.statuses.append(status)
        if len(self.statuses) >= 4:
            self.ticked.set()
        if len(self.statuses) == 2:
            raise ApiException(status=503, reason="Service Unavailable")
        return [(namespace, "waiting")]

    def forget(self, namespace: str, name: str, uid: str) -> list[tuple[str, str]]:
        self.forgotten.append((namespace, name, uid))
        return []


def budget_ref(name: str = "team") -> Any:
    return build_budget_ref(
        {"metadata": {"name": name, "uid": "u1"}, "spec": {"period": "daily", "limits": {"maxRuns": 1}}}
    )


def test_a_budget_is_ticked_on_the_controllers_own_heap_and_a_failure_waits_for_the_next_tick() -> None:
    waking = WakingReconciler(expected=1)
    budgets = TickedBudgets()
    controller = Controller(waking, budget_tick_seconds=0.05, budgets=budgets)  # type: ignore[arg-type]
    controller.budget_seen(budget_ref(), "ns", {"runs": 1})
    controller.budget_seen(budget_ref(), "ns", {"runs": 2})  # a change: the same tick, the newer status
    assert budgets.ticked.wait(10), budgets.statuses
    assert budgets.statuses[-1] == {"runs": 2}
    assert ("ns", "waiting") in waking.calls  # the runs the budget may have held, reconciled
    assert len(controller.retries) == 1  # one tick chain per budget, however often it was seen


def test_a_deleted_budget_is_forgotten_and_ticked_no_more() -> None:
    waking = WakingReconciler(expected=1)
    budgets = TickedBudgets()
    controller = Controller(waking, budget_tick_seconds=0.05, budgets=budgets)  # type: ignore[arg-type]
    controller.budget_seen(budget_ref(), "ns", {})
    controller.forget_budget("ns", "team", "u1")
    time.sleep(0.2)
    assert budgets.forgotten == [("ns", "team", "u1")]
    assert len(budgets.statuses) <= 1 and not len(controller.retries)


def test_no_kopf_handler_holds_a_finalizer() -> None:
    """A finalizer nobody removes once the operator is uninstalled keeps its object's namespace
    Terminating: no kind's handler may ask kopf for one (a kopf timer or daemon, a mandatory on.delete)."""
    import kopf

    import harness_operator.controller.handlers  # noqa: F401  (registers the handlers)

    registry = kopf.get_default_registry()
    handlers = [*registry._spawning.get_all_handlers(), *registry._changing.get_all_handlers()]
    assert [h.id for h in handlers if h.requires_finalizer] == []
    watched = {h.selector.any_name for h in registry._watching.get_all_handlers() if h.selector}
    assert "harnessbudgets" in watched
