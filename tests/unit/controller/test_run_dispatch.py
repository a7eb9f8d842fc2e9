"""Dispatching to MultiKueue's workers (controller/run_dispatch.py) with fake clients of this cluster and
of worker-1: until a worker admits it, the Job here is the attempt; a worker the operator does not know
ends it, one it cannot reach says so; on worker-1, what the copy's pod needs is written there, the copy
held, and the pod there is the attempt; the copy is let go of once its result is recorded."""

from typing import Any

from tests.unit.controller.fake_kube import Definitions
from tests.unit.controller.test_reconcile import started_run
from tests.unit.controller.test_reconcile_multikueue import (
    ManagerApi,
    WorkerApi,
    local_job,
    remote_job,
    remote_pod,
    workload,
)

from harness_operator.api.reasons import Reason
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.run_dispatch import RunDispatcher
from harness_operator.controller.workers import Worker, Workers
from harness_operator.core.attempt import Attempt, decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.queue.multikueue import RESULT_FINALIZER
from harness_operator.core.resolve.resolution import resolve_targets
from harness_operator.core.status.observed import FINISHED, SUSPENDED, ObservedAttempt

RUN = started_run()


def dispatcher(
    remote: dict[str, Any] | None, pods: list[dict[str, Any]], synced: bool = True
) -> tuple[RunDispatcher, ManagerApi, WorkerApi]:
    api = ManagerApi([local_job()], [], RUN)
    worker_api = WorkerApi(remote or remote_job())
    store = ChildStore()
    if synced:
        store.replace("Job", None, [remote] if remote else [])
        store.replace("Pod", None, pods)
    workers = Workers([Worker("worker-1", worker_api, store)])  # type: ignore[arg-type]
    return RunDispatcher(api, OperatorConfig(), workers), api, worker_api  # type: ignore[arg-type]


def target(api: ManagerApi) -> Attempt:
    found = resolve_targets(KubeReader(api, Definitions()), RUN)[0]  # type: ignore[arg-type]
    return decide_attempt(RUN, found, OperatorConfig())


def observe(dispatch: RunDispatcher, api: ManagerApi, cluster: str | None) -> ObservedAttempt:
    return dispatch.observe(RUN, target(api), 1, local_job(), workload(cluster), None)


def test_before_a_worker_admits_it_the_job_here_is_the_attempt() -> None:
    dispatch, api, worker = dispatcher(None, [])
    attempt = observe(dispatch, api, None)
    assert attempt.cluster is None and attempt.state != FINISHED
    assert worker.created == []


def test_a_worker_the_operator_does_not_know_ends_the_attempt() -> None:
    dispatch, api, _ = dispatcher(None, [])
    attempt = observe(dispatch, api, "worker-9")
    assert attempt.state == FINISHED and attempt.withdrawn
    assert attempt.result is not None and attempt.result.reason == Reason.QueueUnavailable


def test_a_worker_not_reached_yet_or_without_the_copy_says_so() -> None:
    dispatch, api, _ = dispatcher(None, [], synced=False)
    attempt = observe(dispatch, api, "worker-1")
    assert (attempt.state, attempt.cluster) == (SUSPENDED, "worker-1")
    assert attempt.waiting is not None and "worker-1" in attempt.waiting
    dispatch, api, _ = dispatcher(None, [])
    assert "its copy of Job r-a1 is not there yet" in (observe(dispatch, api, "worker-1").waiting or "")


def test_the_copy_gets_what_its_pod_needs_is_held_and_its_pod_is_the_attempt() -> None:
    ended = remote_pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    dispatch, api, worker = dispatcher(remote_job(), [ended])
    attempt = observe(dispatch, api, "worker-1")
    assert worker.created == ["NetworkPolicy r-a1 owner=remote-uid", "Secret r-plan owner=remote-uid"]
    assert worker.finalizers == [f"+{RESULT_FINALIZER}"]
    assert (attempt.cluster, attempt.state, attempt.pod_name) == ("worker-1", FINISHED, "r-a1-x")
    observe(dispatch, api, "worker-1")
    assert len(worker.created) == 2  # written once per copy


def test_a_recorded_result_lets_the_copy_go() -> None:
    dispatch, _, worker = dispatcher(remote_job(finalizers=[RESULT_FINALIZER]), [])
    dispatch.release("ns", "r", {"worker-1": {"r-a1"}})
    assert worker.finalizers == [f"-{RESULT_FINALIZER}"]
