"""kueue: the queue a run's label names, why it cannot start where no Kueue is served, and what the
operator reads of Kueue's Workloads and LocalQueues."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.queue.kueue import (
    admission_check_names,
    describe_eviction,
    describe_inactive,
    describe_missing_kueue,
    describe_wait,
    is_inadmissible,
    is_kueue_managed,
    multikueue_config_name,
    queue_of,
    resolve_queue,
    slim_local_queue,
    slim_workload,
)


def run(labels: dict[str, str]) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "labels": labels},
            "spec": {"provider": "p", "prompt": "x"},
        }
    )


def test_the_queue_is_the_label_and_an_empty_one_is_none() -> None:
    assert queue_of(run({"kueue.x-k8s.io/queue-name": "agents"})) == "agents"
    assert queue_of(run({"kueue.x-k8s.io/queue-name": ""})) is None
    assert queue_of(run({})) is None


def test_the_message_names_the_label_the_queue_and_both_fixes() -> None:
    message = describe_missing_kueue("agents")
    assert message.startswith('metadata.labels["kueue.x-k8s.io/queue-name"] names the queue "agents"')
    assert "install Kueue, or remove the label" in message


def workload(
    conditions: list[dict[str, str]] | None = None,
    cluster_queue: str | None = None,
    evictions: int = 0,
    owner: str | None = "r-a1",
) -> dict[str, Any]:
    """A Workload as Kueue writes it (the fields the operator reads, plus some it does not)."""
    meta: dict[str, Any] = {
        "name": "job-r-a1-1a2b3",
        "namespace": "ns",
        "labels": {"kueue.x-k8s.io/job-uid": "u1"},
        "managedFields": [{"manager": "kueue"}],
    }
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "uid": "u1", "controller": True}]
    status: dict[str, Any] = {"conditions": conditions or []}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [{"name": "main"}]}
    if evictions:
        status["schedulingStats"] = {"evictions": [{"reason": "Preempted", "count": evictions}]}
    return {"metadata": meta, "spec": {"queueName": "team-a", "podSets": [{"count": 1}]}, "status": status}


PENDING = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f",
    "lastTransitionTime": "2026-12-04T22:47:05Z",
}
ADMITTED = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}
EVICTED = {
    "type": "Evicted",
    "status": "True",
    "reason": "Preempted",
    "message": "Preempted to accommodate a workload (UID: u2) due to prioritization in the ClusterQueue",
}
QUEUE = slim_local_queue(
    {
        "metadata": {"name": "team-a", "namespace": "ns"},
        "spec": {"clusterQueue": "cq-a"},
        "status": {"pendingWorkloads": 3},
    }
)


def test_a_slim_workload_keeps_its_job_queue_conditions_admission_and_evictions_only() -> None:
    slim = slim_workload(workload([PENDING], cluster_queue="cq-a", evictions=2))
    assert slim == {
        "kind": "Workload",
        "metadata": {"name": "job-r-a1-1a2b3", "namespace": "ns", "job": "r-a1", "jobUID": "u1"},
        "spec": {"queueName": "team-a"},
        "status": {
            "conditions": [{k: PENDING[k] for k in ("type", "status", "reason", "message")}],
            "clusterQueue": "cq-a",
            "clusterName": None,
            "admissionChecks": [],
            "evictions": 2,
        },
    }
    assert slim_workload(workload(owner=None))["metadata"]["job"] is None


def test_a_waiting_job_is_explained_in_kueues_words_with_its_cluster_queue() -> None:
    assert describe_wait("team-a", slim_workload(workload([PENDING])), QUEUE) == (
        'LocalQueue "team-a" (ClusterQueue "cq-a"): ' + PENDING["message"]
    )
    unreasoned = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": ""}
    assert describe_wait("gone", slim_workload(workload([unreasoned])), None) == (
        'LocalQueue "gone": waiting for Kueue to reserve quota'
    )


RESERVED = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"}


@pytest.mark.parametrize(
    "conditions",
    [None, [], [ADMITTED], [RESERVED], [RESERVED, ADMITTED]],
    ids=[
        "no Workload yet",
        "not judged yet",
        "admitted",
        "quota reserved, no checks",
        "reserved and admitted",
    ],
)
def test_a_job_kueue_holds_as_it_holds_every_job_has_no_why(conditions: list[dict[str, str]] | None) -> None:
    """Nothing to write: the run stays Pending until Kueue says why it holds the Job, or starts it."""
    body = None if conditions is None else slim_workload(workload(conditions, cluster_queue="cq-a"))
    assert describe_wait("team-a", body, QUEUE) is None


def test_an_eviction_is_seen_in_the_condition_or_in_the_count() -> None:
    assert describe_eviction(None) is None
    assert describe_eviction(slim_workload(workload([PENDING]))) is None
    assert describe_eviction(slim_workload(workload([EVICTED]))) == (
        "Kueue evicted Workload job-r-a1-1a2b3 (Preempted): " + EVICTED["message"]
    )
    readmitted = slim_workload(workload([{**EVICTED, "status": "False"}, ADMITTED], "cq-a", evictions=1))
    assert describe_eviction(readmitted) == "Kueue evicted Workload job-r-a1-1a2b3 after admitting it"


def test_kueue_manages_what_names_a_queue() -> None:
    assert is_kueue_managed({"kueue.x-k8s.io/queue-name": "team-a"})
    assert not is_kueue_managed({"kueue.x-k8s.io/queue-name": ""})
    assert not is_kueue_managed({})
    assert not is_kueue_managed(None)


def test_the_queue_is_the_label_else_the_operators_default_else_the_namespaces_default() -> None:
    labelled = run({"kueue.x-k8s.io/queue-name": "agents"})
    assert resolve_queue(labelled, "platform", True) == "agents"
    assert resolve_queue(run({}), "platform", True) == "platform"
    assert resolve_queue(run({}), "", True) == "default"
    assert resolve_queue(run({}), "", False) is None


def test_a_default_queue_on_a_cluster_without_kueue_names_the_chart_value() -> None:
    message = describe_missing_kueue("platform", labelled=False)
    assert message.startswith(
        'the operator\'s default queue (chart value kueue.defaultQueueName) is the queue "platform"'
    )
    assert message.endswith("install Kueue, or unset it")


def test_a_job_with_quota_waits_for_its_admission_checks_in_their_words() -> None:
    body = workload([RESERVED], cluster_queue="cq-a")
    body["status"]["admissionChecks"] = [
        {"name": "multikueue", "state": "Pending", "message": 'cluster "worker1" is not active', "x": 1},
        {"name": "ready-one", "state": "Ready", "message": "fine"},
    ]
    assert describe_wait("team-a", slim_workload(body), QUEUE) == (
        'LocalQueue "team-a" (ClusterQueue "cq-a"): quota reserved in ClusterQueue "cq-a", waiting for '
        'admission checks: multikueue Pending: cluster "worker1" is not active'
    )


def inactive(kind: str, name: str, message: str | None, **spec: Any) -> dict[str, Any]:
    """A Kueue object of `kind`, Active=False saying `message` (None: active)."""
    active = {"type": "Active", "status": "True", "reason": "Ready", "message": "ok"}
    down = {"type": "Active", "status": "False", "reason": "Down", "message": message}
    return {"kind": kind, "metadata": {"name": name}, "spec": spec,
            "status": {"conditions": [active if message is None else down]}}  # fmt: skip


def test_an_inactive_queue_is_explained_down_to_the_worker_kueue_cannot_reach() -> None:
    queue = inactive(
        "ClusterQueue", "remote", "references inactive AdmissionCheck(s): mk",
        admissionChecksStrategy={"admissionChecks": [{"name": "mk"}]}, admissionChecks=["prov"],
    )  # fmt: skip
    check = inactive(
        "AdmissionCheck", "mk", "Inactive clusters: [worker-2]",
        controllerName="kueue.x-k8s.io/multikueue",
        parameters={"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mk-config"},
    )  # fmt: skip
    assert admission_check_names(queue) == ["mk", "prov"]
    assert multikueue_config_name(check) == "mk-config"
    assert multikueue_config_name(inactive("AdmissionCheck", "prov", None, controllerName="other")) is None
    workers = [
        inactive("MultiKueueCluster", "worker-1", None),
        inactive("MultiKueueCluster", "worker-2", "dial tcp 10.87.0.1:6443: connect: connection refused"),
    ]
    assert describe_inactive(queue, [check], workers) == (
        'ClusterQueue "remote": references inactive AdmissionCheck(s): mk; AdmissionCheck "mk": Inactive '
        'clusters: [worker-2]; MultiKueueCluster "worker-2": dial tcp 10.87.0.1:6443: connect: connection '
        "refused"
    )
    assert describe_inactive(inactive("ClusterQueue", "remote", None), [check], workers) is None
    assert describe_inactive(None, [], []) is None


def test_only_an_inadmissible_workload_is_one_kueue_will_not_admit_as_things_are() -> None:
    def with_reason(reason: str) -> dict[str, Any]:
        cond = {"type": "QuotaReserved", "status": "False", "reason": reason, "message": "m"}
        return slim_workload(workload([cond]))

    assert is_inadmissible(with_reason("Inadmissible"))
    assert not is_inadmissible(with_reason("Pending"))  # waiting for quota
    assert not is_inadmissible(None)


def test_the_worker_a_workload_was_admitted_on_is_kept() -> None:
    body = workload([])
    body["status"]["clusterName"] = "worker-1"
    assert slim_workload(body)["status"]["clusterName"] == "worker-1"
