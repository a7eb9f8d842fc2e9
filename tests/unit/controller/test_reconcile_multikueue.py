"""The reconciler with a MultiKueue worker cluster: an attempt Kueue dispatched is followed on the worker
(its copy of the Job, the pods there), what the copy's pod needs is written there once the copy is proven
Kueue's, the copy is held until its result is recorded, and a worker the operator cannot reach or does
not know is said so. The worker is a fake client over the same watch cache the operator keeps of it."""

from dataclasses import replace
from typing import Any

from tests.unit.controller.fake_kube import ApiServer
from tests.unit.controller.test_reconcile import (
    CONFIG,
    RUNNING_POD,
    first_attempt,
    job,
    pod,
    reconciler,
    started_run,
)

from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kube import Kube
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.workers import Worker, Workers
from harness_operator.core.config import OperatorConfig
from harness_operator.core.queue.multikueue import RESULT_FINALIZER

MANAGED = {"spec": {"suspend": False, "managedBy": "kueue.x-k8s.io/multikueue"}}
QUEUE = {"kueue.x-k8s.io/queue-name": "remote"}
COPY = {"kueue.x-k8s.io/prebuilt-workload-name": "job-r-a1-abc", "kueue.x-k8s.io/multikueue-origin": "mk"}
POD_SPEC = {"containers": [{"name": "runner", "image": "harness.local/sandbox:0.1.0"}]}


def local_job() -> dict[str, Any]:
    body = job()
    body["metadata"]["labels"] |= QUEUE
    return {**body, **MANAGED, "spec": {**MANAGED["spec"], "template": {"spec": POD_SPEC}}}


def remote_job(labels: dict[str, str] = COPY, finalizers: list[str] | None = None) -> dict[str, Any]:
    body = job()
    body["metadata"] |= {"uid": "remote-uid", "ownerReferences": [], "finalizers": finalizers or []}
    body["metadata"]["labels"] |= QUEUE | labels
    body["spec"] = {"suspend": False, "template": {"spec": POD_SPEC}}
    return body


def remote_pod(state: dict[str, Any]) -> dict[str, Any]:
    body = pod(state)
    body["metadata"]["ownerReferences"] = [{"uid": "remote-uid", "controller": True}]
    return body


def workload(cluster: str | None) -> dict[str, Any]:
    reserved = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"}
    return {
        "metadata": {
            "name": "job-r-a1-abc",
            "namespace": "ns",
            "ownerReferences": [{"kind": "Job", "name": "r-a1", "uid": "job-uid", "controller": True}],
        },
        "spec": {"queueName": "remote"},
        "status": {"conditions": [reserved], "clusterName": cluster},
    }


class WorkerApi:
    """The worker's API server: its copy of the Job (full), what the operator created and patched there."""

    def __init__(self, remote: dict[str, Any]) -> None:
        self.remote = remote
        self.created: list[str] = []
        self.finalizers: list[str] = []

    def fetch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.remote

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        owner = obj["metadata"].get("ownerReferences") or [{}]
        self.created.append(f"{obj['kind']} {obj['metadata']['name']} owner={owner[0].get('uid')}")
        return None

    def add_job_finalizer(self, namespace: str, name: str, finalizer: str, current: list[str]) -> None:
        self.finalizers.append(f"+{finalizer}")

    def remove_job_finalizer(self, namespace: str, name: str, finalizer: str, current: list[str]) -> None:
        self.finalizers.append(f"-{finalizer}")


class ManagerApi(ApiServer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.events: list[tuple[str, str]] = []

    def fetch_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name != "r-plan":
            return None
        meta = {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [{"uid": "run-uid", "controller": True}],
        }
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {"plan.json": "e30="}}

    def create_event(self, body: Any, type_: str, reason: str, message: str, *args: Any) -> None:
        self.events.append((reason, message))


