"""Starting a run's attempts (I/O): its place in the namespace's queue or a Kueue LocalQueue, budget
admission and reservation, a retry's backoff, and the attempt's children (claim, policies, plan, Job)
created, with the Warning Events of what a started attempt does not enforce."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus, Limits, ProtectedPathRule, RunBudget
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.controller import metrics
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import label_value
from harness_operator.core.objects.ownership import describe_conflict, is_expected_child
from harness_operator.core.plan.planning import PlanError
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.plan.resumption import (
    Resumption,
    compute_continuation,
    resolve_resumption,
)
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.network_policy import build_fqdn_policy, build_network_policy
from harness_operator.core.pod.protected_paths import parse_namespace_rules
from harness_operator.core.pod.publish import WorkspaceStart, publish_branch, resolve_start
from harness_operator.core.pod.run_data import build_plan_secret, build_resume_secret
from harness_operator.core.pod.workspace import build_workspace_claim
from harness_operator.core.queue.budget import Admission
from harness_operator.core.queue.fairqueue import (
    QueueEntry,
    build_queued_message,
    compute_queue_position,
    compute_runs_to_wake,
    is_slot_free,
)
from harness_operator.core.queue.kueue import (
    DEFAULT_LOCAL_QUEUE,
    KUEUE_GROUP,
    describe_missing_kueue,
    queue_of,
    resolve_queue,
)
from harness_operator.core.resolve.resolution import (
    Rejection,
    ResolvedInputs,
    RunFailure,
    resolve_inputs,
)
from harness_operator.core.resolve.retry import compute_retry_due, retry_number, retry_waiting_message
from harness_operator.core.status.observed import Observed, ObservedAttempt
from harness_operator.core.status.start_warnings import build_start_warnings
from harness_operator.core.status.status import describe_next_attempt

CREATE_WORKERS = 8  # the writes of a starting attempt that go in parallel (claim, policies), for all runs


class QueueSource(Protocol):
    """The watch cache of runs that have not started, per namespace (the run cache)."""

    def entries(self, namespace: str) -> list[QueueEntry]: ...


@dataclass(frozen=True)
class Backoff:
    """A retry waiting out its backoff: (Retrying, message) for the status, and the seconds until due."""

    waiting: tuple[str, str]
    due_in: float


def create_child(kube: Kube, run: HarnessRun, obj: dict[str, Any]) -> bool:
    """Create a child; True when created now. A name already taken by an object that is not this
    run's child (owner, content hash) fails the run with ChildConflict before anything else runs."""
    existing = kube.create(obj)
    if existing is None:
        return True
    if not is_expected_child(existing, obj):
        raise RunFailure(Reason.ChildConflict, describe_conflict(existing, obj, run.metadata["name"]))
    return False


