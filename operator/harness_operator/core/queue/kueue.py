"""Handing a run's Jobs to Kueue (pure): a run labelled with a queue gets suspended Jobs Kueue admits.

Kueue makes a Workload for each such Job (owned by it) and says there why it waits: the LocalQueue's
ClusterQueue and the quota that is short. The operator reads those (slim copies from its watch of
Workloads and LocalQueues) to explain the wait, and to see that Kueue took back an attempt that had
started (preemption, eviction): that attempt ends there, and its Job goes before Kueue can admit it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.objects.naming import KUEUE_QUEUE_LABEL

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOAD_KIND, LOCAL_QUEUE_KIND = "Workload", "LocalQueue"
# Kueue's convention: a namespace's LocalQueue of this name takes its Jobs that name none.
DEFAULT_LOCAL_QUEUE = "default"
# Kueue's MultiKueue controller: the Job's spec.managedBy it sets when the Job's ClusterQueue dispatches to
# other clusters, and the controllerName of that ClusterQueue's AdmissionCheck.
MULTIKUEUE_MANAGER = "kueue.x-k8s.io/multikueue"
KUEUE_PLURALS = {WORKLOAD_KIND: "workloads", LOCAL_QUEUE_KIND: "localqueues"}


def queue_of(run: HarnessRun) -> str | None:
    """The Kueue LocalQueue the run's label names, if any."""
    return run.metadata.get("labels", {}).get(KUEUE_QUEUE_LABEL) or None


def resolve_queue(run: HarnessRun, chart_default: str, namespace_default: bool) -> str | None:
    """The LocalQueue a run's Jobs go to: its label, else the operator's default (the chart's
    kueue.defaultQueueName), else its namespace's LocalQueue "default" when there is one; None: no Kueue."""
    return queue_of(run) or chart_default or (DEFAULT_LOCAL_QUEUE if namespace_default else None)


def is_kueue_managed(labels: Mapping[str, Any] | None) -> bool:
    """A run or Job whose labels name a Kueue queue: Kueue, not the namespace's slots, says when it runs."""
    return bool((labels or {}).get(KUEUE_QUEUE_LABEL))


def describe_missing_kueue(queue: str, labelled: bool = True) -> str:
    """Why a run whose Jobs go to `queue` (named by its label, else the operator's default) cannot start
    on a cluster that serves no Kueue API."""
    if labelled:
        where, fix = f'metadata.labels["{KUEUE_QUEUE_LABEL}"] names', "or remove the label"
    else:
        where, fix = "the operator's default queue (chart value kueue.defaultQueueName) is", "or unset it"
    return (
        f'{where} the queue "{queue}", but this cluster serves no Kueue API ({KUEUE_GROUP}/{KUEUE_VERSION}): '
        f"its Job would wait suspended forever; install Kueue, {fix}"
    )


def slim_workload(workload: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator reads of a Workload: its owning Job, queue, conditions, admission, evictions, and
    the worker cluster MultiKueue admitted it on."""
    meta = workload.get("metadata") or {}
    owner = next(
        (o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job" and o.get("controller")),
        None,
    )
    status = workload.get("status") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
    ]
    checks = [
        {k: c[k] for k in ("name", "state", "message") if k in c} for c in status.get("admissionChecks") or []
    ]
    stats = status.get("schedulingStats") or {}
    evictions = sum(int(e.get("count") or 0) for e in stats.get("evictions") or [])
    return {
        "kind": WORKLOAD_KIND,
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "job": owner.get("name") if owner else None,
            "jobUID": owner.get("uid") if owner else None,
        },
        "spec": {"queueName": (workload.get("spec") or {}).get("queueName")},
        "status": {
            "conditions": conditions,
            "clusterQueue": (status.get("admission") or {}).get("clusterQueue"),
            "clusterName": status.get("clusterName"),
            "admissionChecks": checks,
            "evictions": evictions,
        },
    }


def slim_local_queue(queue: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator reads of a LocalQueue: its ClusterQueue. (Not its status: a LocalQueue's change
    reconciles no run, so its counts would be stale by the time a message showed them.)"""
    meta = queue.get("metadata") or {}
    return {
        "kind": LOCAL_QUEUE_KIND,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {"clusterQueue": (queue.get("spec") or {}).get("clusterQueue")},
    }


def _condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in workload["status"]["conditions"] if c.get("type") == type_), None)


