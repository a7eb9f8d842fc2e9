"""The reconciler reading Jobs and Pods from the watch caches: a cache that lags a create or a pod
never makes an attempt lost or run twice; the queue is first come, first served."""

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.reconcile import Reconciler
from harness_operator.core.config import OperatorConfig
from harness_operator.core.fairqueue import QueueEntry
from harness_operator.core.resolution import AttemptTarget
from harness_operator.core.status import FINISHED, RUNNING

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TARGETS = [
    AttemptTarget(1, "claude", HarnessDefinitionSpec.model_validate({"binary": "claude", "image": "i"})),
    AttemptTarget(2, "codex", HarnessDefinitionSpec.model_validate({"binary": "codex", "image": "i"})),
]
LABELS = {"app.kubernetes.io/managed-by": "harness-operator", "agentharness.dev/run": "r"}


def job(conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "kind": "Job",
        "metadata": {
            "name": "r-a1",
            "namespace": "ns",
            "uid": "job-uid",
            "labels": {**LABELS, "agentharness.dev/attempt": "1"},
            "annotations": {"agentharness.dev/run-name": "r"},
            "ownerReferences": [{"uid": "run-uid", "controller": True}],
        },
        "spec": {"suspend": False},
        "status": {"startTime": "2026-12-01T07:59:00Z", "conditions": conditions or []},
    }


AGENT_EXITED_0 = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def pod(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": "r-a1-x",
            "namespace": "ns",
            "uid": "pod-uid",
            "labels": {**LABELS, "agentharness.dev/attempt": "1"},
            "ownerReferences": [{"uid": "job-uid", "controller": True}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "runner", "state": state},
                {"name": "agent", "state": AGENT_EXITED_0 if "terminated" in state else state},
            ],
        },
    }


class ApiServer:
    """What the API server holds, for the reads the reconciler makes past its caches (it counts them)."""

    def __init__(self, jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.jobs, self.pods = jobs, pods
        self.reads: list[str] = []

    def fetch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(f"job {name}")
        return next((j for j in self.jobs if j["metadata"]["name"] == name), None)

    def fetch_pods(self, namespace: str, run: str) -> list[dict[str, Any]]:
        self.reads.append("pods")
        return self.pods


def started_run(**spec: Any) -> HarnessRun:
    """A run whose status records attempt 1 as started (its Job created), not ended."""
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "uid": "run-uid", "creationTimestamp": "t"},
            "spec": {"provider": "claude", "prompt": "p", "fallback": [{"provider": "codex"}], **spec},
            "status": {"attempts": [{"index": 1, "provider": "claude", "jobName": "r-a1"}]},
        }
    )


def reconciler(
    api: ApiServer, cached_jobs: list[dict[str, Any]], cached_pods: list[dict[str, Any]]
) -> Reconciler:
    store = ChildStore()
    store.replace("Job", None, cached_jobs)
    store.replace("Pod", None, cached_pods)
    return Reconciler(api, OperatorConfig(max_runs_per_namespace=2), lambda: NOW, children=store)  # type: ignore[arg-type]


RUNNING_POD = pod({"running": {}})


def test_a_job_the_cache_has_not_shown_yet_is_not_lost() -> None:
    api = ApiServer([job()], [RUNNING_POD])
    attempts = reconciler(api, [], [])._observe_attempts(started_run(), TARGETS)
    assert [(a.index, a.state, a.result) for a in attempts] == [(1, RUNNING, None)]
    assert api.reads == ["job r-a1", "pods"]


def test_a_job_the_api_server_no_longer_has_is_lost_and_never_created_again() -> None:
    api = ApiServer([], [])
    attempts = reconciler(api, [], [])._observe_attempts(started_run(), TARGETS)
    assert [(a.index, a.state, (a.result.reason if a.result else None)) for a in attempts] == [
        (1, FINISHED, "JobLost")
    ]


def test_a_job_in_the_cache_costs_no_read() -> None:
    api = ApiServer([], [])
    attempts = reconciler(api, [job()], [RUNNING_POD])._observe_attempts(started_run(), TARGETS)
    assert [(a.index, a.state) for a in attempts] == [(1, RUNNING)]
    assert api.reads == []


def test_a_pod_the_cache_lags_is_read_before_its_attempt_is_called_lost() -> None:
    """The Job's watch showed it Failed before the pod's watch showed the pod: the pod's own exit
    decides, not 'the pod vanished'."""
    failed = job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    ended = pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    attempts = reconciler(ApiServer([failed], [ended]), [failed], [])._observe_attempts(
        started_run(), TARGETS
    )
    assert attempts[0].result and attempts[0].result.reason == "ProviderFailed"
    vanished = reconciler(ApiServer([failed], []), [failed], [])._observe_attempts(started_run(), TARGETS)
    assert vanished[0].result and vanished[0].result.reason == "JobLost"


class Queue:
    def __init__(self, entries: list[QueueEntry]) -> None:
        self._entries = entries

    def entries(self, namespace: str) -> list[QueueEntry]:
        return self._entries


def queued_run(name: str, created: str) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": created},
            "spec": {"provider": "claude", "prompt": "p"},
        }
    )


def test_a_run_waits_behind_earlier_queued_runs_and_a_freed_slot_wakes_the_first() -> None:
    r = reconciler(ApiServer([], []), [], [])
    r.queue_source = Queue(
        [QueueEntry("07:00", "first"), QueueEntry("07:01", "second"), QueueEntry("07:02", "third")]
    )
    r.children.note_started("ns", "running")  # one of the two slots is taken
    assert r._queue_position(queued_run("first", "07:00")) is None
    assert r._queue_position(queued_run("second", "07:01")) == (
        "Queued",
        "position 2 of 3 in the queue of namespace ns (1 runs in flight, limit 2)",
    )
    assert r._runs_to_wake("ns") == [("ns", "first")]


class RefusingApiServer(ApiServer):
    """Refuses every create, as an API server that is restarting does."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self.reads.append(f"create {obj['kind']}")
        raise ApiException(status=503, reason="Service Unavailable")


def test_a_slot_taken_for_a_job_that_was_not_created_is_free_again() -> None:
    api = RefusingApiServer([], [])
    r = reconciler(api, [], [])
    run = queued_run("first", "07:00")
    with pytest.raises(ApiException):
        r._start_attempt(run, TARGETS[:1], 1, [], 0)
    assert api.reads == ["create Secret"]
    assert r.children.in_flight("ns") == set()
    assert r._queue_position(queued_run("second", "07:01")) is None  # the slot is free