def setup(
    cluster: str | None,
    remote: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    synced: bool = True,
    workload_: dict[str, Any] | None = None,
    config: OperatorConfig = CONFIG,
) -> tuple[ManagerApi, WorkerApi, Any]:
    """The reconciler, its Kueue cache holding `workload_` (else the Workload admitted by `cluster`), and
    worker-1 holding `remote` and `pods`."""
    api = ManagerApi([local_job()], [], started_run())
    kueue = KueueStore(ChildStore())
    kueue.on_first_use(lambda: None)
    kueue.ensure_watching()
    kueue.replace("Workload", None, [workload_ or workload(cluster)])
    kueue.replace("LocalQueue", None, [{"metadata": {"name": "remote", "namespace": "ns"}, "spec": {}}])
    worker_api = WorkerApi(remote or remote_job())
    store = ChildStore()
    if synced:
        store.replace("Job", None, [remote] if remote else [])
        store.replace("Pod", None, pods)
    kube: Kube = worker_api  # type: ignore[assignment]
    workers = Workers([Worker("worker-1", kube, store)])
    r = reconciler(api, [local_job()], [], kueue=kueue, workers=workers, config=config)
    return api, worker_api, r


def test_an_attempt_on_the_worker_gets_its_plan_and_policy_there_and_its_result_from_the_pod_there() -> None:
    ended = remote_pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    api, worker, r = setup("worker-1", remote_job(), [ended])
    r.reconcile("ns", "r")
    assert worker.created == [
        "NetworkPolicy r-a1 owner=remote-uid",
        "Secret r-plan owner=remote-uid",
    ]
    assert first_attempt(api)["cluster"] == "worker-1"
    assert first_attempt(api)["reason"] == "ProviderFailed"  # the worker pod's own exit
    assert first_attempt(api)["podName"] == "r-a1-x"
    assert worker.finalizers[0] == f"+{RESULT_FINALIZER}"
    assert "Job r-a2" in api.created  # the fallback starts here, and queues again
    assert not [e for e in api.events if e[0] == "GatewayNotOnWorker"]  # no gateway in this operator


def test_an_attempt_routed_through_the_egress_gateway_is_warned_of_when_it_runs_on_a_worker() -> None:
    config = replace(
        CONFIG,
        egress_gateway_service="gw.harness-system.svc",
        egress_gateway_namespace="harness-system",
        egress_gateway_key="k",
    )
    api, _, r = setup("worker-1", remote_job(), [remote_pod({"running": {}})], config=config)
    run = started_run(
        sandbox={"networkPolicy": "allowlist", "egress": [{"host": "example.com", "ports": [443]}]}
    )
    api.runs["r"] = run.to_api()
    r.reconcile("ns", "r")
    (warning,) = [m for reason, m in api.events if reason == "GatewayNotOnWorker"]
    assert warning.startswith(
        'attempt 1 runs on worker cluster "worker-1" (MultiKueue) but is routed through the egress gateway'
    )


def test_the_copy_is_let_go_of_once_its_attempts_end_is_recorded() -> None:
    ended = remote_pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    api, worker, r = setup("worker-1", remote_job(finalizers=[RESULT_FINALIZER]), [ended])
    r.reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "ProviderFailed"
    assert worker.finalizers == [f"-{RESULT_FINALIZER}"]