def _is_true(workload: Mapping[str, Any], type_: str) -> bool:
    cond = _condition(workload, type_)
    return cond is not None and cond.get("status") == "True"


def describe_wait(
    queue: str, workload: Mapping[str, Any] | None, local_queue: Mapping[str, Any] | None
) -> str | None:
    """Why a Job Kueue holds waits, in Kueue's words: its LocalQueue and that queue's ClusterQueue, and the
    Workload's reason (the quota that is short, a queue that does not exist, the admission checks not yet
    ready). None while Kueue holds it as it holds every Job: no Workload yet, none judged yet, or quota
    reserved with nothing left to check (admitted: the Job starts); a status write says nothing then."""
    if workload is None:
        return None
    cond = _condition(workload, "QuotaReserved")
    if cond is None:
        return None
    where = f'LocalQueue "{queue}"'
    cluster_queue = local_queue["spec"].get("clusterQueue") if local_queue is not None else None
    if cluster_queue:
        where += f' (ClusterQueue "{cluster_queue}")'
    if cond.get("status") == "True":
        pending = [c for c in workload["status"].get("admissionChecks") or [] if c.get("state") != "Ready"]
        if not pending or _is_true(workload, "Admitted"):
            return None
        checks = "; ".join(
            f"{c.get('name')} {c.get('state')}: {c.get('message') or 'no message'}" for c in pending
        )
        reserved = f'quota reserved in ClusterQueue "{workload["status"].get("clusterQueue")}"'
        return f"{where}: {reserved}, waiting for admission checks: {checks}"
    return f"{where}: {cond.get('message') or 'waiting for Kueue to reserve quota'}"


def is_inadmissible(workload: Mapping[str, Any] | None) -> bool:
    """Kueue will not admit the Workload as things are (an inactive LocalQueue or ClusterQueue), as
    opposed to waiting for quota."""
    cond = _condition(workload, "QuotaReserved") if workload is not None else None
    return cond is not None and cond.get("status") == "False" and cond.get("reason") == "Inadmissible"


def _inactive_because(obj: Mapping[str, Any] | None) -> str | None:
    """The message of a Kueue object's Active=False condition; None when it is active (or absent)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "inactive")
    return None


def admission_check_names(cluster_queue: Mapping[str, Any]) -> list[str]:
    """The admission checks a ClusterQueue names (either of its two fields)."""
    spec = cluster_queue.get("spec") or {}
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    named = [str(c["name"]) for c in strategy if c.get("name")]
    return named + [str(n) for n in spec.get("admissionChecks") or []]


def multikueue_config_name(check: Mapping[str, Any]) -> str | None:
    """The MultiKueueConfig a MultiKueue AdmissionCheck names; None for another controller's check."""
    spec = check.get("spec") or {}
    params = spec.get("parameters") or {}
    if spec.get("controllerName") != MULTIKUEUE_MANAGER or params.get("kind") != "MultiKueueConfig":
        return None
    return str(params.get("name") or "") or None


def describe_inactive(
    cluster_queue: Mapping[str, Any] | None,
    checks: Sequence[Mapping[str, Any]],
    workers: Sequence[Mapping[str, Any]],
) -> str | None:
    """Why a ClusterQueue admits nothing, down to the inactive admission checks and, for MultiKueue, the
    worker clusters Kueue cannot reach (their MultiKueueClusters' own words); None when it is active."""
    why = _inactive_because(cluster_queue)
    if cluster_queue is None or why is None:
        return None
    parts = [f'ClusterQueue "{cluster_queue["metadata"]["name"]}": {why}']
    for obj, kind in [*((c, "AdmissionCheck") for c in checks), *((w, "MultiKueueCluster") for w in workers)]:
        detail = _inactive_because(obj)
        if detail is not None:
            parts.append(f'{kind} "{obj["metadata"]["name"]}": {detail}')
    return "; ".join(parts)


def describe_eviction(workload: Mapping[str, Any] | None) -> str | None:
    """Kueue took the Workload back after it had been admitted (preempted, evicted, deactivated): why; None
    when it did not."""
    if workload is None:
        return None
    cond = _condition(workload, "Evicted")
    if cond is not None and cond.get("status") == "True":
        name = workload["metadata"]["name"]
        return f"Kueue evicted Workload {name} ({cond.get('reason')}): {cond.get('message')}"
    if workload["status"].get("evictions"):
        return f"Kueue evicted Workload {workload['metadata']['name']} after admitting it"
    return None
