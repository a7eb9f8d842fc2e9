"""Runs MultiKueue dispatches to a second cluster (tests/cluster/worker: its own etcd, control plane,
containerd, kubelet and NetworkPolicy enforcer in a network namespace of its own, with Kueue v0.17.0 on
both clusters). The attempt's Job is created here, Kueue copies it to the worker, and the operator, given
a kubeconfig for the worker as the chart harness-multikueue-worker's ServiceAccount, writes what the copy's
pod needs there and reads the pod: status, output, usage and cost show here, where no pod of the run ever
exists. A worker the operator has no kubeconfig for fails the run with a reason that says so, and a worker
whose API server does not answer leaves the run waiting with Kueue's reason, cancellable.

Slow on a cold machine (Kueue's build, a second cluster): runs only with HARNESS_MULTIKUEUE=1
(`make multikueue-test`)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .conftest import CLUSTER_DIR, Api, operator_settings, running_operator, wait_until
from .operator_env import (
    OperatorProcess,
    definition_body,
    run_body,
)

pytestmark = [
    pytest.mark.kueue,
    pytest.mark.skipif(
        os.environ.get("HARNESS_MULTIKUEUE") != "1", reason="set HARNESS_MULTIKUEUE=1 (make multikueue-test)"
    ),
]

ROOT = CLUSTER_DIR.parent.parent
KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKER = "worker1"  # the MultiKueueCluster the operator has a kubeconfig for
STRANGER = "worker-unknown"  # the same worker under a second name the operator has none for
DEAD = "worker-dead"  # a MultiKueueCluster whose API server does not answer
WORKER_RELEASE, WORKER_NAMESPACE = "mk", "harness-system"
FINALIZER = "agentharness.dev/result"


@dataclass
class Worker:
    api: client.ApiClient
    admin_kubeconfig: str
    operator_kubeconfig: str  # as the ServiceAccount harness-multikueue-worker made

    def jobs(self, namespace: str) -> list[Any]:
        return client.BatchV1Api(self.api).list_namespaced_job(namespace).items

    def pods(self, namespace: str) -> list[Any]:
        return client.CoreV1Api(self.api).list_namespaced_pod(namespace).items


def sh(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        args, stdout=subprocess.PIPE, text=True, check=True, env={**os.environ, **(env or {})}
    )
    return proc.stdout


def kueue_object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": meta, "spec": spec}


def apply(api: client.ApiClient, body: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api)
    plural = body["kind"].lower() + ("es" if body["kind"].endswith("s") else "s")
    namespace = body["metadata"].get("namespace")
    try:
        if namespace:
            custom.create_namespaced_custom_object(*KUEUE, namespace, plural, body)
        else:
            custom.create_cluster_custom_object(*KUEUE, plural, body)
    except ApiException as exc:
        if exc.status != 409:
            raise


def quota(pods: int) -> list[dict[str, Any]]:
    resources = [
        {"name": "cpu", "nominalQuota": "4"},
        {"name": "memory", "nominalQuota": "8Gi"},
        {"name": "pods", "nominalQuota": pods},
    ]
    return [
        {"coveredResources": ["cpu", "memory", "pods"], "flavors": [{"name": "mk", "resources": resources}]}
    ]


def dispatching_queue(manager: client.ApiClient, name: str, cluster: str, kubeconfig: str) -> None:
    """On the manager: ClusterQueue `name` whose MultiKueue admission check sends its Jobs to `cluster`,
    whose kubeconfig (Kueue's) is `kubeconfig`."""
    core = client.CoreV1Api(manager)
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=cluster), string_data={"kubeconfig": kubeconfig}
    )
    try:
        core.create_namespaced_secret("kueue-system", secret)
    except ApiException as exc:
        if exc.status != 409:
            raise
    source = {"kubeConfig": {"locationType": "Secret", "location": cluster}}
    apply(manager, kueue_object("MultiKueueCluster", cluster, {"clusterSource": source}))
    apply(manager, kueue_object("MultiKueueConfig", name, {"clusters": [cluster]}))
    check = {
        "controllerName": "kueue.x-k8s.io/multikueue",
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": name},
    }
    apply(manager, kueue_object("AdmissionCheck", name, check))
    spec = {
        "namespaceSelector": {},
        "resourceGroups": quota(4),
        "admissionChecksStrategy": {"admissionChecks": [{"name": name}]},
    }
    apply(manager, kueue_object("ClusterQueue", name, spec))