def test_a_credential_secret_the_worker_lacks_ends_the_attempt_saying_what_to_provide_there() -> None:
    waiting = {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "tok" not found'}}
    api, worker, r = setup("worker-1", remote_job(finalizers=[RESULT_FINALIZER]), [remote_pod(waiting)])
    deleted: list[str] = []
    api.delete_job = lambda namespace, name, grace=None: deleted.append(name)  # type: ignore[method-assign]
    r.reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "CredentialsMissing"
    assert first_attempt(api)["podName"] == "r-a1-x"  # the pod the kubelet cannot start
    assert first_attempt(api)["message"] == (
        'the pod of Job r-a1 cannot start on worker cluster "worker-1": secret "tok" not found. The Secrets '
        'a run\'s definitions grant must exist in namespace "ns" on every worker its queue dispatches to '
        "(docs/kueue.md)"
    )
    assert deleted == ["r-a1"]  # and Kueue's copy with it, once let go of
    assert worker.finalizers == [f"-{RESULT_FINALIZER}"]


def test_a_running_attempt_on_the_worker_is_held_and_written_for_once() -> None:
    api, worker, r = setup(
        "worker-1", remote_job(finalizers=[RESULT_FINALIZER]), [remote_pod({"running": {}})]
    )
    r.reconcile("ns", "r")
    r.reconcile("ns", "r")
    assert len(worker.created) == 2 and worker.finalizers == []  # held already; nothing to let go of
    assert api.status("r")["reason"] == "Running"
    assert first_attempt(api)["cluster"] == "worker-1"


def test_a_job_on_the_worker_that_is_not_kueues_copy_gets_nothing_and_fails_the_run() -> None:
    forged = remote_job(labels={"kueue.x-k8s.io/prebuilt-workload-name": "someone-elses"})
    api, worker, r = setup("worker-1", forged, [remote_pod({"running": {}})])
    r.reconcile("ns", "r")
    assert worker.created == [] and worker.finalizers == []
    assert api.status("r")["reason"] == "ChildConflict"
    assert "is not MultiKueue's copy of this run's Job" in api.status("r")["message"]


def test_a_worker_the_operator_has_no_kubeconfig_for_fails_the_attempt_and_its_job_goes() -> None:
    api, _, r = setup("worker-9", None, [])
    deleted: list[str] = []
    api.delete_job = lambda namespace, name, grace=None: deleted.append(name)  # type: ignore[method-assign]
    r.reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "QueueUnavailable"
    assert '"worker-9"' in first_attempt(api)["message"] and '"worker-1"' in first_attempt(api)["message"]
    assert deleted == ["r-a1"]
    assert "Job r-a2" not in api.created  # another provider's Job would go to the same queue


def test_a_worker_not_reached_yet_or_without_the_copy_yet_leaves_the_attempt_waiting_saying_so() -> None:
    api, _, r = setup("worker-1", None, [], synced=False)
    r.reconcile("ns", "r")
    assert api.status("r")["reason"] == "Suspended"
    assert 'worker cluster "worker-1"' in api.status("r")["message"]
    assert "has not reached yet" in api.status("r")["message"]
    api, _, r = setup("worker-1", None, [])
    r.reconcile("ns", "r")
    assert "its copy of Job r-a1 is not there yet" in api.status("r")["message"]


def test_before_a_worker_admits_it_the_job_here_says_why_it_waits() -> None:
    pending = workload(None)
    pending["status"]["admissionChecks"] = [{"name": "mk", "state": "Pending", "message": "no worker yet"}]
    api, worker, r = setup(None, None, [], workload_=pending)
    held = local_job()
    held["spec"]["suspend"] = True
    api.jobs = [held]
    r.children.replace("Job", None, [held])
    r.reconcile("ns", "r")
    assert worker.created == []
    assert first_attempt(api).get("cluster") is None
    assert api.status("r")["reason"] == "Suspended"
    assert api.status("r")["message"].endswith("waiting for admission checks: mk Pending: no worker yet")


def test_a_withdrawn_looking_attempt_is_read_again_before_it_is_ended() -> None:
    """The Job's watch still shows it suspended (before Kueue resumed it) when the pod's watch shows its
    pod: the Job is read again, and the attempt runs on."""
    suspended = {**job(), "spec": {"suspend": True}}
    suspended["metadata"]["labels"] = {**suspended["metadata"]["labels"], **QUEUE}
    resumed = {**suspended, "spec": {"suspend": False}}
    api = ApiServer([resumed], [RUNNING_POD], started_run())
    r = reconciler(api, [suspended], [RUNNING_POD])
    r.reconcile("ns", "r")
    assert "reason" not in first_attempt(api)
    assert api.status("r")["reason"] == "Running"
    assert api.reads == ["job r-a1"]
