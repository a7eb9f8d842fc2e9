"""Observing a run (controller/run_observe.py): its Jobs and Pods from the watch caches into attempts, the
API server read only where the caches may lag; a Job holding an attempt's name that is not the run's
fails it; a Job MultiKueue dispatches is the dispatcher's to observe; an inactive queue says why."""

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.unit.controller.fake_kube import ApiServer, Definitions
from tests.unit.controller.test_reconcile import RUNNING_POD, job, started_run

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.run_observe import RunObserver, explain_inactive
from harness_operator.core.attempt import Attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.resolution import RunFailure, resolve_targets
from harness_operator.core.status.observed import FINISHED, RUNNING, ObservedAttempt

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


class Dispatched:
    """Stands in for the dispatcher: the dispatched Jobs it was asked about, each a suspended attempt."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def observe(
        self,
        run: HarnessRun,
        target: Attempt,
        index: int,
        job: dict[str, Any],
        workload: dict[str, Any] | None,
        local_queue: dict[str, Any] | None,
    ) -> ObservedAttempt:
        self.asked.append(job["metadata"]["name"])
        return ObservedAttempt(index, target.provider, job["metadata"]["name"], None, "Suspended")


def observer(
    api: ApiServer,
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    dispatched: Dispatched | None = None,
) -> RunObserver:
    store = ChildStore()
    store.replace("Job", None, jobs)
    store.replace("Pod", None, pods)
    config, kueue = OperatorConfig(), KueueStore(store)
    return RunObserver(api, config, lambda: NOW, store, kueue, dispatched or Dispatched())  # type: ignore[arg-type]


def targets(api: ApiServer, run: HarnessRun) -> list[Attempt]:
    found = resolve_targets(KubeReader(api, Definitions()), run)  # type: ignore[arg-type]
    return decide_attempts(run, found, OperatorConfig())


def test_an_attempt_in_the_caches_costs_no_read() -> None:
    run = started_run()
    api = ApiServer([], [], run)
    [attempt] = observer(api, [job()], [RUNNING_POD]).observe_attempts(run, targets(api, run))
    assert (attempt.index, attempt.state, attempt.pod_name) == (1, RUNNING, "r-a1-x")
    assert api.reads == []


def test_a_job_the_cache_lags_is_read_and_one_the_api_server_lost_is_lost() -> None:
    run = started_run()
    api = ApiServer([job()], [RUNNING_POD], run)
    [attempt] = observer(api, [], []).observe_attempts(run, targets(api, run))
    assert attempt.state == RUNNING and api.reads == ["job r-a1", "pods"]
    api = ApiServer([], [], run)
    [attempt] = observer(api, [], []).observe_attempts(run, targets(api, run))
    assert attempt.state == FINISHED and attempt.result is not None
    assert attempt.result.reason == Reason.JobLost


def test_a_job_of_the_attempts_name_the_run_does_not_own_fails_it() -> None:
    run = started_run()
    api = ApiServer([], [], run)
    squatter = job()
    squatter["metadata"]["ownerReferences"] = [{"uid": "another-run", "controller": True}]
    with pytest.raises(RunFailure) as failure:
        observer(api, [squatter], []).observe_attempts(run, targets(api, run))
    assert failure.value.reason == Reason.ChildConflict


def test_a_dispatched_job_is_the_dispatchers_to_observe() -> None:
    run = started_run()
    api = ApiServer([], [], run)
    dispatched = job()
    dispatched["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    dispatcher = Dispatched()
    [attempt] = observer(api, [dispatched], [], dispatcher).observe_attempts(run, targets(api, run))
    assert dispatcher.asked == ["r-a1"]
    assert attempt.state == "Suspended"


class KueueApi:
    """Kueue's objects by (plural, name)."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def fetch_kueue_object(self, plural: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, name))


def test_an_inactive_queue_says_why_from_its_admission_checks_down() -> None:
    inactive = {"type": "Active", "status": "False", "reason": "AdmissionCheckInactive", "message": "mk"}
    queue = {
        "metadata": {"name": "cq"},
        "spec": {"admissionChecks": ["mk"]},
        "status": {"conditions": [inactive]},
    }
    check = {
        "metadata": {"name": "mk"},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"name": "mkc"}},
        "status": {"conditions": [{"type": "Active", "status": "False", "message": "no cluster"}]},
    }
    api = KueueApi({("clusterqueues", "cq"): queue, ("admissionchecks", "mk"): check})
    assert explain_inactive(api, "cq") == 'ClusterQueue "cq": mk; AdmissionCheck "mk": no cluster'  # type: ignore[arg-type]
    assert explain_inactive(api, "") is None and explain_inactive(api, "unknown") is None  # type: ignore[arg-type]