class RunStarter:
    """Starts attempts; one lock per namespace keeps two runs from taking one slot."""

    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        clock: Callable[[], datetime],
        children: ChildStore,
        kueue: KueueStore,
        budgets: BudgetReconciler,
        grants: Grants,
        queue_source: QueueSource,
    ) -> None:
        self.kube, self.config, self.clock = kube, config, clock
        self.children, self.kueue, self.budgets, self.grants = children, kueue, budgets, grants
        self.queue_source = queue_source
        # Runs this process started whose start the run cache may not show yet: not queued any more.
        self._admitted: set[tuple[str, str]] = set()
        self._writer = futures.ThreadPoolExecutor(CREATE_WORKERS, thread_name_prefix="create")
        self._namespace_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)

    def forget(self, namespace: str, name: str) -> None:
        """The run is gone: its slot is no longer this process's to hold."""
        self._admitted.discard((namespace, name))

    def queue_of(self, run: HarnessRun) -> str | None:
        """The Kueue LocalQueue the run's Jobs go to (core/queue/kueue.resolve_queue); None: the namespace's
        slots decide when it starts."""
        ns = run.metadata["namespace"]
        has_default = self.kueue.watching and self.kueue.local_queue(ns, DEFAULT_LOCAL_QUEUE) is not None
        return resolve_queue(run, self.config.kueue_default_queue, has_default)

    def _queue(self, namespace: str) -> list[QueueEntry]:
        """The namespace's runs that have not started, from the run cache, without those this process
        started that the cache does not show as started yet."""
        entries = self.queue_source.entries(namespace)
        indexed = {e.name for e in entries}
        self._admitted = {k for k in self._admitted if k[0] != namespace or k[1] in indexed}
        return [e for e in entries if (namespace, e.name) not in self._admitted]

    def _queue_position(self, run: HarnessRun) -> tuple[str, str] | None:
        """Queued while the runs in flight and the runs queued before this one fill the namespace's
        slots: first come, first served (creation time, then name)."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        active = self.children.in_flight(ns) - {label_value(name)}
        entry = QueueEntry(str(run.metadata.get("creationTimestamp") or ""), name)
        position, total = compute_queue_position(self._queue(ns), entry)
        limit = self.config.max_runs_per_namespace
        if is_slot_free(position, len(active), limit):
            return None
        return Reason.Queued, build_queued_message(ns, position, total, len(active), limit)

    def runs_to_wake(self, namespace: str) -> list[tuple[str, str]]:
        """Runs that may move now a run has ended: the earliest queued, one per free slot, and those
        waiting for a run's output or for budget room (from the caches: no LIST)."""
        in_flight = len(self.children.in_flight(namespace))
        with self._namespace_locks[namespace]:
            queue = self._queue(namespace)
        names = compute_runs_to_wake(queue, in_flight, self.config.max_runs_per_namespace)
        return [(namespace, name) for name in names]

    def backoff(self, run: HarnessRun, observed: Observed, next_index: int) -> Backoff | None:
        """Retry `next_index` waiting out its backoff, which counts from its predecessor's recorded end;
        the run keeps its slot of the namespace meanwhile. None once it is due (or the next attempt is no
        retry)."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        nth = retry_number(observed.positions, next_index)
        if nth == 0:
            return None
        last = observed.attempts[-1]
        recorded = {a.index: a for a in (run.status.attempts if run.status else [])}
        before = recorded.get(last.index)
        now = self.clock()
        ended = (
            parse_time(last.result.completion_time if last.result else None)
            or parse_time(before.completion_time if before else None)
            or now
        )
        due = compute_retry_due(run.spec.retry, nth, ended)
        if due <= now:
            return None
        if not self.queue_of(run):
            self.children.hold(ns, name)
        _, line = describe_next_attempt(run, observed, next_index)
        return Backoff((Reason.Retrying, retry_waiting_message(line, due)), (due - now).total_seconds())

    def _reserve(self, run: HarnessRun, admission: Admission, budgets: list[str]) -> HarnessRun:
        """Record the run's cap in each budget's ledger, then in its status, before its Job exists (a
        restart finds both), and return the run as planned: its maxCostUSD lowered to that cap, which the
        runner enforces."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        now = self.clock()
        self.budgets.reserve(run, admission.cap_usd, budgets, now)
        reservation = RunBudget(names=budgets, reserved_usd=admission.cap_usd, admitted_at=timestamp(now))
        self.kube.patch_run_status(ns, name, {"budget": reservation.to_api()})
        run.status = (run.status or HarnessRunStatus()).model_copy(update={"budget": reservation})
        if admission.cap_usd is None:
            return run
        limits = (run.spec.limits or Limits()).model_copy(update={"max_cost_usd": admission.cap_usd})
        return run.model_copy(update={"spec": run.spec.model_copy(update={"limits": limits})})

    def start_attempt(
        self,
        run: HarnessRun,
        targets: list[Attempt],
        index: int,
        attempts: list[ObservedAttempt],
        retry: int,
    ) -> tuple[str, str] | None:
        """Create what attempt `index` needs; for the first, only if the namespace has room (else Queued).

        The first attempt also writes every attempt's plan, so the prompt and stdin are read only then:
        a run's inputs are consumed once, not on every event of its Jobs and Pods."""
        queue = self.queue_of(run)
        if queue is not None:
            if not self.kube.serves_api_group(KUEUE_GROUP):
                raise RunFailure(
                    Reason.QueueUnavailable, describe_missing_kueue(queue, queue_of(run) is not None)
                )
            self.kueue.ensure_watching()
        inputs = (
            resolve_inputs(KubeReader(self.kube, retry=retry), run)
            if index == 1
            else ResolvedInputs("", None, [])
        )
        resumption = resolve_resumption(KubeReader(self.kube, retry=retry), run) if index == 1 else None
        start = resolve_start(KubeReader(self.kube, retry=retry), run)
        namespace_rules = self._namespace_rules(run)
        taken = self._take_slot(run, index, queue)
        if isinstance(taken, tuple):
            return taken
        planned = taken
        created = self._create_children(
            run, planned, targets, index, inputs, resumption, start, queue, namespace_rules
        )
        self._warn_started(run, targets, index, attempts, resumption, created)
        return None

    def _namespace_rules(self, run: HarnessRun) -> list[ProtectedPathRule]:
        """The protected paths the run's namespace adds (its annotation), read only for a run that pushes;
        a malformed annotation fails the run (InvalidSpec) rather than publishing without it."""
        if publish_branch(run) is None:
            return []
        namespace = self.kube.fetch_namespace(run.metadata["namespace"]) or {}
        try:
            return parse_namespace_rules(namespace.get("metadata", {}).get("annotations"))
        except ValueError as exc:
            raise Rejection(Reason.InvalidSpec, str(exc)) from None

    def _take_slot(self, run: HarnessRun, index: int, queue: str | None) -> HarnessRun | tuple[str, str]:
        """The run as planned once it holds its slot; (reason, message) while budgets or the namespace's
        queue hold it back. The first attempt is admitted by the budgets covering it."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        planned = run
        with self._namespace_locks[ns]:  # counting and taking the slot under one lock: no two runs take one
            if index == 1:
                admission, budgets = self.budgets.admit(run)
                if not admission.admitted:
                    if admission.fail:
                        raise RunFailure(Reason.BudgetExhausted, admission.message)
                    return Reason.BudgetExhausted, admission.message
                queued = None if queue else self._queue_position(run)  # Kueue queues it instead
                if queued is not None:
                    return queued
                planned = self._reserve(run, admission, budgets) if budgets else run
            # The slot is taken before the lock is released; the creates run outside it, in parallel
            # with other runs' admissions (under the lock they serialized a burst). Kueue's runs take none.
            if not queue:
                self.children.note_started(ns, name)
            self._admitted.add((ns, name))
        return planned

    def _create_children(
        self,
        run: HarnessRun,
        planned: HarnessRun,
        targets: list[Attempt],
        index: int,
        inputs: ResolvedInputs,
        resumption: Resumption | None,
        start: WorkspaceStart | None,
        queue: str | None,
        namespace_rules: list[ProtectedPathRule],
    ) -> bool:
        """The attempt's claim, policies, plan (the first attempt's) and Job; True when its Job was created
        now. A failure frees the slot the run took."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        try:
            target = targets[index - 1]
            policies = [
                build_workspace_claim(run, target.provider),
                build_network_policy(run, target, self.config),
                build_fqdn_policy(run, target, self.config),
            ]
            # What the Job needs is written at once, in parallel (none needs another): the Job only
            # after all of it, so its pod never starts before its policy or without its plan.
            writes = [
                self._writer.submit(create_child, self.kube, run, obj) for obj in policies if obj is not None
            ]
            try:
                if index == 1:
                    try:
                        plans = build_plans(
                            planned,
                            targets,
                            inputs.prompt,
                            inputs.stdin,
                            self.clock(),
                            self.config,
                            resumption,
                            inputs.secret_values,
                        )
                    except PlanError as exc:
                        raise Rejection(exc.reason, exc.message) from exc
                    # Only where an attempt resumes it (compute_continuation: there is an archive).
                    if any(compute_continuation(resumption, t.provider, t.definition) for t in targets):
                        assert resumption is not None and resumption.archive is not None
                        create_child(self.kube, run, build_resume_secret(run, resumption.archive))
                    create_child(
                        self.kube, run, build_plan_secret(run, plans, self.grants.write(run, targets))
                    )
            finally:
                futures.wait(writes)
            for write in writes:
                write.result()  # the first failure, in order
            # The attempt's model token goes live now, and not before: one not started spends nothing.
            self.grants.admit(planned, targets, index)
            job = build_job(run, target, self.config, start, queue, namespace_rules)
            created = create_child(self.kube, run, job)
            self.children.release(ns, name)  # a backoff's hold: the Job takes the slot now
        except BaseException:
            with self._namespace_locks[ns]:  # no Job: the slot is free again
                self.children.forget_started(ns, name)
                self._admitted.discard((ns, name))
            raise
        return created

    def _warn_started(
        self,
        run: HarnessRun,
        targets: list[Attempt],
        index: int,
        attempts: list[ObservedAttempt],
        resumption: Resumption | None,
        created: bool,
    ) -> None:
        """The Warning Events of an attempt whose Job was `created` now (none else): what it does not
        enforce, what it replays, and why it is a retry or a fallback."""
        if not created:
            return
        ns = run.metadata["namespace"]
        for event in build_start_warnings(run, targets, index, attempts, self.config, resumption):
            if event.reason in (Reason.Retrying, Reason.FallingBack):
                counter = metrics.RETRIES if event.reason == Reason.Retrying else metrics.FALLBACKS
                counter.labels(namespace=ns, provider=attempts[-1].provider).inc()
            self.kube.create_event({"metadata": run.metadata}, event.type, event.reason, event.message)