@pytest.fixture(scope="module")
def worker(kube: client.ApiClient, cluster_bin_dir: Path, images: dict[str, str]) -> Iterator[Worker]:
    """The second cluster with Kueue, the chart harness-multikueue-worker and the test's images; Kueue on
    the manager with three dispatching ClusterQueues (to the worker, to the worker under a name the
    operator does not know, to a worker that does not answer). All of it removed after."""
    up = sh(str(CLUSTER_DIR / "worker"), "up").strip().splitlines()[-1]
    try:
        admin_kubeconfig = up.split("=", 1)[1]
        worker_env = {"HARNESS_CLUSTER_ROLE": "worker"}
        sh(str(CLUSTER_DIR / "kueue"), "start")
        sh(str(CLUSTER_DIR / "kueue"), "start", env=worker_env)
        sh(str(CLUSTER_DIR / "worker"), "images", images["test"], images["sandbox"])
        helm = [str(cluster_bin_dir / "helm"), "--kubeconfig", admin_kubeconfig]
        sh(
            *helm,
            "upgrade",
            "--install",
            WORKER_RELEASE,
            str(ROOT / "charts" / "harness-multikueue-worker"),
            "--namespace",
            WORKER_NAMESPACE,
            "--create-namespace",
            "--wait",
        )
        api = config.new_client_from_config(config_file=admin_kubeconfig)
        core = client.CoreV1Api(api)
        token_secret = f"{WORKER_RELEASE}-harness-operator-token"
        token = wait_until(
            lambda: (core.read_namespaced_secret(token_secret, WORKER_NAMESPACE).data or {}).get("token"),
            timeout=30,
            what="the worker ServiceAccount's token",
        )
        cluster = yaml.safe_load(Path(admin_kubeconfig).read_text())["clusters"][0]["cluster"]
        server, ca = cluster["server"], cluster["certificate-authority-data"]
        operator_kubeconfig = Path(admin_kubeconfig).with_name("operator-worker1.kubeconfig")
        operator_kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": WORKER, "cluster": {"server": server, "certificate-authority-data": ca}}
                    ],
                    "users": [{"name": "operator", "user": {"token": base64.b64decode(token).decode()}}],
                    "contexts": [{"name": WORKER, "context": {"cluster": WORKER, "user": "operator"}}],
                    "current-context": WORKER,
                }
            )
        )
        operator_kubeconfig.chmod(0o600)
        # The worker's own queue, and the manager's, which dispatch to it.
        apply(api, kueue_object("ResourceFlavor", "mk", {}))
        apply(
            api, kueue_object("ClusterQueue", "remote", {"namespaceSelector": {}, "resourceGroups": quota(4)})
        )
        apply(kube, kueue_object("ResourceFlavor", "mk", {}))
        kueue_view = Path(admin_kubeconfig).read_text()
        dispatching_queue(kube, "remote", WORKER, kueue_view)
        dispatching_queue(kube, "stranger", STRANGER, kueue_view)
        dead = kueue_view.replace(server, "https://127.0.0.1:1")  # in Kueue's pod: nothing listens there
        dispatching_queue(kube, "dead", DEAD, dead)
        yield Worker(api, admin_kubeconfig, str(operator_kubeconfig))
        api.close()
    finally:  # also when the setup failed half-way: nothing of it stays behind
        subprocess.run([str(CLUSTER_DIR / "kueue"), "stop"], check=False)
        subprocess.run([str(CLUSTER_DIR / "worker"), "down"], check=False)


