"""One level-based reconcile per HarnessRun: fetch, build (pure), apply, compute status, write if changed.

Orchestration only: objects come from desired.py, status from status.py, I/O through kube.py.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from harness_operator import metrics
from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun, HarnessRunStatus, Protocol
from harness_operator.conditions import FALSE, SUCCEEDED, TRUE, find_condition, is_finished
from harness_operator.config import OperatorConfig
from harness_operator.desired import (
    AttemptTarget,
    build_job,
    build_network_policy,
    build_output_config_map,
    build_plan_secret,
    build_plans,
    build_workspace_claim,
    grace_period,
)
from harness_operator.kube import Kube
from harness_operator.naming import LABEL_ATTEMPT, LABEL_RUN, job_name, label_value, output_config_map_name
from harness_operator.reasons import ReasonedError
from harness_operator.runner.frame import FrameError, decode_frame
from harness_operator.runner.result import fallback_line
from harness_operator.status import (
    FINISHED,
    Observed,
    ObservedAttempt,
    compute_next_attempt,
    compute_status,
    find_succeeded,
    is_job_finished,
    observe_attempt,
)


class Rejection(ReasonedError):
    """The run cannot start: Accepted=False with this reason and message."""


class Waiting(ReasonedError):
    """The run cannot start yet: Succeeded=Unknown with this reason and message."""


def _now() -> datetime:
    return datetime.now(UTC)


class Reconciler:
    """Reconciles runs; one lock per run and one per namespace keep concurrent events from racing."""

    def __init__(self, kube: Kube, config: OperatorConfig, clock: Callable[[], datetime] = _now) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self._run_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._namespace_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._in_flight: set[tuple[str, str]] = set()

    # --- entry points --------------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """Bring one run forward; returns other runs to reconcile now (dependents and queued runs)."""
        with self._run_locks[(namespace, name)]:
            raw = self.kube.fetch_run(namespace, name)
            if raw is None:
                return []
            run = HarnessRun.model_validate(raw)
            if is_finished(run.status.conditions if run.status else []):
                return []
            status = self._reconcile_run(run)
            if status is None:
                return []
            just_finished = is_finished(status.conditions)
            if status.phase == "Running":
                self._in_flight.add((namespace, name))
            else:
                self._in_flight.discard((namespace, name))
            metrics.IN_FLIGHT.set(len(self._in_flight))
            if just_finished:
                metrics.record_finished(run, status)
        return self._runs_to_wake(namespace) if just_finished else []

    # --- the reconcile path --------------------------------------------------------------------------

    def _reconcile_run(self, run: HarnessRun) -> HarnessRunStatus | None:
        ns = run.metadata["namespace"]
        try:
            targets = self._resolve_targets(run)
        except Rejection as rejection:
            return self._write(run, Observed(providers=[], rejected=(rejection.reason, rejection.message)))
        providers = [t.provider for t in targets]
        attempts = self._observe_attempts(run, targets)
        cancelled = run.spec.cancel
        if cancelled:
            for attempt in attempts:
                if attempt.state != FINISHED and attempt.job_name:
                    self.kube.delete_job(ns, attempt.job_name, grace_period(run, self.config))
        output, output_cm = self._collect_output(run, attempts)
        observed = Observed(providers, attempts, output, output_cm, cancelled=cancelled)
        next_index = compute_next_attempt(observed)
        if next_index is None:
            return self._write(run, observed)
        try:
            queued = self._start_attempt(run, targets, next_index, attempts)
        except Rejection as rejection:
            return self._write(run, Observed(providers=[], rejected=(rejection.reason, rejection.message)))
        except Waiting as waiting:
            return self._write(run, Observed(providers=[], waiting=(waiting.reason, waiting.message)))
        if queued is not None:
            return self._write(run, Observed(providers, attempts, waiting=queued))
        started = ObservedAttempt(
            next_index, providers[next_index - 1], job_name(run.metadata["name"], next_index)
        )
        return self._write(run, Observed(providers, [*attempts, started], output, output_cm))

    def _write(self, run: HarnessRun, observed: Observed) -> HarnessRunStatus:
        status = compute_status(run, observed, self.clock())
        previous = run.status
        old, new = (previous.to_api() if previous else {}), status.to_api()
        if old != new:
            # A merge patch keeps keys it does not name: null out what the new status no longer has.
            patch = {**{key: None for key in old if key not in new}, **new}
            self.kube.patch_run_status(run.metadata["namespace"], run.metadata["name"], patch)
            self._emit_transition(run, previous, status)
        return status

    def _emit_transition(
        self, run: HarnessRun, previous: HarnessRunStatus | None, status: HarnessRunStatus
    ) -> None:
        before = (previous.reason if previous else None, previous.phase if previous else None)
        if before == (status.reason, status.phase):
            return
        failed = status.phase in ("Failed", "Cancelled") or status.reason == "FallingBack"
        self.kube.create_event(
            run.model_dump(by_alias=True),
            "Warning" if failed else "Normal",
            status.reason or "Updated",
            status.message or "",
        )

    # --- resolution ----------------------------------------------------------------------------------

    def _definition(self, namespace: str, provider: str) -> HarnessDefinitionSpec | None:
        raw = self.kube.fetch_definition(namespace, provider)
        if raw is None:
            return None
        try:
            return HarnessDefinitionSpec.model_validate(raw.get("spec") or {})
        except ValidationError as exc:
            raise Rejection(
                "InvalidProvider", f'provider "{provider}" is invalid: {exc.errors()[0]["msg"]}'
            ) from exc

    def _resolve_targets(self, run: HarnessRun) -> list[AttemptTarget]:
        ns = run.metadata["namespace"]
        chain = [run.spec.provider] + [fb.provider for fb in run.spec.fallback]
        targets = []
        for index, provider in enumerate(chain, start=1):
            definition = self._definition(ns, provider)
            if definition is None:
                message = f'unknown provider "{provider}"'
                if index > 1:
                    message = f"invalid fallback[{index - 2}]: {message}"
                raise Rejection("UnknownProvider", message)
            if definition.protocol == Protocol.acp:
                raise Rejection(
                    "UnsupportedProtocol", f'provider "{provider}" uses protocol acp, not supported yet'
                )
            targets.append(AttemptTarget(index, provider, definition))
        return targets

    def _resolve_source(self, run: HarnessRun, field: str, source: Any) -> str:
        ns = run.metadata["namespace"]
        if source.config_map_key_ref:
            ref = source.config_map_key_ref
            value = self.kube.fetch_config_map_key(ns, ref.name, ref.key)
            what = f"ConfigMap {ref.name} key {ref.key}"
        elif source.secret_key_ref:
            ref = source.secret_key_ref
            value = self.kube.fetch_secret_key(ns, ref.name, ref.key)
            what = f"Secret {ref.name} key {ref.key}"
        else:
            other_name = source.run_output.name
            other = self.kube.fetch_run(ns, other_name)
            if other is None:
                raise Waiting(
                    "WaitingForRunOutput", f'{field}: waiting for HarnessRun "{other_name}" to exist'
                )
            other_run = HarnessRun.model_validate(other)
            state = find_succeeded(other_run)
            if state == FALSE:
                raise Rejection("RunOutputFailed", f'{field}: HarnessRun "{other_name}" did not succeed')
            if state != TRUE:
                raise Waiting(
                    "WaitingForRunOutput", f'{field}: waiting for HarnessRun "{other_name}" to succeed'
                )
            value = self.kube.fetch_config_map_key(ns, output_config_map_name(other_name), "output")
            what = f'the output of HarnessRun "{other_name}"'
        if value is None:
            raise Rejection("InputUnavailable", f"{field}: cannot read {what}")
        return value

    def _resolve_inputs(self, run: HarnessRun) -> tuple[str, str | None]:
        spec = run.spec
        prompt = (
            spec.prompt
            if spec.prompt is not None
            else self._resolve_source(run, "spec.promptFrom", spec.prompt_from)
        )
        stdin = spec.stdin
        if spec.stdin_from is not None:
            stdin = self._resolve_source(run, "spec.stdinFrom", spec.stdin_from)
        return prompt, stdin

    # --- observation ---------------------------------------------------------------------------------

    def _observe_attempts(self, run: HarnessRun, targets: list[AttemptTarget]) -> list[ObservedAttempt]:
        ns, name = run.metadata["namespace"], run.metadata["name"]
        jobs = self.kube.fetch_jobs(ns, name)
        if not jobs:
            return []
        pods = self.kube.fetch_pods(ns, name)
        out = []
        for job in sorted(jobs, key=lambda j: int(j["metadata"]["labels"].get(LABEL_ATTEMPT, "0"))):
            index = int(job["metadata"]["labels"].get(LABEL_ATTEMPT, "0"))
            if not 1 <= index <= len(targets):
                continue
            mine = [
                p for p in pods if p["metadata"].get("labels", {}).get("job-name") == job["metadata"]["name"]
            ]
            out.append(observe_attempt(index, targets[index - 1].provider, job, mine))
        return out

    def _collect_output(
        self, run: HarnessRun, attempts: list[ObservedAttempt]
    ) -> tuple[bytes | None, str | None]:
        """The successful attempt's output from its log, checked, kept in the output ConfigMap."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        last = attempts[-1] if attempts else None
        if last is None or not last.succeeded or last.pod_name is None:
            return None, None
        expected = ((last.result or {}).get("output") or {}).get("sha256")
        log = self.kube.fetch_pod_log(ns, last.pod_name) or ""
        decoded = decode_frame(log, expected)
        if isinstance(decoded, FrameError):
            message = f"the output of attempt {last.index} cannot be read from its log: {decoded.message}"
            self.kube.create_event(run.model_dump(by_alias=True), "Warning", "OutputUnavailable", message)
            return None, None
        self.kube.create(build_output_config_map(run, decoded.decode("utf-8", "replace")))
        return decoded, output_config_map_name(name)

    # --- starting attempts ---------------------------------------------------------------------------

    def _queue_position(self, run: HarnessRun) -> tuple[str, str] | None:
        """Queued when the namespace already has its most runs in flight."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        active = {
            job["metadata"]["labels"].get(LABEL_RUN)
            for job in self.kube.fetch_jobs(ns)
            if not is_job_finished(job)
        }
        active.discard(label_value(name))
        limit = self.config.max_runs_per_namespace
        if len(active) >= limit:
            return (
                "Queued",
                f"{len(active)} runs in flight in namespace {ns} (limit {limit}); waiting for one to end",
            )
        return None

    def _start_attempt(
        self, run: HarnessRun, targets: list[AttemptTarget], index: int, attempts: list[ObservedAttempt]
    ) -> tuple[str, str] | None:
        """Create what attempt `index` needs; for the first, only if the namespace has room (else Queued).

        The first attempt also writes every attempt's plan, so the prompt and stdin are read only then:
        a run's inputs are consumed once, not on every event of its Jobs and Pods."""
        ns = run.metadata["namespace"]
        prompt, stdin = self._resolve_inputs(run) if index == 1 else ("", None)
        with self._namespace_locks[ns]:  # counting and creating under one lock: no two runs take one slot
            if index == 1:
                queued = self._queue_position(run)
                if queued is not None:
                    return queued
                self.kube.create(build_plan_secret(run, build_plans(run, targets, prompt, stdin)))
            target = targets[index - 1]
            claim = build_workspace_claim(run, target.provider)
            if claim is not None:
                self.kube.create(claim)
            self.kube.create(build_network_policy(run, target, self.config))
            created = self.kube.create(build_job(run, target, self.config))
        if created and index > 1:
            failed = attempts[-1]
            metrics.FALLBACKS.labels(provider=failed.provider).inc()
            line = fallback_line(failed.index, len(targets), failed.provider, target.provider)
            self.kube.create_event(run.model_dump(by_alias=True), "Warning", "FallingBack", line)
        return None

    def _runs_to_wake(self, namespace: str) -> list[tuple[str, str]]:
        """Runs that may move now a run has ended: those queued, and those waiting for a run's output."""
        woken = []
        for raw in self.kube.fetch_runs(namespace):
            run = HarnessRun.model_validate(raw)
            if is_finished(run.status.conditions if run.status else []):
                continue
            succeeded = find_condition(run.status.conditions if run.status else [], SUCCEEDED)
            if succeeded and succeeded.reason in ("Queued", "WaitingForRunOutput"):
                woken.append((namespace, run.metadata["name"]))
        return woken
