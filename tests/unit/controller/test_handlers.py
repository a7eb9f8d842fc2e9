"""The Controller the handlers drive: temporary API errors after a child event are retried later (its
retries queue), bounded; permanent ones stop; a freed slot wakes the queue; definitions come from the indexes."""

import json
import threading
import time
import types
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from harness_operator.controller import handlers
from harness_operator.controller.cache import Change
from harness_operator.controller.wiring import Controller, IndexDefinitions
from harness_operator.core.resolution import resolve_definition


class FlakyReconciler:
    """Stands in for Reconciler at the handlers' seam: fails `failures` times with an API error."""

    def __init__(self, failures: int, status: int = 503) -> None:
        self.failures = failures
        self.status = status
        self.calls: list[tuple[str, str]] = []
        self.done = threading.Event()

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> list[Any]:
        self.calls.append((namespace, name))
        if len(self.calls) <= self.failures:
            raise ApiException(status=self.status, reason="Service Unavailable")
        self.done.set()
        return []


def test_a_temporary_failure_after_a_child_event_is_retried() -> None:
    flaky = FlakyReconciler(failures=2)
    Controller(flaky, max_retries=3).reconcile_after_child_event("ns", "run")  # type: ignore[arg-type]
    assert flaky.done.wait(timeout=10), flaky.calls
    assert flaky.calls == [("ns", "run")] * 3


def join_retries(controller: Controller) -> None:
    """Wait for every scheduled retry, including the ones a retry schedules in turn."""
    deadline = time.monotonic() + 10
    while len(controller.retries) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not len(controller.retries), "retries still scheduled after 10 s"


def test_retries_are_bounded() -> None:
    flaky = FlakyReconciler(failures=100)
    controller = Controller(flaky, max_retries=3)  # type: ignore[arg-type]
    controller.reconcile_after_child_event("ns", "run")
    join_retries(controller)
    assert len(flaky.calls) == 3


def test_a_403_just_after_an_api_server_restart_is_retried() -> None:
    flaky = FlakyReconciler(failures=1, status=403)
    Controller(flaky, max_retries=3).reconcile_after_child_event("ns", "run")  # type: ignore[arg-type]
    assert flaky.done.wait(timeout=10), flaky.calls
    assert flaky.calls == [("ns", "run")] * 2


def test_a_permanent_failure_is_not_retried() -> None:
    flaky = FlakyReconciler(failures=100, status=422)
    controller = Controller(flaky, max_retries=3)  # type: ignore[arg-type]
    controller.reconcile_after_child_event("ns", "run")
    join_retries(controller)
    assert len(flaky.calls) == 1


def test_kopf_diff_base_leaves_out_the_prompt_stdin_and_options() -> None:
    """kopf keeps a diff base of the spec in an annotation; with the prompt (or `with`) in it, a run at
    the CRD's largest carries two copies and kopf's patch is refused (422: annotations over 256 KiB)."""
    settings = kopf.OperatorSettings()
    handlers.configure(settings=settings)
    storage = settings.persistence.diffbase_storage
    big = "p" * 131072
    body = kopf.Body(
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessRun",
            "metadata": {"name": "r", "namespace": "ns", "annotations": {"team": "a"}},
            "spec": {
                "provider": "claude",
                "prompt": big,
                "stdin": big,
                "with": {"model": "m"},
                "fallback": [{"provider": "codex", "with": {"model": "n"}}],
                "cancel": False,
            },
        }
    )
    essence = storage.build(body=body)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=essence)
    stored = patch["metadata"]["annotations"]["agentharness.dev/last-handled-configuration"]
    assert json.loads(stored) == {
        "spec": {"provider": "claude", "cancel": False},
        "metadata": {"annotations": {"team": "a"}},
    }
    assert len(stored) < 1024


class WakingReconciler:
    """Records the runs reconciled; one run waits for a slot in the namespace."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.woken = threading.Event()
        self.kube: Any = None
        # the handlers put kopf's indexes here, as on a Reconciler
        self.definitions = self.queue_source = None
        self.budgets = types.SimpleNamespace(source=None)

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> list[Any]:
        self.calls.append((namespace, name))
        if {("ns", "done"), ("ns", "queued")} <= set(self.calls):
            self.woken.set()
        return []

    def runs_waiting(self, namespace: str) -> list[tuple[str, str]]:
        return [(namespace, "queued")]


def test_a_freed_slot_wakes_the_runs_waiting_for_it() -> None:
    """A Job's change reconciles its run; a Job leaving flight also wakes the queue's first runs."""
    waking = WakingReconciler()
    controller = Controller(waking)  # type: ignore[arg-type]
    indexes = {k: {} for k in ("budget_index", "definition_index")}
    controller.use_indexes({**indexes, "cluster_definition_index": {}})  # what kopf passes every handler
    controller.child_changed(Change("ns", "done", slot_freed=False))
    controller.child_changed(Change("ns", "done", slot_freed=True))
    assert waking.woken.wait(10)  # both the run of the Job and the run first in the queue


class DefinitionsApi:
    """The API server's definitions, counting the GETs an index miss costs."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, str | None, str]] = []

    def fetch_definition_object(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.gets.append((plural, namespace, name))
        return {"spec": {"binary": "new"}} if name == "just-made" and namespace else None


def test_definitions_come_from_the_indexes_and_a_miss_is_read_before_a_run_is_refused() -> None:
    api = DefinitionsApi()
    reader = IndexDefinitions(
        {("team", "mine"): [{"binary": "ns"}]},  # type: ignore[arg-type]
        {"mine": [{"binary": "cluster"}], "shared": [{"binary": "cluster"}]},  # type: ignore[arg-type]
        api,  # type: ignore[arg-type]
    )

    def binary(namespace: str, name: str) -> str | None:
        found = resolve_definition(reader, namespace, name)
        return None if found is None else found.binary

    assert binary("team", "mine") == "ns"  # namespaced first
    assert binary("other", "mine") == "cluster"
    assert binary("team", "shared") == "cluster"
    assert api.gets == []
    assert binary("team", "just-made") == "new"  # the index lags
    assert binary("team", "unknown") is None
    assert api.gets == [
        ("harnessdefinitions", "team", "just-made"),
        ("harnessdefinitions", "team", "unknown"),
        ("clusterharnessdefinitions", None, "unknown"),
    ]


@pytest.mark.parametrize(
    ("conditions", "resumed"),
    [
        ([], True),
        ([{"type": "Succeeded", "status": "Unknown", "reason": "Queued"}], True),
        ([{"type": "Succeeded", "status": "True", "reason": "Succeeded"}], False),
        ([{"type": "Succeeded", "status": "False", "reason": "Cancelled"}], False),
    ],
)
def test_only_unfinished_runs_are_resumed(conditions: list[dict[str, str]], resumed: bool) -> None:
    assert handlers.is_unfinished(kopf.Body({"status": {"conditions": conditions}})) is resumed


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
