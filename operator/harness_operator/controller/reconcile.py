"""One level-based reconcile per HarnessRun (I/O, orchestration only): fetch, observe, collect, start,
compute status (pure, core/status/status.py), write it if changed. Each duty is a module of its own:
run_start.py (queue, budgets, an attempt's children), run_observe.py (Jobs and Pods), run_dispatch.py
(MultiKueue's workers), run_collect.py (output and changes), metering.py (the model gateway's meters)."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import structlog

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.contract.structured_output import output_schema_problem
from harness_operator.controller import metrics
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.errors import Permanent, classify, retries_of
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import FreshDefinitions, KubeReader
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.metering import AttemptMetering
from harness_operator.controller.run_approval import RunApprovals
from harness_operator.controller.run_audit import write_audit
from harness_operator.controller.run_cache import RunStore
from harness_operator.controller.run_collect import RunCollector
from harness_operator.controller.run_dispatch import RunDispatcher
from harness_operator.controller.run_observe import RunObserver
from harness_operator.controller.run_start import QueueSource, RunStarter
from harness_operator.controller.run_trace import RunTracing
from harness_operator.controller.workers import Workers
from harness_operator.core.attempt import Attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.conditions import is_finished, is_running
from harness_operator.core.objects.naming import job_name
from harness_operator.core.pod.job import grace_period
from harness_operator.core.pod.publish import check_git_egress, check_publish
from harness_operator.core.pod.signing import check_signing
from harness_operator.core.resolve.resolution import (
    DefinitionReader,
    Rejection,
    RunFailure,
    Waiting,
    find_mcp_destinations_problem,
    resolve_targets,
)
from harness_operator.core.status.approval import add_unattributed
from harness_operator.core.status.awaiting import is_awaiting_approval
from harness_operator.core.status.decide import EventSpec, decide, decide_deletions, decide_wake
from harness_operator.core.status.observed import (
    FINISHED,
    Observed,
    ObservedAttempt,
    PodStep,
    recorded_attempts,
)
from harness_operator.core.status.status import compute_next_attempt, compute_status

log = structlog.get_logger("harness_operator")
RUN_LOCK_STRIPES = 256


@dataclass(frozen=True)
class Requeue:
    """What one reconcile asks of its caller: other runs to reconcile now (dependents and queued runs),
    and this run again after `after` seconds (a retry's backoff; None: on its next event only)."""

    now: list[tuple[str, str]] = field(default_factory=list)
    after: float | None = None


@dataclass(frozen=True)
class RunDuties:
    """The run reconciler's collaborators, one per duty, built by the composition root (__main__)."""

    starter: RunStarter
    observer: RunObserver
    dispatcher: RunDispatcher
    collector: RunCollector
    approvals: RunApprovals
    metering: AttemptMetering
    budgets: BudgetReconciler
    grants: Grants
    tracing: RunTracing


class Reconciler:
    """Reconciles runs; one lock per run keeps concurrent events from racing (run_start.py keeps one per
    namespace). `runs`: the run cache, which says which version of a run the watch last delivered and
    hands over a new run's body (none: every run is read)."""

    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        clock: Callable[[], datetime],
        children: ChildStore,
        definitions: DefinitionReader,
        duties: RunDuties,
        runs: RunStore | None = None,
    ) -> None:
        self.kube, self.config, self.clock = kube, config, clock
        self.children, self.definitions, self.duties = children, definitions, duties
        self.runs = RunStore() if runs is None else runs
        # Each unfinished run as the API server last answered this process (the watch's first delivery,
        # a read, or its status patch).
        self._answered: dict[tuple[str, str], dict[str, Any]] = {}
        # Striped: a bounded set of locks, however many runs come and go (two runs may share one).
        self._run_locks = [threading.Lock() for _ in range(RUN_LOCK_STRIPES)]
        self._in_flight: set[tuple[str, str]] = set()
        self._queued: set[tuple[str, str]] = set()
        self._started: dict[tuple[str, str], datetime] = {}

    def run_lock(self, namespace: str, name: str) -> threading.Lock:
        return self._run_locks[hash((namespace, name)) % RUN_LOCK_STRIPES]

    def _oldest_in_flight_seconds(self, namespace: str) -> float:
        now = self.clock()
        started = [t for (ns, _), t in list(self._started.items()) if ns == namespace]
        return max(((now - t).total_seconds() for t in started), default=0.0)

    # --- entry points --------------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> Requeue:
        """Bring one run forward; what to reconcile next (its dependents and queued runs now, itself when
        its retry's backoff ends). `retry`: how many times the controller has retried this run (errors.
        classify weighs it)."""
        with self.run_lock(namespace, name):
            raw = self._read(namespace, name)
            if raw is None:
                self.forget(namespace, name)
                return Requeue()
            run = HarnessRun.model_validate(raw)
            if is_finished(run.status.conditions if run.status else []):
                self._answered.pop((namespace, name), None)
                self.duties.dispatcher.release(namespace, name)  # what a failed release left held
                return Requeue()
            after = None
            try:
                status, after = self._reconcile_run(run, retry)
            except Exception as exc:  # the one classifier decides; temporary errors go back to the controller
                verdict = classify(exc, retry)
                if not isinstance(verdict, Permanent):
                    raise
                status = self._fail_visibly(run, verdict, exc)
            if status is None:
                return Requeue(after=after)
            wake = decide_wake(run.status, status)
            self._count_status(run, status)
        return Requeue(self.duties.starter.runs_to_wake(namespace) if wake else [], after)

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The run as the API server last answered for it, when the watch has delivered that very version
        and none since (a Job's or pod's event that changes nothing costs no read); else read afresh. A
        reconcile never acts on a copy older than the newest this process has seen."""
        key = (namespace, name)
        answered = self._answered.get(key)
        if answered is None and (answered := self.runs.take_delivered(namespace, name)) is not None:
            self._answered[key] = answered  # a new run: the watch's delivery is the first answer
        version = answered["metadata"].get("resourceVersion") if answered else None
        if version and version == self.runs.resource_version(namespace, name):
            return copy.deepcopy(answered)
        raw = self.kube.fetch_run(namespace, name)
        if raw is not None:  # a run gone or finished is let go of by the caller (forget, or its end)
            self._answered[key] = copy.deepcopy(raw)
        return raw

    def _count_status(self, run: HarnessRun, status: HarnessRunStatus) -> None:
        """The run in the gauges, and a run that has just finished settled: its budgets charged, its
        grants revoked, its metrics recorded."""
        namespace, name = run.metadata["namespace"], run.metadata["name"]
        started = None
        if is_running(status.conditions):
            started = datetime.fromisoformat(status.start_time) if status.start_time else self.clock()
        self._count((namespace, name), started, status.reason == Reason.Queued)
        if not is_finished(status.conditions):
            return
        self.children.release(namespace, name)  # a cancel during a backoff ends its hold
        # Independent of each other: the grant goes even when the metrics cannot be updated.
        try:
            self.duties.budgets.settle(run, status)
        except Exception as exc:  # the budget's next tick settles it from the watch cache
            log.warning("Settling the budgets failed", run=f"{namespace}/{name}", error=repr(exc))
        try:
            self.duties.grants.revoke_run(namespace, name)
        except Exception as exc:  # the status is written; the run's deletion revokes it again
            log.warning("Revoking the gateway grants failed", run=f"{namespace}/{name}", error=str(exc))
        try:
            metrics.record_finished(run, status)
        except Exception as exc:  # figures a counter refuses must not stop the run's cleanup
            log.warning("Recording the run's metrics failed", run=f"{namespace}/{name}", error=str(exc))

    def forget(self, namespace: str, name: str) -> None:
        """The run is gone: it counts no more as in flight or queued (the gauges and the oldest in
        flight drop it), and its slot is no longer this process's to hold."""
        self._count((namespace, name), None, False)
        self._answered.pop((namespace, name), None)
        self.duties.starter.forget(namespace, name)
        self.children.release(namespace, name)
        self.duties.dispatcher.release(namespace, name)

    def runs_waiting(self, namespace: str) -> list[tuple[str, str]]:
        """The namespace's queued and waiting runs, to reconcile when one of its Jobs has finished: a
        run can end (its runner reported) before the Job controller marks its Job complete, and a run
        woken in between finds the slot still taken and stays Queued."""
        return self.duties.starter.runs_to_wake(namespace)

    def _count(self, key: tuple[str, str], started: datetime | None, queued: bool) -> None:
        """The run in the gauges: in flight since `started` (None: not in flight), queued or not."""
        if started is None:
            self._in_flight.discard(key)
            self._started.pop(key, None)
        else:
            self._in_flight.add(key)
            self._started.setdefault(key, started)
        if queued:
            self._queued.add(key)
        else:
            self._queued.discard(key)
        metrics.record_runs(self._in_flight, self._queued, self._oldest_in_flight_seconds)

    # --- the reconcile path --------------------------------------------------------------------------

    def _reconcile_run(self, run: HarnessRun, retry: int) -> tuple[HarnessRunStatus | None, float | None]:
        """The status written, and the seconds until a retry waiting out its backoff is due."""
        ns = run.metadata["namespace"]
        duties = self.duties
        try:
            targets = self._resolve_targets(run, retry)
        except Rejection as rejection:
            return self._write(
                run, Observed(providers=[], rejected=(rejection.reason, rejection.message))
            ), None
        providers = [t.provider for t in targets]
        positions = [t.position for t in targets]
        attempts = recorded_attempts(run.status)
        # A routed run's meter is read at its end (then `retry` counts the gateway's silences).
        routed = any(t.model_route for t in targets)
        meter_retry = retry if routed else None
        try:
            if is_awaiting_approval(run.status):
                step = duties.approvals.step(run, targets)
                status = step.status
                if meter_retry is not None and is_finished(status.conditions):
                    rest = duties.metering.meter_run(run, status.attempts, meter_retry)
                    status = add_unattributed(status, rest) if rest is not None else status
                return self._apply(run, status, step.events), step.due_in
            attempts = duties.metering.meter(
                run, targets, duties.observer.observe_attempts(run, targets), retry
            )
            cancelled = run.spec.cancel
            for name in decide_deletions(attempts, cancelled):
                self.kube.delete_job(ns, name, grace_period(run, self.config))
            output, output_cm, output_invalid = duties.collector.collect_output(run, attempts, retry)
            changes, publish_failed = duties.collector.collect_changes(run, attempts, retry)
            observed = Observed(
                providers,
                attempts,
                output,
                output_cm,
                positions=positions,
                changes=changes,
                publish_failed=publish_failed,
                awaiting_approval=bool(changes and changes.tree) and publish_failed is None,
                output_invalid=output_invalid,
                cancelled=cancelled,
            )
            next_index = compute_next_attempt(observed, run.spec.retry)
            if next_index is None:
                written = self._write(run, observed, meter_retry)
                # A change kept for approval: reconciled again at once, to delete the attempt's Job.
                return written, (0.0 if is_awaiting_approval(written) else None)
            backoff = duties.starter.backoff(run, observed, next_index)
            if backoff is not None:
                waiting = Observed(providers, attempts, positions=positions, waiting=backoff.waiting)
                return self._write(run, waiting), backoff.due_in
            queued = duties.starter.start_attempt(run, targets, next_index, attempts, retry)
        except Rejection as rejection:
            return self._write(
                run, Observed(providers=[], rejected=(rejection.reason, rejection.message))
            ), None
        except Waiting as waiting:
            return self._write(run, Observed(providers=[], waiting=(waiting.reason, waiting.message))), None
        except RunFailure as failure:
            failed = Observed(providers, attempts, failed=(failure.reason, failure.message))
            return self._write(run, failed, meter_retry), None
        if queued is not None:
            return self._write(run, Observed(providers, attempts, positions=positions, waiting=queued)), None
        started = ObservedAttempt(
            next_index, providers[next_index - 1], job_name(run.metadata["name"], next_index)
        )
        return self._write(
            run, Observed(providers, [*attempts, started], output, output_cm, positions=positions)
        ), None

    def _fail_visibly(self, run: HarnessRun, verdict: Permanent, exc: Exception) -> HarnessRunStatus:
        """A permanent API error ends the run with its reason in status and an Event; when even the
        status cannot be written, the Event is still tried and the error goes back to the controller."""
        observed = Observed([], recorded_attempts(run.status), failed=(verdict.reason, verdict.message))
        try:  # an attempt's token may have gone live before the failure: the run's meter is read once
            return self._write(
                run, observed, retries_of("meter") if self.config.model_gateway_service else None
            )
        except Exception:
            # The controller logs the original error; an Event that cannot be posted either adds nothing.
            with contextlib.suppress(Exception):
                body = {"metadata": run.metadata}
                self.kube.create_event(body, "Warning", verdict.reason, verdict.message)
            raise exc from None

    def _write(self, run: HarnessRun, observed: Observed, meter_retry: int | None = None) -> HarnessRunStatus:
        """Compute the status, decide (pure) what changes, and act: the run's end Event (named, so an
        operator killed before the status patch posts it once on the retry), the patch, the others; then
        let go of the worker Jobs of the attempts whose end the status now records (their pods are read:
        MultiKueue may delete them). A routed run that ends (`meter_retry` not None: the retries so far)
        counts what the model gateway metered for it beyond its attempts' meters."""
        now = self.clock()
        status = compute_status(run, observed, now)
        if meter_retry is not None and observed.unattributed is None and is_finished(status.conditions):
            rest = self.duties.metering.meter_run(run, status.attempts, meter_retry)
            if rest is not None:
                status = compute_status(run, replace(observed, unattributed=rest), now)
        written = self._apply(run, status, steps={a.index: a.steps for a in observed.attempts if a.steps})
        ns, name = run.metadata["namespace"], run.metadata["name"]
        ended: dict[str, set[str]] = defaultdict(set)
        for attempt in observed.attempts:
            if attempt.cluster and attempt.state == FINISHED and attempt.job_name:
                ended[attempt.cluster].add(attempt.job_name)
        if ended:
            self.duties.dispatcher.release(ns, name, ended)
        return written

    def _apply(
        self,
        run: HarnessRun,
        status: HarnessRunStatus,
        events: Sequence[EventSpec] = (),
        steps: Mapping[int, Sequence[PodStep]] | None = None,
    ) -> HarnessRunStatus:
        """Decide (pure) what the status changes and post it: the run's end Event (named, so an operator
        killed before the status patch posts it once on the retry), the patch, the other Events (and
        `events`, the caller's own); then the spans the write completed (`steps`: the pod steps of
        attempts seen finished)."""
        decision = decide(run, self.duties.tracing.with_trace_id(run, status))
        ns, name = run.metadata["namespace"], run.metadata["name"]
        body = {"metadata": run.metadata}
        for event in decision.events:
            if event.name is not None:
                self.kube.create_event(body, event.type, event.reason, event.message, event.name)
        if decision.patch is not None:
            stored = self.kube.patch_run_status(ns, name, decision.patch)
            if is_finished(decision.status.conditions):
                self._answered.pop((ns, name), None)
            else:
                self._answered[(ns, name)] = stored
        for event in [*events, *decision.events]:
            if event.name is None:
                self.kube.create_event(body, event.type, event.reason, event.message)
        if decision.patch is not None:
            write_audit(run, run.status, decision.status)
            self.duties.tracing.record(run, run.status, decision.status, steps or {})
        return decision.status

    def _resolve_targets(self, run: HarnessRun, retry: int) -> list[Attempt]:
        check_publish(run)
        problem = output_schema_problem(run.spec.output_schema)
        if problem is not None:
            raise Rejection(Reason.InvalidSpec, problem)
        definitions = self.definitions
        if not recorded_attempts(run.status):  # its first: a definition the caches may not hold yet
            definitions = FreshDefinitions(definitions, self.kube)
        targets = resolve_targets(KubeReader(self.kube, definitions, retry), run)
        problem = find_mcp_destinations_problem(run, targets, self.config)
        if problem is not None:
            raise Rejection(Reason.McpUnsupported, problem)
        attempts = decide_attempts(run, targets, self.config)
        check_git_egress(run, attempts, self.config)
        check_signing(run, attempts, self.config)
        return attempts


def wire_reconciler(
    kube: Kube,
    config: OperatorConfig,
    clock: Callable[[], datetime],
    children: ChildStore,
    kueue: KueueStore,
    workers: Workers,
    budgets: BudgetReconciler,
    grants: Grants,
    metering: AttemptMetering,
    definitions: DefinitionReader,
    queue: QueueSource,
    tracing: RunTracing,
    runs: RunStore | None = None,
) -> Reconciler:
    """The run reconciler and its duties over the collaborators the composition root (__main__) built:
    the one place that says which duty gets which."""
    dispatcher = RunDispatcher(kube, config, workers)
    duties = RunDuties(
        starter=RunStarter(kube, config, clock, children, kueue, budgets, grants, queue),
        observer=RunObserver(kube, config, clock, children, kueue, dispatcher),
        dispatcher=dispatcher,
        collector=RunCollector(kube, workers),
        approvals=RunApprovals(kube, config, clock, children),
        metering=metering,
        budgets=budgets,
        grants=grants,
        tracing=tracing,
    )
    return Reconciler(kube, config, clock, children, definitions, duties, runs)