@pytest.fixture(scope="module")
def operator(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    images: dict[str, str],
    worker: Worker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The operator as the chart runs it, with the worker's kubeconfig (the chart's multiKueue.workers)."""
    env = {
        **operator_settings(images),
        "HARNESS_MULTIKUEUE_WORKERS": f"{WORKER}={worker.operator_kubeconfig}",
    }
    with running_operator(kube, kubeconfig_path, cluster_bin_dir, tmp_path_factory, env) as proc:
        yield proc


@pytest.fixture
def remote(api: Api, worker: Worker) -> Iterator[Api]:
    """The test's namespace on the worker too (Kueue's rule for MultiKueue), the LocalQueues of the three
    dispatching ClusterQueues here, and on the worker those of the two that reach it."""
    core = client.CoreV1Api(worker.api)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=api.ns, labels=labels)))
    wait_until(lambda: core.read_namespaced_service_account("default", api.ns), timeout=30, what="default SA")
    for queue in ("remote", "stranger"):  # both reach this worker: the second under another name
        apply(worker.api, kueue_object("LocalQueue", queue, {"clusterQueue": "remote"}, api.ns))
    for queue in ("remote", "stranger", "dead"):
        apply(api.custom.api_client, kueue_object("LocalQueue", queue, {"clusterQueue": queue}, api.ns))
    time.sleep(2)  # Kueue's caches learn the queues
    yield Api(worker.api, api.ns)
    core.delete_namespace(api.ns, propagation_policy="Background")


def queued_run(name: str, queue: str, **spec: Any) -> dict[str, Any]:
    body = run_body(name, {"provider": "fake", "prompt": "say hi", **spec})
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return body


def failed_run(api: Api, name: str, queue: str, reason: str) -> dict[str, Any]:
    """Run `name` on `queue`, which ends it Failed for `reason`: its status."""
    api.create(queued_run(name, queue))
    status = api.wait_finished(name, timeout=90)
    print(status["message"])
    assert (status["phase"], status["reason"]) == ("Failed", reason), status
    return status


def workloads(api: Api) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(api.custom.api_client).list_namespaced_custom_object(
        *KUEUE, api.ns, "workloads"
    )["items"]


def test_a_run_executes_on_the_worker_and_its_result_shows_here(
    api: Api, remote: Api, worker: Worker, images: dict[str, str]
) -> None:
    api.create(definition_body("fake", images["test"], "ok"))
    started = time.monotonic()
    api.create(queued_run("hello", "remote"))
    remote_jobs = wait_until(lambda: remote.jobs("hello"), timeout=60, what="the Job's copy on the worker")
    assert remote_jobs[0].metadata.labels["kueue.x-k8s.io/multikueue-origin"]
    status = api.wait_finished("hello", timeout=120)
    print(f"\nmeasured: apply -> Succeeded on the worker {time.monotonic() - started:.2f}s")
    assert status["phase"] == "Succeeded", status
    attempt = status["attempts"][0]
    assert attempt["cluster"] == WORKER
    assert attempt["jobName"] == "hello-a1"
    assert status["usage"]["inputTokens"] == 10
    assert status["usage"]["outputTokens"] == 5
    assert status["usage"]["costUSD"] == 0.01
    assert status["output"]["excerpt"] == "answer from fake-agent: say hi"
    cm = api.core.read_namespaced_config_map(status["output"]["configMapName"], api.ns)
    assert cm.data["output"] == "answer from fake-agent: say hi"
    # The pod ran there, under the run's policy and plan, which the operator wrote there for it.
    assert not api.core.list_namespaced_pod(api.ns).items, "no pod of the run ever runs here"
    pods = worker.pods(api.ns)
    assert pods and pods[0].spec.node_name == "harness-worker-node"
    # Held until read, then let go: Kueue deletes the copy, and what was written for it goes with it.
    wait_until(lambda: not remote.jobs("hello"), timeout=60, what="the worker's copy to go")
    wait_until(
        lambda: (
            not client.NetworkingV1Api(worker.api).list_namespaced_network_policy(api.ns).items
            and not [
                s
                for s in client.CoreV1Api(worker.api).list_namespaced_secret(api.ns).items
                if s.metadata.name.startswith("hello")
            ]
        ),
        timeout=60,
        what="the worker's plan Secret and NetworkPolicy to go with the copy",
    )
    # The Job here ends as its copy did (Kueue copies the status); it stays with the run, as a local one.
    job = api.batch.read_namespaced_job("hello-a1", api.ns)
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])


def test_a_credential_the_worker_lacks_fails_the_attempt_saying_what_to_provide_there(
    api: Api, remote: Api, images: dict[str, str]
) -> None:
    """The Secret a definition grants exists here, not on the worker: the pod there cannot start, and the
    run says so instead of waiting for it."""
    api.core.create_namespaced_secret(
        api.ns, client.V1Secret(metadata=client.V1ObjectMeta(name="tok"), string_data={"k": "v"})
    )
    grant = [{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "tok", "key": "k"}}]
    api.create(definition_body("fake", images["test"], "ok", credentials=grant))
    status = failed_run(api, "nokey", "remote", "CredentialsMissing")
    assert f'cannot start on worker cluster "{WORKER}": ' in status["message"]
    assert '"tok"' in status["message"]
    wait_until(lambda: not remote.jobs("nokey"), timeout=60, what="the worker's copy to go")


def test_a_worker_the_operator_cannot_reach_fails_the_run_saying_so(
    api: Api, remote: Api, images: dict[str, str]
) -> None:
    """Kueue reaches this worker by a name the operator has no kubeconfig for: the attempt cannot run
    there (no plan, no policy), so it fails at once and its Job goes (and Kueue's copy with it)."""
    api.create(definition_body("fake", images["test"], "ok"))
    status = failed_run(api, "stranger", "stranger", "QueueUnavailable")
    assert f'to worker cluster "{STRANGER}"' in status["message"]
    assert "multiKueue.workers" in status["message"]
    wait_until(lambda: not api.jobs("stranger"), timeout=60, what="its Job to go")
    wait_until(lambda: not remote.jobs("stranger"), timeout=60, what="the worker's copy to go")


def test_a_worker_that_does_not_answer_leaves_the_run_waiting_with_kueues_reason(
    api: Api, remote: Api, images: dict[str, str]
) -> None:
    api.create(definition_body("fake", images["test"], "ok"))
    api.create(queued_run("stuck", "dead"))
    cond = wait_until(
        lambda: (
            (c := api.condition("stuck", "Succeeded")).get("reason") == "Suspended"
            and "dead" in c.get("message", "")
            and c
        ),
        timeout=60,
        what="the run to wait with its queue's reason",
    )
    print(cond["message"])
    assert 'LocalQueue "dead"' in cond["message"]
    # Kueue says only that the ClusterQueue is inactive; the run says why, down to the worker.
    assert 'AdmissionCheck "dead": Inactive clusters: [worker-dead]' in cond["message"]
    assert f'MultiKueueCluster "{DEAD}": ' in cond["message"]
    api.custom.patch_namespaced_custom_object(
        "agentharness.dev", "v1alpha1", api.ns, "harnessruns", "stuck", {"spec": {"cancel": True}}
    )
    status = api.wait_finished("stuck", timeout=60)
    assert status["reason"] == "Cancelled", status
    wait_until(lambda: not api.jobs("stuck"), timeout=60, what="its Job to go")
    wait_until(lambda: not workloads(api), timeout=60, what="its Workload to go")
