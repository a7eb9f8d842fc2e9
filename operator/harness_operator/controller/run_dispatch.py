"""Dispatching to MultiKueue's worker clusters (I/O): an attempt whose Job Kueue dispatched is followed on
its worker (its copy of the Job, the pods there), and what the copy's pod needs is written there once the
copy is proven MultiKueue's copy of this very Job."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.kube import Kube
from harness_operator.controller.run_observe import observe_job
from harness_operator.controller.workers import Worker, Workers
from harness_operator.core.access.egress import ROUTE_GATEWAY
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import KUEUE_QUEUE_LABEL, plan_secret_name, resume_secret_name
from harness_operator.core.objects.ownership import is_owned_child
from harness_operator.core.pod.network_policy import build_fqdn_policy, build_network_policy
from harness_operator.core.pod.workspace import build_workspace_claim
from harness_operator.core.queue.multikueue import (
    check_remote_copy,
    describe_gateways_elsewhere,
    describe_missing_secret,
    describe_remote_wait,
    describe_unknown_worker,
    describe_unreachable,
    dispatched_cluster,
    find_missing_secret,
)
from harness_operator.core.resolve.resolution import RunFailure
from harness_operator.core.status.observed import FINISHED, SUSPENDED, ObservedAttempt
from harness_operator.core.status.results import credentials_missing_result, queue_unavailable_result


class RunDispatcher:
    """The run's attempts on the worker clusters (`workers`); `kube` is this cluster's client."""

    def __init__(self, kube: Kube, config: OperatorConfig, workers: Workers) -> None:
        self.kube, self.config, self.workers = kube, config, workers

    def observe(
        self,
        run: HarnessRun,
        target: Attempt,
        index: int,
        job: dict[str, Any],
        workload: dict[str, Any] | None,
        local_queue: dict[str, Any] | None,
    ) -> ObservedAttempt:
        """An attempt whose Job MultiKueue dispatches (core/queue/multikueue): until a worker admits it, its
        Job here shows why it waits; then its copy on that worker, and the pods there, are the attempt. What
        the copy's pod needs is written there first."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        provider, job_name_ = target.provider, job["metadata"]["name"]
        cluster = dispatched_cluster(workload)
        if cluster is None or workload is None:  # not admitted by a worker yet (or evicted from it)
            return observe_job(self.kube, run, provider, index, job, [], workload, local_queue)
        queue = str(job["metadata"]["labels"].get(KUEUE_QUEUE_LABEL) or "")
        worker = self.workers.get(cluster)
        if worker is None:
            why = describe_unknown_worker(queue, job_name_, cluster, self.workers.names)
            result = queue_unavailable_result(index, provider, why)
            return ObservedAttempt(index, provider, job_name_, None, FINISHED, result=result, withdrawn=True)
        waiting = ObservedAttempt(index, provider, job_name_, None, SUSPENDED, cluster=cluster)
        if not worker.children.synced():
            return replace(waiting, waiting=describe_unreachable(cluster, job_name_))
        remote = worker.job(ns, name, job_name_)
        if remote is None:
            return replace(waiting, waiting=describe_remote_wait(cluster, job_name_, False))
        problem = self._prepare_remote(run, target, job, remote, workload, worker)
        if problem is not None:
            raise RunFailure(Reason.ChildConflict, problem)
        pods = [p for p in worker.pods(ns, name) if is_owned_child(p, remote["metadata"]["uid"])]
        missing = find_missing_secret(pods)
        if missing is not None:  # the platform's to provide there: the attempt ends, and its Job goes
            pod_name, kubelet = missing
            why = describe_missing_secret(cluster, ns, job_name_, kubelet)
            result = credentials_missing_result(index, provider, why)
            return ObservedAttempt(
                index, provider, job_name_, pod_name, FINISHED, result=result, withdrawn=True, cluster=cluster
            )
        attempt = observe_job(worker.kube, run, provider, index, remote, pods)
        if attempt.state == SUSPENDED:
            attempt = replace(attempt, waiting=describe_remote_wait(cluster, job_name_, True))
        return replace(attempt, cluster=cluster)

    def _prepare_remote(
        self,
        run: HarnessRun,
        target: Attempt,
        job: dict[str, Any],
        remote: dict[str, Any],
        workload: dict[str, Any],
        worker: Worker,
    ) -> str | None:
        """Write on `worker` what the pod of `remote` (its copy of `job`) needs, once it is verified as
        MultiKueue's copy of this very Job; why not, when it is not. Read and written once per copy."""
        if worker.is_prepared(remote["metadata"]["uid"]):
            return None
        ns, name = run.metadata["namespace"], run.metadata["name"]
        local_full = self.kube.fetch_job(ns, job["metadata"]["name"])
        remote_full = worker.kube.fetch_job(ns, remote["metadata"]["name"])
        if local_full is None or remote_full is None:
            return None  # on its way out: its deletion is the next event
        problem = check_remote_copy(local_full, remote_full, workload["metadata"]["name"], worker.name)
        if problem is not None:
            return problem
        children = [
            build_workspace_claim(run, target.provider),
            build_network_policy(run, target, self.config),
            build_fqdn_policy(run, target, self.config),
            self.kube.fetch_secret(ns, plan_secret_name(name)),
            self.kube.fetch_secret(ns, resume_secret_name(name)),
        ]
        problem = worker.prepare(remote_full, [c for c in children if c is not None])
        if problem is not None:
            return problem
        model = target.model_route is not None
        egress = target.route == ROUTE_GATEWAY
        warning = describe_gateways_elsewhere(target.index, worker.name, model, egress)
        if warning is not None:
            self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.GatewayNotOnWorker, warning)
        return None

    def release(self, namespace: str, name: str, jobs: dict[str, set[str]] | None = None) -> None:
        """Let go of the run's Jobs on the workers (`jobs`: by worker, only those names), whose results
        are read."""
        self.workers.release(namespace, name, jobs)
