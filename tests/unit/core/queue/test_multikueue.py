"""multikueue: which Jobs MultiKueue dispatches and to which worker, whether a Job on a worker is Kueue's
copy of ours, and what the operator writes there for the copy's pod."""

from typing import Any

from harness_operator.core.queue.kueue import slim_workload
from harness_operator.core.queue.multikueue import (
    RESULT_FINALIZER,
    build_remote_child,
    check_remote_copy,
    describe_gateways_elsewhere,
    describe_remote_wait,
    describe_unknown_worker,
    describe_unreachable,
    dispatched_cluster,
    find_missing_secret,
    has_result_finalizer,
    is_dispatched,
)

POD = {
    "containers": [{"name": "runner", "image": "harness.local/sandbox:0.1.0", "args": ["run"]}],
    "volumes": [{"name": "plan", "secret": {"secretName": "r-plan"}}],
    "automountServiceAccountToken": False,
}


def job(managed_by: str | None = None, pod: dict[str, Any] | None = None, **labels: str) -> dict[str, Any]:
    return {
        "kind": "Job",
        "metadata": {"name": "r-a1", "namespace": "ns", "uid": "remote-uid", "labels": labels},
        "spec": {"managedBy": managed_by, "template": {"spec": pod or POD}},
    }


COPY_LABELS = {
    "kueue.x-k8s.io/prebuilt-workload-name": "job-r-a1-abc",
    "kueue.x-k8s.io/multikueue-origin": "multikueue",
}


def test_only_a_job_managed_by_multikueue_is_dispatched() -> None:
    assert is_dispatched(job("kueue.x-k8s.io/multikueue"))
    assert not is_dispatched(job())
    assert not is_dispatched(job("example.com/other"))


def test_the_worker_is_the_one_the_workload_was_admitted_on() -> None:
    def workload(cluster: str | None) -> dict[str, Any]:
        return slim_workload({"metadata": {"name": "w"}, "status": {"clusterName": cluster}})

    assert dispatched_cluster(workload("worker-1")) == "worker-1"
    assert dispatched_cluster(workload(None)) is None
    assert dispatched_cluster(workload("")) is None
    assert dispatched_cluster(None) is None


def test_a_copy_carries_the_workloads_label_and_the_same_pod() -> None:
    assert check_remote_copy(job(), job(**COPY_LABELS), "job-r-a1-abc", "worker-1") is None


def test_a_job_of_that_name_someone_else_made_on_the_worker_is_not_trusted() -> None:
    forged = check_remote_copy(job(), job(), "job-r-a1-abc", "worker-1")
    assert forged == (
        "Job r-a1 on worker cluster \"worker-1\" is not MultiKueue's copy of this run's Job: its label "
        'kueue.x-k8s.io/prebuilt-workload-name is "", not "job-r-a1-abc"'
    )
    other_workload = check_remote_copy(job(), job(**COPY_LABELS), "job-r-a1-zzz", "worker-1")
    assert other_workload is not None and '"job-r-a1-abc", not "job-r-a1-zzz"' in other_workload
    mounts_more = {**POD, "volumes": [*POD["volumes"], {"name": "keys", "secret": {"secretName": "k"}}]}
    changed = check_remote_copy(job(), job(pod=mounts_more, **COPY_LABELS), "job-r-a1-abc", "worker-1")
    assert changed is not None and changed.endswith("its pod template differs in volumes")


def test_a_child_on_the_worker_is_owned_by_the_copy_and_carries_nothing_the_api_server_wrote() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "r-plan",
            "namespace": "ns",
            "uid": "here",
            "resourceVersion": "7",
            "creationTimestamp": "t",
            "managedFields": [{}],
            "labels": {"agentharness.dev/run": "r"},
            "annotations": {"agentharness.dev/content-sha256": "abc"},
            "ownerReferences": [{"kind": "HarnessRun", "uid": "run-uid", "controller": True}],
        },
        "data": {"plan.json": "e30="},
    }
    remote = job(**COPY_LABELS)
    assert build_remote_child(secret, remote) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "data": {"plan.json": "e30="},
        "metadata": {
            "name": "r-plan",
            "namespace": "ns",
            "labels": {"agentharness.dev/run": "r"},
            "annotations": {"agentharness.dev/content-sha256": "abc"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "r-a1",
                    "uid": "remote-uid",
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
    }
    shared_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "claude-ws", "namespace": "ns", "labels": {"agentharness.dev/workspace": "a"}},
        "spec": {"accessModes": ["ReadWriteOnce"]},
    }
    assert "ownerReferences" not in build_remote_child(shared_claim, remote)["metadata"]


def test_only_a_container_that_cannot_start_for_its_config_is_a_missing_secret() -> None:
    def pod(kind: str, state: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "r-a1-x"}, "status": {kind: [{"name": "runner", "state": state}]}}

    config_error = {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "tok" not found'}}
    found = ("r-a1-x", 'secret "tok" not found')
    assert find_missing_secret([pod("containerStatuses", config_error)]) == found
    assert find_missing_secret([pod("initContainerStatuses", config_error)]) == found
    assert (
        find_missing_secret([pod("containerStatuses", {"waiting": {"reason": "ContainerCreating"}})]) is None
    )
    assert find_missing_secret([pod("containerStatuses", {"running": {}})]) is None
    assert find_missing_secret([]) is None


def test_the_finalizer_is_seen_among_others() -> None:
    held = job()
    held["metadata"]["finalizers"] = ["example.com/x", RESULT_FINALIZER]
    assert has_result_finalizer(held)
    assert not has_result_finalizer(job())


def test_the_messages_name_the_worker_the_job_and_the_fix() -> None:
    unknown = describe_unknown_worker("remote", "r-a1", "worker-9", ["worker-2", "worker-1"])
    assert unknown.startswith('LocalQueue "remote" dispatched Job r-a1 to worker cluster "worker-9"')
    assert '(chart value multiKueue.workers; it has "worker-1", "worker-2")' in unknown
    assert "it has none" in describe_unknown_worker("remote", "r-a1", "worker-9", [])
    assert 'worker cluster "worker-1"' in describe_unreachable("worker-1", "r-a1")
    assert describe_remote_wait("worker-1", "r-a1", False) == (
        'admitted on worker cluster "worker-1" (MultiKueue); its copy of Job r-a1 is not there yet'
    )
    assert "waits for that cluster's Kueue" in describe_remote_wait("worker-1", "r-a1", True)


def test_an_attempt_routed_through_this_clusters_gateways_is_warned_of_on_a_worker() -> None:
    both = describe_gateways_elsewhere(2, "worker-1", True, True)
    assert both == (
        'attempt 2 runs on worker cluster "worker-1" (MultiKueue) but is routed through the model gateway '
        "and the egress gateway, Services of this cluster: its pod there reaches them only where the "
        "platform makes them reachable from the workers' pods (docs/kueue.md)"
    )
    model_only = describe_gateways_elsewhere(1, "worker-1", True, False)
    assert model_only is not None and "through the model gateway, Services" in model_only
    assert describe_gateways_elsewhere(1, "worker-1", False, False) is None
