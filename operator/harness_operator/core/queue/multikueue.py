"""Attempts MultiKueue runs on a worker cluster (pure).

A Job whose ClusterQueue has a MultiKueue admission check is marked `spec.managedBy:
kueue.x-k8s.io/multikueue`; once a worker admits its Workload, Kueue names that worker in the Workload's
`status.clusterName` and creates a copy of the Job there (same namespace and name, labelled with the
Workload's name), and copies that Job's status back. It copies nothing else. So the operator, given a
kubeconfig for each worker (the chart's multiKueue.workers), puts on the worker what the copy's pod
needs of the run (its NetworkPolicy, plan Secret and run-scoped claim, each owned by the copy), holds the
copy with a finalizer until it has read the attempt's result from the worker's pod, and reads that pod as
it reads its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_operator.api.v1alpha1 import GROUP
from harness_operator.core.queue.kueue import MULTIKUEUE_MANAGER

# Held on a worker's copy of a Job until the operator has read its pod: Kueue deletes the copy as soon as
# the Job here finishes, and the pod's log (the output) would go with it.
RESULT_FINALIZER = f"{GROUP}/result"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
# What of a Job's pod a copy must have as the original does (the spec Kueue copies, as the operator built it).
POD_FIELDS = ("containers", "initContainers", "volumes", "securityContext", "automountServiceAccountToken")


def is_dispatched(job: Mapping[str, Any]) -> bool:
    """Kueue dispatches this Job to a worker cluster (its ClusterQueue has a MultiKueue admission check)."""
    return (job.get("spec") or {}).get("managedBy") == MULTIKUEUE_MANAGER


def dispatched_cluster(workload: Mapping[str, Any] | None) -> str | None:
    """The worker a dispatched Job's Workload was admitted on (MultiKueueCluster name); None: not yet."""
    if workload is None:
        return None
    return workload["status"].get("clusterName") or None


def check_remote_copy(
    local_job: Mapping[str, Any], remote_job: Mapping[str, Any], workload: str, cluster: str
) -> str | None:
    """Why `remote_job` (on worker `cluster`) is not Kueue's copy of `local_job`, whose Workload is
    `workload`; None when it is. A Job of that name someone else made on the worker is never trusted
    with the run's plan, nor its pod's report with the run's result."""
    not_copy = (
        f'Job {local_job["metadata"]["name"]} on worker cluster "{cluster}" is not MultiKueue\'s copy of '
        "this run's Job"
    )
    labels = remote_job["metadata"].get("labels") or {}
    if labels.get(PREBUILT_WORKLOAD_LABEL) != workload or not labels.get(ORIGIN_LABEL):
        found = labels.get(PREBUILT_WORKLOAD_LABEL, "")
        return f'{not_copy}: its label {PREBUILT_WORKLOAD_LABEL} is "{found}", not "{workload}"'
    local_pod = (local_job.get("spec") or {}).get("template", {}).get("spec") or {}
    remote_pod = (remote_job.get("spec") or {}).get("template", {}).get("spec") or {}
    differ = [f for f in POD_FIELDS if local_pod.get(f) != remote_pod.get(f)]
    if differ:
        return f"{not_copy}: its pod template differs in {', '.join(differ)}"
    return None


def build_remote_child(child: Mapping[str, Any], remote_job: Mapping[str, Any]) -> dict[str, Any]:
    """`child` (a Secret, NetworkPolicy or claim the run's Job needs, as built or read here) as the worker
    holds it: the same name, content and labels, owned by the worker's copy of the Job (so it goes with
    that copy), and nothing the API server wrote. A shared claim (owned by no run) stays unowned."""
    meta = child["metadata"]
    remote = remote_job["metadata"]
    out_meta: dict[str, Any] = {
        key: meta[key] for key in ("name", "namespace", "labels", "annotations") if meta.get(key)
    }
    if meta.get("ownerReferences"):
        out_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": remote["name"],
                "uid": remote["uid"],
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ]
    body = {k: v for k, v in child.items() if k in ("apiVersion", "kind", "type", "data", "spec")}
    if body.get("kind") == "Secret":
        body["apiVersion"] = "v1"
    return {**body, "metadata": out_meta}


def find_missing_secret(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(the pod, the kubelet's words) when a pod cannot start its containers for a Secret (or a key) it
    references that the worker does not hold (CreateContainerConfigError); None otherwise. The run's own
    plan Secret is a volume the pod waits for, so this is a credential the platform must provide there."""
    for pod in pods:
        status = pod.get("status") or {}
        for kind in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(kind) or []:
                waiting = (container.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") == "CreateContainerConfigError":
                    message = str(waiting.get("message") or "CreateContainerConfigError")
                    return str(pod["metadata"]["name"]), message
    return None


def describe_missing_secret(cluster: str, namespace: str, job: str, kubelet: str) -> str:
    """Why a dispatched attempt ends when its pod cannot start on the worker for a missing Secret."""
    return (
        f'the pod of Job {job} cannot start on worker cluster "{cluster}": {kubelet}. The Secrets a run\'s '
        f'definitions grant must exist in namespace "{namespace}" on every worker its queue dispatches to '
        "(docs/kueue.md)"
    )


def describe_gateways_elsewhere(index: int, cluster: str, model: bool, egress: bool) -> str | None:
    """Why a dispatched attempt routed through this cluster's gateways may not reach them from its worker;
    None when it is routed through neither."""
    gateways = [g for g, routed in (("model gateway", model), ("egress gateway", egress)) if routed]
    if not gateways:
        return None
    return (
        f'attempt {index} runs on worker cluster "{cluster}" (MultiKueue) but is routed through the '
        f"{' and the '.join(gateways)}, Services of this cluster: its pod there reaches them only where the "
        "platform makes them reachable from the workers' pods (docs/kueue.md)"
    )


def has_result_finalizer(job: Mapping[str, Any]) -> bool:
    return RESULT_FINALIZER in (job["metadata"].get("finalizers") or [])


def describe_unknown_worker(queue: str, job: str, cluster: str, known: Sequence[str]) -> str:
    """Why an attempt MultiKueue dispatched to a worker the operator has no kubeconfig for cannot run."""
    have = ", ".join(f'"{k}"' for k in sorted(known)) or "none"
    return (
        f'LocalQueue "{queue}" dispatched Job {job} to worker cluster "{cluster}" (MultiKueue), which the '
        f"operator cannot reach: its pod there needs the run's plan Secret and NetworkPolicy, which the "
        f"operator writes. Give the operator that worker's kubeconfig (chart value multiKueue.workers; it "
        f"has {have}) (docs/kueue.md)"
    )


def describe_unreachable(cluster: str, job: str) -> str:
    """Why a dispatched attempt shows nothing of its worker yet: the operator's watch there has not listed."""
    return (
        f'Job {job} was dispatched to worker cluster "{cluster}" (MultiKueue), whose API server the operator '
        "has not reached yet (its log says why); the attempt goes on once it does"
    )


def describe_remote_wait(cluster: str, job: str, remote_exists: bool) -> str:
    """Why a dispatched attempt has no pod on its worker yet."""
    if not remote_exists:
        return f'admitted on worker cluster "{cluster}" (MultiKueue); its copy of Job {job} is not there yet'
    return f'dispatched to worker cluster "{cluster}" (MultiKueue); Job {job} waits for that cluster\'s Kueue'
