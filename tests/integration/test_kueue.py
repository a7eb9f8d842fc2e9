"""Runs under a real Kueue (v0.17.0, built from the Go module proxy and installed from its own manifests by
tests/cluster/kueue): two teams' ClusterQueues hold each team's runs to its quota while the operator's own
per-namespace limit steps aside, and a held run says why in Kueue's words; a queued run cancelled or
deleted leaves no Job and no Workload; the time limit does not count while Kueue holds a run; a run Kueue
preempts for a higher-priority one ends that attempt Preempted, its Job deleted before a second pod could
start, and its retry queues again; a budget-held run never reaches Kueue.

Slow on a cold machine (Kueue's build, about five minutes): runs only with HARNESS_KUEUE=1
(`make kueue-test`)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import CLUSTER_DIR, Api, wait_until
from .operator_env import OperatorProcess, definition_body, run_body

pytestmark = [
    pytest.mark.kueue,
    pytest.mark.skipif(
        os.environ.get("HARNESS_KUEUE") != "1", reason="set HARNESS_KUEUE=1 (make kueue-test)"
    ),
]

KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PLENTY = [{"name": "cpu", "nominalQuota": "10"}, {"name": "memory", "nominalQuota": "20Gi"}]


@pytest.fixture(scope="module", autouse=True)
def kueue(kubeconfig_path: str) -> Iterator[None]:
    """Kueue installed before the operator starts (it then watches Workloads from its start), removed
    after, also when its start failed half-way: while installed its Job webhook sees every Job of the
    cluster."""
    try:
        subprocess.run([str(CLUSTER_DIR / "kueue"), "start"], check=True)
        yield
    finally:
        subprocess.run([str(CLUSTER_DIR / "kueue"), "stop"], check=True)


@pytest.fixture
def custom(kube: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube)


@pytest.fixture
def cluster_objects(custom: client.CustomObjectsApi) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    """`make(plural, body)`: a cluster-scoped Kueue object with a unique name (returned), deleted after."""
    made: list[tuple[str, str]] = []

    def make(plural: str, body: dict[str, Any]) -> str:
        name = f"{body['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        body = {**body, "apiVersion": "/".join(KUEUE), "metadata": {"name": name}}
        custom.create_cluster_custom_object(*KUEUE, plural, body)
        made.append((plural, name))
        return name

    yield make
    for plural, name in reversed(made):
        try:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def cluster_queue(make: Callable[[str, dict[str, Any]], str], flavor: str, pods: int, **spec: Any) -> str:
    """A ClusterQueue for every namespace whose quota is `pods` pods (each run's attempt is one pod)."""
    resources = [*PLENTY, {"name": "pods", "nominalQuota": pods}]
    body = {
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "pods"],
                    "flavors": [{"name": flavor, "resources": resources}],
                }
            ],
            **spec,
        },
    }
    return make("clusterqueues", body)


def local_queue(custom: client.CustomObjectsApi, namespace: str, name: str, cq: str) -> None:
    body = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": name},
        "spec": {"clusterQueue": cq},
    }
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)


@pytest.fixture
def flavor(cluster_objects: Callable[[str, dict[str, Any]], str]) -> str:
    return cluster_objects("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "default"}})


def slow(api: Api, images: dict[str, str], name: str = "slow", turns: int = 3) -> None:
    """A definition whose agent takes `turns` seconds (one turn a second)."""
    env = [
        {"name": "FAKE_MODE", "value": "turns"},
        {"name": "FAKE_TURNS", "value": str(turns)},
        {"name": "FAKE_TURN_SECONDS", "value": "1"},
    ]
    api.create(definition_body(name, images["test"], "turns", env=env))


def queued_run(name: str, queue: str, provider: str = "slow", **spec: Any) -> dict[str, Any]:
    body = run_body(name, {"provider": provider, "prompt": "p", **spec})
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return body


def workloads(api: Api, job: str) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api.custom.api_client).list_namespaced_custom_object(
        *KUEUE, api.ns, "workloads"
    )["items"]
    return [
        w for w in listed if any(o.get("name") == job for o in w["metadata"].get("ownerReferences") or [])
    ]


