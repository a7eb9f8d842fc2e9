"""Pipelines' reconciler: applies what core/pipeline/decide.py decides (create a step's runs as the
pipeline's ServiceAccount, cancel runs, post Events, write the status)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime

import structlog
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import HarnessPipeline
from harness_operator.contract.structured_output import pick_field
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.core.objects.ownership import controller_uid
from harness_operator.core.pipeline.decide import build_created_event, decide_pipeline
from harness_operator.core.pipeline.runs import Field, StepRun
from harness_operator.core.resolve.resolution import NotTheOutput, Unreadable

log = structlog.get_logger("harness_operator")
LOCK_STRIPES = 16
REFUSALS = (400, 403, 422)  # the API server's word on the run: kept as the step's failure

StepRuns = Callable[[str, str], list[StepRun]]  # (namespace, pipeline uid) -> the runs it controls


def _refusal(exc: ApiException, run: str, service_account: str, namespace: str) -> str:
    try:
        message = str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        message = str(exc.reason)
    if "impersonate" in message:
        return (
            f"run {run} not created: the operator may not act as ServiceAccount "
            f"{namespace}/{service_account}; bind it a Role with verb impersonate on that serviceaccount "
            "(README: Pipelines)"
        )
    return f"run {run} not created: {message}"


class PipelineReconciler:
    """One pipeline at a time (striped locks): the pipeline read fresh, its runs from the watch index."""

    def __init__(self, kube: Kube, clock: Callable[[], datetime], runs: StepRuns) -> None:
        self.kube = kube
        self.clock = clock
        self.runs = runs
        self._locks = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def _read(self, namespace: str, run: str, path: str | None) -> str | None:
        """One field (or, path None, all) of a succeeded run's output, read as a chained run reads it: only
        the ConfigMap the run owns and reports; None when it cannot be read or has no such field."""
        reader = KubeReader(self.kube)
        body = reader.run(namespace, run)
        try:
            output = reader.run_output(body) if body is not None else None
            return pick_field(output, path) if output is not None and path else output
        except (NotTheOutput, Unreadable, KeyError, ValueError):
            return None

    def reconcile(self, namespace: str, name: str) -> None:
        """Start the steps that may start, cancel on spec.cancel, and write the status on change."""
        with self._locks[hash((namespace, name)) % LOCK_STRIPES]:
            raw = self.kube.fetch_pipeline(namespace, name)
            if raw is None or raw["metadata"].get("deletionTimestamp"):
                return
            try:
                pipeline = HarnessPipeline.model_validate(raw)
            except ValidationError as exc:  # the CRD's schema keeps these out; an old object is skipped
                log.warning("Pipeline not readable", pipeline=f"{namespace}/{name}", error=str(exc))
                return
            uid = str(raw["metadata"].get("uid", ""))
            runs = self.runs(namespace, uid)
            now = self.clock()
            decision = decide_pipeline(pipeline, runs, now)
            fields: dict[Field, str | None] = {}
            if decision.needs:  # a workspaceFrom names its run by an output: read, then decide again
                fields = {field: self._read(namespace, *field) for field in decision.needs}
                decision = decide_pipeline(pipeline, runs, now, fields=fields)
            account = pipeline.spec.service_account_name
            events, refused = list(decision.events), {}
            for step, run in decision.create:
                run_name = run["metadata"]["name"]
                if step in refused:
                    continue
                try:
                    existing = self.kube.create_run_as(account, run)
                except ApiException as exc:
                    if exc.status not in REFUSALS:
                        raise
                    refused[step] = _refusal(exc, run_name, account, namespace)
                    continue
                if existing is None:
                    events.append(build_created_event(step, run_name))
                elif controller_uid(existing) != uid:
                    refused[step] = (
                        f"run {run_name} exists and is not this pipeline's; delete or rename it, then "
                        "create the pipeline again"
                    )
            if refused:
                decision = decide_pipeline(pipeline, runs, now, refused, fields)
                events += [e for e in decision.events if e not in events]
            for run_name in decision.cancel:
                self.kube.cancel(namespace, run_name)
            for event in events:
                self.kube.create_event(raw, event.type, event.reason, event.message, event.name)
            status = decision.status.to_api()
            old = raw.get("status") or {}
            if old != status:
                patch = {**{key: None for key in old if key not in status}, **status}
                self.kube.patch_pipeline_status(namespace, name, patch)
