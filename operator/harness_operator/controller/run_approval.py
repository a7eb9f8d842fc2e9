"""A run whose change awaits approval (I/O, orchestration only): no attempt's pod left, the decision and
the deadline weighed (core/status/approval.py, pure), the approved change's publish Job created and its
publisher's report read."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import parse_report
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kube import Kube
from harness_operator.controller.run_start import create_child
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import LABEL_ATTEMPT, PUBLISH_CONTAINER, publish_job_name
from harness_operator.core.objects.ownership import is_owned_child
from harness_operator.core.pod.kept_publish import build_publish_job
from harness_operator.core.resolve.resolution import RunFailure
from harness_operator.core.status.approval import ApprovalStep, PublishPod, compute_approval_step
from harness_operator.core.status.observed import is_job_finished
from harness_operator.core.status.results import container_state


class RunApprovals:
    """Takes a run awaiting approval one step at a time; reconcile.py writes the status it returns."""

    def __init__(
        self, kube: Kube, config: OperatorConfig, clock: Callable[[], datetime], children: ChildStore
    ) -> None:
        self.kube, self.config, self.clock, self.children = kube, config, clock, children

    def step(self, run: HarnessRun, targets: list[Attempt]) -> ApprovalStep:
        """Delete the attempts' Jobs (their output and patch are kept in the run's ConfigMaps already),
        then take the run's next step: the publish Job created or deleted as it says."""
        ns, name, uid = run.metadata["namespace"], run.metadata["name"], run.metadata["uid"]
        jobs = [j for j in self.children.children("Job", ns, name) if is_owned_child(j, uid)]
        for job in jobs:
            if LABEL_ATTEMPT in (job["metadata"].get("labels") or {}):
                self.kube.delete_job(ns, job["metadata"]["name"], 0)
        publish_job = next((j for j in jobs if j["metadata"]["name"] == publish_job_name(name)), None)
        publish = self._observe_publish(ns, name, publish_job) if publish_job is not None else None
        step = compute_approval_step(run, publish, publish_job is not None, self.clock())
        if step.create_publish_job:
            attempts = run.status.attempts if run.status else []
            index = attempts[-1].index if attempts else 0
            if not 1 <= index <= len(targets):
                raise RunFailure(Reason.PublishLost, "the run records no attempt whose change was kept")
            desired = build_publish_job(run, targets[index - 1], self.config)
            if desired is None:
                raise RunFailure(
                    Reason.PublishLost,
                    "the run's status records no complete kept change (base, tree, patch sha256) or its spec "
                    "no branch to publish to: nothing is pushed",
                )
            create_child(self.kube, run, desired)
        if step.delete_publish_job:
            self.kube.delete_job(ns, publish_job_name(name), 0)
        return step

    def _observe_publish(self, namespace: str, run: str, job: dict[str, Any]) -> PublishPod:
        """The publish Job's end and its publisher's report (its pod read from the API server when the
        cache does not hold it yet: once per run)."""
        if not is_job_finished(job):
            return PublishPod(finished=False)
        uid = job["metadata"]["uid"]
        pods = [p for p in self.children.children("Pod", namespace, run) if is_owned_child(p, uid)]
        if not pods:
            pods = [p for p in self.kube.fetch_pods(namespace, run) if is_owned_child(p, uid)]
        for pod in pods:
            terminated = container_state(pod, PUBLISH_CONTAINER, "containerStatuses").get("terminated")
            if terminated:
                report = parse_report(str(terminated.get("message") or ""))
                return PublishPod(finished=True, report=report, terminated=dict(terminated))
        return PublishPod(finished=True, terminated={"reason": "the publish pod is gone"})
