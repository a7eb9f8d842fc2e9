"""Observing a run (I/O, reads only): its Jobs and the Pods they control, from the watch caches and, on
rare paths, the API server, into ObservedAttempts merged with the attempts its status records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kube import Kube
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import KUEUE_QUEUE_LABEL, LABEL_ATTEMPT, job_name
from harness_operator.core.objects.ownership import describe_conflict, is_owned_child
from harness_operator.core.pod.job import build_job
from harness_operator.core.queue.kueue import (
    admission_check_names,
    describe_inactive,
    is_inadmissible,
    is_kueue_managed,
    multikueue_config_name,
)
from harness_operator.core.queue.multikueue import is_dispatched
from harness_operator.core.resolve.resolution import RunFailure
from harness_operator.core.status.observed import (
    FINISHED,
    SUSPENDED,
    ObservedAttempt,
    merge_attempts,
    observe_attempt,
    recorded_attempts,
)


class DispatchedObserver(Protocol):
    """The attempts whose Job MultiKueue dispatches to a worker cluster (run_dispatch.RunDispatcher)."""

    def observe(
        self,
        run: HarnessRun,
        target: Attempt,
        index: int,
        job: dict[str, Any],
        workload: dict[str, Any] | None,
        local_queue: dict[str, Any] | None,
    ) -> ObservedAttempt: ...


class RunObserver:
    """A run's attempts as its Jobs and Pods show them."""

    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        clock: Callable[[], datetime],
        children: ChildStore,
        kueue: KueueStore,
        dispatched: DispatchedObserver,
    ) -> None:
        self.kube, self.config, self.clock = kube, config, clock
        self.children, self.kueue, self.dispatched = children, kueue, dispatched

    def observe_attempts(self, run: HarnessRun, targets: list[Attempt]) -> list[ObservedAttempt]:
        """The run's Jobs and the pods they control, merged with status.attempts[] (the durable record):
        an attempt recorded as started whose Job vanished is lost, never created again."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        jobs = self.children.children("Job", ns, name)
        pods = self.children.children("Pod", ns, name) if jobs else []
        seen = self._observe_jobs(run, targets, jobs, pods)
        recorded = recorded_attempts(run.status)
        # The watch cache may lag a create or a pod: an attempt is called lost only after the API server
        # itself says so (a GET of its Job, a LIST of the run's pods: reads on this rare path only).
        for record in recorded:
            if record.state != FINISHED and record.index not in seen and record.job_name:
                job = self.kube.fetch_job(ns, record.job_name)
                if job is not None:
                    seen.update(self._observe_jobs(run, targets, [job], self.kube.fetch_pods(ns, name)))
        lost = [i for i, a in seen.items() if a.result is not None and a.result.reason == Reason.JobLost]
        if lost:
            again = [j for j in jobs if j["metadata"]["name"] in {seen[i].job_name for i in lost}]
            seen.update(self._observe_jobs(run, targets, again, self.kube.fetch_pods(ns, name)))
        return merge_attempts(recorded, seen, run.spec.cancel, self.clock())

    def _observe_jobs(
        self,
        run: HarnessRun,
        targets: list[Attempt],
        jobs: list[dict[str, Any]],
        pods: list[dict[str, Any]],
    ) -> dict[int, ObservedAttempt]:
        """The attempts these Jobs (and the pods they control) show, by index; a Job holding an
        attempt's name that the run does not own fails the run (ChildConflict)."""
        name, uid = run.metadata["name"], run.metadata["uid"]
        seen: dict[int, ObservedAttempt] = {}
        for job in jobs:
            label = str((job["metadata"].get("labels") or {}).get(LABEL_ATTEMPT, ""))
            index = int(label) if label.isdigit() else 0  # labels are anyone's to write
            if not 1 <= index <= len(targets):
                continue
            if not is_owned_child(job, uid):
                if job["metadata"]["name"] == job_name(name, index):
                    desired = build_job(run, targets[index - 1], self.config)
                    raise RunFailure(Reason.ChildConflict, describe_conflict(job, desired, name))
                continue  # carries our labels but is not ours: not an attempt of this run
            workload, local_queue = self._kueue_view(job)
            if is_dispatched(job):
                target = targets[index - 1]
                seen[index] = self.dispatched.observe(run, target, index, job, workload, local_queue)
                continue
            mine = [p for p in pods if is_owned_child(p, job["metadata"]["uid"])]
            seen[index] = observe_job(
                self.kube, run, targets[index - 1].provider, index, job, mine, workload, local_queue
            )
        return seen

    def _kueue_view(self, job: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The Workload Kueue made for this very Job (its uid) and the LocalQueue the Job names; (None,
        None) for a Job Kueue does not manage."""
        meta = job["metadata"]
        if not is_kueue_managed(meta.get("labels")) or not self.kueue.watching:
            return None, None
        ns = meta["namespace"]
        workload = self.kueue.workload(ns, meta["name"])
        if workload is not None and workload["metadata"]["jobUID"] != meta.get("uid"):
            workload = None  # a Workload of an earlier Job of that name, on its way out
        return workload, self.kueue.local_queue(ns, meta["labels"][KUEUE_QUEUE_LABEL])


def observe_job(
    kube: Kube,
    run: HarnessRun,
    provider: str,
    index: int,
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    workload: dict[str, Any] | None = None,
    local_queue: dict[str, Any] | None = None,
) -> ObservedAttempt:
    """observe_attempt, with a Job Kueue seems to have taken back read again first (through `kube`, the
    client of the cluster it runs on): the Job's and the Pods' watches are apart, and a pod's creation can
    arrive before its Job's resumption (an attempt withdrawn is never run again; a read on this rare path
    only). A Job whose queue admits nothing (a LocalQueue of this cluster) says why, from the ClusterQueue
    down (explain_inactive)."""
    attempt = observe_attempt(index, provider, job, pods, run.spec.cancel, workload, local_queue)
    if attempt.state == SUSPENDED and is_inadmissible(workload) and local_queue is not None:
        why = explain_inactive(kube, str(local_queue["spec"].get("clusterQueue") or ""))
        return replace(attempt, waiting=f"{attempt.waiting} ({why})") if why else attempt
    if not attempt.withdrawn:
        return attempt
    fresh = kube.fetch_job(job["metadata"]["namespace"], job["metadata"]["name"])
    if fresh is None or fresh["metadata"].get("uid") != job["metadata"].get("uid"):
        return attempt
    return observe_attempt(index, provider, fresh, pods, run.spec.cancel, workload, local_queue)


def explain_inactive(kube: Kube, cluster_queue: str) -> str | None:
    """Why ClusterQueue `cluster_queue` admits nothing, from its admission checks and the MultiKueue
    worker clusters behind them (reads on this rare path only: a run waiting on an inactive queue)."""
    queue = kube.fetch_kueue_object("clusterqueues", cluster_queue) if cluster_queue else None
    if queue is None:
        return None
    checks = [kube.fetch_kueue_object("admissionchecks", n) for n in admission_check_names(queue)]
    found = [c for c in checks if c is not None]
    workers = []
    for check in found:
        config_name = multikueue_config_name(check)
        config = kube.fetch_kueue_object("multikueueconfigs", config_name) if config_name else None
        for name in ((config or {}).get("spec") or {}).get("clusters") or []:
            workers.append(kube.fetch_kueue_object("multikueueclusters", str(name)))
    return describe_inactive(queue, found, [w for w in workers if w is not None])