def admitted_jobs(api: Api) -> set[str]:
    """The namespace's Jobs Kueue has let run (not suspended) that have not finished."""
    jobs = api.batch.list_namespaced_job(api.ns).items
    done = ("Complete", "Failed")
    return {
        j.metadata.name
        for j in jobs
        if not j.spec.suspend
        and not any(c.type in done and c.status == "True" for c in (j.status.conditions or []))
    }


@pytest.fixture
def second_namespace(kube: client.ApiClient, api: Api) -> Iterator[Api]:
    """Another team's namespace, under the same Pod Security rules as the first."""
    core = client.CoreV1Api(kube)
    name = f"{api.ns[:50]}-b"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "harness-operator.test/integration": "true",
    }
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA")
    yield Api(kube, name)
    core.delete_namespace(name, propagation_policy="Background")


def test_two_teams_are_held_to_their_quotas_and_a_held_run_says_why(
    api: Api,
    second_namespace: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    team_a, team_b = api, second_namespace
    cq_a = cluster_queue(cluster_objects, flavor, pods=1)
    cq_b = cluster_queue(cluster_objects, flavor, pods=3)  # more than the operator's own limit of 2
    local_queue(custom, team_a.ns, "team-a", cq_a)
    local_queue(custom, team_b.ns, "team-b", cq_b)
    for team in (team_a, team_b):
        slow(team, images)
    for i in range(3):
        team_a.create(queued_run(f"a{i}", "team-a"))
        team_b.create(queued_run(f"b{i}", "team-b"))
    most = {team_a.ns: 0, team_b.ns: 0}
    held_messages: set[str] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for team in (team_a, team_b):
            most[team.ns] = max(most[team.ns], len(admitted_jobs(team)))
        for i in range(3):
            cond = team_a.condition(f"a{i}", "Succeeded")
            if cond.get("reason") == "Suspended":
                held_messages.add(cond["message"])
        finished = [
            team.condition(n, "Succeeded").get("status") in ("True", "False")
            for team, prefix in ((team_a, "a"), (team_b, "b"))
            for n in (f"{prefix}{i}" for i in range(3))
        ]
        if all(finished):
            break
        time.sleep(0.2)
    for team, prefix in ((team_a, "a"), (team_b, "b")):
        for i in range(3):
            assert team.status(f"{prefix}{i}")["phase"] == "Succeeded", team.status(f"{prefix}{i}")
    assert most == {team_a.ns: 1, team_b.ns: 3}, most
    print("\n".join(sorted(held_messages)))
    expected = f'attempt 1/1 waits for its queue to admit it: LocalQueue "team-a" (ClusterQueue "{cq_a}"'
    short = [m for m in held_messages if m.startswith(expected) and "insufficient unused quota for pods" in m]
    assert short, held_messages


def test_a_queued_run_cancelled_or_deleted_leaves_no_job_and_no_workload(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    closed = cluster_queue(cluster_objects, flavor, pods=0)
    local_queue(custom, api.ns, "closed", closed)
    slow(api, images)
    for name in ("cancelled", "deleted"):
        api.create(queued_run(name, "closed"))
    for name in ("cancelled", "deleted"):
        wait_until(lambda n=name: workloads(api, f"{n}-a1"), timeout=60, what=f"{name}'s Workload")
        wait_until(
            lambda n=name: "insufficient" in api.condition(n, "Succeeded").get("message", ""),
            timeout=30,
            what=f"{name} to say why it waits",
        )
    cancel = {"spec": {"cancel": True}}
    api.custom.patch_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "cancelled", cancel)
    status = api.wait_finished("cancelled", timeout=60)
    assert (status["phase"], status["reason"]) == ("Cancelled", "Cancelled"), status
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns", "deleted")
    for name in ("cancelled", "deleted"):
        wait_until(lambda n=name: not api.jobs(n), timeout=60, what=f"{name}'s Job to go")
        wait_until(lambda n=name: not workloads(api, f"{n}-a1"), timeout=60, what=f"{name}'s Workload to go")


def test_the_time_limit_does_not_count_while_kueue_holds_the_run(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    one = cluster_queue(cluster_objects, flavor, pods=1)
    local_queue(custom, api.ns, "one", one)
    slow(api, images, "long", turns=10)
    slow(api, images, "short", turns=2)
    api.create(queued_run("blocker", "one", "long"))
    wait_until(lambda: admitted_jobs(api) == {"blocker-a1"}, timeout=60, what="the blocker to run")
    api.create(queued_run("timed", "one", "short", limits={"timeoutSeconds": 6}))
    status = api.wait_finished("timed", timeout=120)
    assert status["phase"] == "Succeeded", status
    job = api.batch.read_namespaced_job("timed-a1", api.ns)
    created, started = job.metadata.creation_timestamp, job.status.start_time
    held = (started - created).total_seconds()
    # Held longer than its time limit, yet it succeeded: the runner's timer starts with the runner, and
    # the Job's deadline (activeDeadlineSeconds) counts from its start, which the Job controller set when
    # Kueue admitted it.
    assert held > 6, (created, started)
    assert status["attempts"][0]["exitCode"] == 0, status["attempts"]


def preempting_queue(
    api: Api,
    custom: client.CustomObjectsApi,
    make: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> dict[str, str]:
    """LocalQueue "shared" of one pod whose ClusterQueue preempts lower priorities; the names of the
    WorkloadPriorityClasses "low" and "high"."""
    classes = {
        name: make(
            "workloadpriorityclasses",
            {"kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
        for name, value in (("low", 10), ("high", 1000))
    }
    preempting = cluster_queue(make, flavor, pods=1, preemption={"withinClusterQueue": "LowerPriority"})
    local_queue(custom, api.ns, "shared", preempting)
    return classes


def test_a_preempted_attempt_ends_its_job_goes_and_its_retry_queues_again(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    classes = preempting_queue(api, custom, cluster_objects, flavor)
    slow(api, images, "long", turns=20)
    slow(api, images, "short", turns=2)
    low = queued_run("low", "shared", "long", retry={"limit": 1, "backoffSeconds": 1})
    low["metadata"]["labels"][PRIORITY_LABEL] = classes["low"]
    api.create(low)
    pods_of_first: set[str] = set()

    def first_runs() -> bool:
        pods = api.core.list_namespaced_pod(
            api.ns, label_selector="batch.kubernetes.io/job-name=low-a1"
        ).items
        pods_of_first.update(p.metadata.name for p in pods)
        return any(p.status.phase == "Running" for p in pods)

    wait_until(first_runs, timeout=90, what="low's first attempt to run")
    high = queued_run("high", "shared", "short")
    high["metadata"]["labels"][PRIORITY_LABEL] = classes["high"]
    api.create(high)
    until = time.monotonic() + 180
    while (
        api.condition("low", "Succeeded").get("status") not in ("True", "False") and time.monotonic() < until
    ):
        first_runs()
        time.sleep(0.2)
    status = api.status("low")
    assert status["phase"] == "Succeeded", status
    first, second = status["attempts"]
    assert (first["reason"], first["exitCode"]) == ("Preempted", 1), first
    taken_back = ("Kueue evicted Workload job-low-a1-", "Kueue suspended Job low-a1 again after its pod")
    assert first["message"].startswith(taken_back), first
    assert second.get("exitCode") == 0, second
    assert api.status("high")["phase"] == "Succeeded"
    assert len(pods_of_first) == 1, pods_of_first  # attempt 1 never got a second pod
    with pytest.raises(ApiException) as gone:
        api.batch.read_namespaced_job("low-a1", api.ns)
    assert gone.value.status == 404
    started = [datetime.fromisoformat(a["startTime"]) for a in (first, second)]
    high_start = datetime.fromisoformat(api.status("high")["attempts"][0]["startTime"])
    assert started[0] < high_start <= started[1]  # the retry queued behind the run that preempted it
    assert first["message"] in api.events("low")  # the Warning Event Preempted


def test_a_run_its_budget_holds_never_reaches_kueue(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    open_queue = cluster_queue(cluster_objects, flavor, pods=5)
    local_queue(custom, api.ns, "open", open_queue)
    slow(api, images, turns=1)
    budget = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessBudget",
        "metadata": {"name": "one"},
        "spec": {"period": "daily", "limits": {"maxRuns": 1}},
    }
    api.custom.create_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessbudgets", budget)

    def budget_status() -> dict[str, Any]:
        body = api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessbudgets", "one")
        return body.get("status") or {}

    wait_until(lambda: budget_status().get("periodEnd"), timeout=30, what="budget status")
    api.create(queued_run("first", "open"))
    assert api.wait_finished("first")["phase"] == "Succeeded"
    api.create(queued_run("held", "open"))
    wait_until(
        lambda: api.condition("held", "Succeeded").get("reason") == "BudgetExhausted", timeout=30, what="held"
    )
    time.sleep(2)  # time enough for a Job and its Workload, were any made
    assert api.jobs("held") == []
    assert workloads(api, "held-a1") == []


def test_a_run_naming_no_queue_goes_to_its_namespaces_default_local_queue(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    one = cluster_queue(cluster_objects, flavor, pods=1)
    local_queue(custom, api.ns, "default", one)
    slow(api, images, turns=2)
    for name in ("first", "second"):
        api.create(run_body(name, {"provider": "slow", "prompt": "p"}))  # no queue label
    most = 0
    until = time.monotonic() + 120
    while time.monotonic() < until:
        most = max(most, len(admitted_jobs(api)))
        if all(api.condition(n, "Succeeded").get("status") in ("True", "False") for n in ("first", "second")):
            break
        time.sleep(0.2)
    for name in ("first", "second"):
        assert api.status(name)["phase"] == "Succeeded", api.status(name)
        (job,) = api.jobs(name)
        assert job.metadata.labels[QUEUE_LABEL] == "default"
    assert most == 1  # Kueue's quota of one pod, not the operator's limit of two


def test_an_attempt_evicted_while_the_operator_is_down_ends_preempted_once_it_is_back(
    api: Api,
    images: dict[str, str],
    custom: client.CustomObjectsApi,
    operator: OperatorProcess,
    cluster_objects: Callable[[str, dict[str, Any]], str],
    flavor: str,
) -> None:
    """Kueue evicts a running attempt (its Workload deactivated, as `kubectl patch` would) while no
    operator runs: the Workload's record of the eviction tells the restarted operator, whose pod is
    already gone."""
    one = cluster_queue(cluster_objects, flavor, pods=1)
    local_queue(custom, api.ns, "one", one)
    slow(api, images, "long", turns=20)
    api.create(queued_run("evicted", "one", "long"))
    wait_until(lambda: api.status("evicted").get("phase") == "Running", timeout=90, what="the run to run")
    operator.kill()
    try:
        (workload,) = workloads(api, "evicted-a1")
        name = workload["metadata"]["name"]
        custom.patch_namespaced_custom_object(*KUEUE, api.ns, "workloads", name, {"spec": {"active": False}})
        wait_until(
            lambda: api.batch.read_namespaced_job("evicted-a1", api.ns).spec.suspend,
            timeout=60,
            what="its Job suspended",
        )
        selector = "batch.kubernetes.io/job-name=evicted-a1"
        wait_until(
            lambda: not api.core.list_namespaced_pod(api.ns, label_selector=selector).items,
            timeout=60,
            what="its pod to go",
        )
    finally:
        operator.start()
    status = api.wait_finished("evicted", timeout=60)
    assert (status["phase"], status["reason"]) == ("Failed", "Preempted"), status
    assert status["attempts"][0]["message"].startswith(f"Kueue evicted Workload {name}"), status
    wait_until(lambda: not api.jobs("evicted"), timeout=30, what="its Job to go")
