"""One level-based reconcile per HarnessRun: fetch, build (pure), apply, compute status, write if changed.

Orchestration only: objects come from desired.py, status from status.py, I/O through kube.py.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    ChangesStatus,
    HarnessRun,
    HarnessRunStatus,
    Limits,
    RunBudget,
)
from harness_operator.contract.changes import parse_report
from harness_operator.contract.frame import FrameError, decode_frame
from harness_operator.contract.structured_output import (
    OutputChecked,
    OutputMismatch,
    output_schema_problem,
    validate_output,
)
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.controller import metrics
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.errors import LOG_RETRIES, METER_RETRIES, LogNotComplete, Permanent, classify
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.metering import AttemptMetering
from harness_operator.controller.workers import Worker, Workers
from harness_operator.core.budget import (
    Admission,
)
from harness_operator.core.conditions import (
    is_finished,
    is_running,
)
from harness_operator.core.config import OperatorConfig
from harness_operator.core.decide import decide, decide_deletions, decide_wake
from harness_operator.core.desired import (
    build_changes_config_map,
    build_job,
    build_output_config_map,
    build_plan_secret,
    build_plans,
    build_resume_secret,
    grace_period,
)
from harness_operator.core.egress import (
    ROUTE_GATEWAY,
    ROUTE_PUBLIC,
    compute_route,
    find_mcp_destinations_problem,
)
from harness_operator.core.fairqueue import (
    QueueEntry,
    build_queued_message,
    compute_queue_position,
    compute_runs_to_wake,
    is_slot_free,
)
from harness_operator.core.invocation import attempt_options_field, find_unknown_options
from harness_operator.core.kueue import (
    DEFAULT_LOCAL_QUEUE,
    KUEUE_GROUP,
    admission_check_names,
    describe_inactive,
    describe_missing_kueue,
    is_inadmissible,
    is_kueue_managed,
    multikueue_config_name,
    queue_of,
    resolve_queue,
)
from harness_operator.core.model_route import compute_key_warning, compute_model_route, route_targets
from harness_operator.core.multikueue import (
    check_remote_copy,
    describe_gateways_elsewhere,
    describe_missing_secret,
    describe_remote_wait,
    describe_unknown_worker,
    describe_unreachable,
    dispatched_cluster,
    find_missing_secret,
    is_dispatched,
)
from harness_operator.core.naming import (
    KUEUE_QUEUE_LABEL,
    LABEL_ATTEMPT,
    PUBLISH_CONTAINER,
    job_name,
    label_value,
    output_config_map_name,
    plan_secret_name,
    resume_secret_name,
)
from harness_operator.core.network_policy import build_fqdn_policy, build_network_policy
from harness_operator.core.ownership import describe_conflict, is_expected_child, is_owned_child
from harness_operator.core.planning import PlanError
from harness_operator.core.publish import check_publish, compute_changes, lost_publish, resolve_start
from harness_operator.core.resolution import (
    AttemptTarget,
    DefinitionReader,
    Rejection,
    ResolvedInputs,
    RunFailure,
    Waiting,
    resolve_inputs,
    resolve_targets,
)
from harness_operator.core.results import credentials_missing_result, queue_unavailable_result
from harness_operator.core.resumption import compute_continuation, describe_replays, resolve_resumption
from harness_operator.core.retry import compute_retry_due, retry_number, retry_waiting_message
from harness_operator.core.status import (
    FINISHED,
    SUSPENDED,
    Observed,
    ObservedAttempt,
    compute_next_attempt,
    compute_status,
    describe_next_attempt,
    merge_attempts,
    observe_attempt,
    recorded_attempts,
)
from harness_operator.core.tool_policy import compute_tool_policy_warning
from harness_operator.core.workspace import build_workspace_claim

log = structlog.get_logger("harness_operator")
RUN_LOCK_STRIPES = 256
CREATE_WORKERS = 8  # the writes of a starting attempt that go in parallel (claim, policies), for all runs


def _now() -> datetime:
    return datetime.now(UTC)


class QueueSource(Protocol):
    """The watch cache of runs that have not started, per namespace (the run cache)."""

    def entries(self, namespace: str) -> list[QueueEntry]: ...


class NoQueue:
    def entries(self, namespace: str) -> list[QueueEntry]:
        return []


class Reconciler:
    """Reconciles runs; one lock per run and one per namespace keep concurrent events from racing. Budgets
    admit and charge them (budgets.py)."""

    def __init__(
        self,
        kube: Kube,
        config: OperatorConfig,
        clock: Callable[[], datetime] = _now,
        children: ChildStore | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self.children = children or ChildStore()
        self.kueue = KueueStore(self.children)  # its watches start on first use (__main__)
        self.workers = Workers()  # MultiKueue's worker clusters (__main__, from the config)
        self.budgets = BudgetReconciler(kube, config.ledger_namespace, clock)
        self.grants = Grants(kube, config)
        self.metering = AttemptMetering(kube, config, self.grants)
        self.definitions: DefinitionReader = KubeReader(kube)
        self.queue_source: QueueSource = NoQueue()
        # Reconcile a run again after this many seconds (a retry's backoff); the controller's due heap.
        self.wake_later: Callable[[str, str, float], None] = lambda namespace, name, delay: None
        # Runs this process started whose start the run cache may not show yet: not queued any more.
        self._admitted: set[tuple[str, str]] = set()
        # Striped: a bounded set of locks, however many runs come and go (two runs may share one).
        self._run_locks = [threading.Lock() for _ in range(RUN_LOCK_STRIPES)]
        self._writer = futures.ThreadPoolExecutor(CREATE_WORKERS, thread_name_prefix="create")
        self._namespace_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._in_flight: set[tuple[str, str]] = set()
        self._queued: set[tuple[str, str]] = set()
        self._started: dict[tuple[str, str], datetime] = {}
        metrics.OLDEST_IN_FLIGHT.set_function(self._oldest_in_flight_seconds)

    def run_lock(self, namespace: str, name: str) -> threading.Lock:
        return self._run_locks[hash((namespace, name)) % RUN_LOCK_STRIPES]

    def _oldest_in_flight_seconds(self) -> float:
        now = self.clock()
        return max(((now - t).total_seconds() for t in list(self._started.values())), default=0.0)

    # --- entry points --------------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str, retry: int = 0) -> list[tuple[str, str]]:
        """Bring one run forward; returns other runs to reconcile now (dependents and queued runs).
        `retry`: how many times the handler has retried this run (errors.classify weighs it)."""
        with self.run_lock(namespace, name):
            raw = self.kube.fetch_run(namespace, name)
            if raw is None:
                self.forget(namespace, name)
                return []
            run = HarnessRun.model_validate(raw)
            if is_finished(run.status.conditions if run.status else []):
                self.workers.release(namespace, name)  # what a failed release left held
                return []
            try:
                status = self._reconcile_run(run, retry)
            except Exception as exc:  # the one classifier decides; temporary errors go back to kopf
                verdict = classify(exc, retry)
                if not isinstance(verdict, Permanent):
                    raise
                status = self._fail_visibly(run, verdict, exc)
            if status is None:
                return []
            just_finished = is_finished(status.conditions)
            wake = decide_wake(run.status, status)
            started = None
            if is_running(status.conditions):
                started = datetime.fromisoformat(status.start_time) if status.start_time else self.clock()
            self._count((namespace, name), started, status.reason == Reason.Queued)
            if just_finished:
                self.children.release(namespace, name)  # a cancel during a backoff ends its hold
                # Independent of each other: the grant goes even when the metrics cannot be updated.
                try:
                    self.budgets.settle(run, status)
                except Exception as exc:  # the budget's next tick settles it from the watch cache
                    log.warning("Settling the budgets failed", run=f"{namespace}/{name}", error=repr(exc))
                try:
                    self.grants.revoke_run(namespace, name)
                except Exception as exc:  # the status is written; the run's deletion revokes it again
                    log.warning(
                        "Revoking the gateway grants failed", run=f"{namespace}/{name}", error=str(exc)
                    )
                try:
                    metrics.record_finished(run, status)
                except Exception as exc:  # figures a counter refuses must not stop the run's cleanup
                    log.warning(
                        "Recording the run's metrics failed", run=f"{namespace}/{name}", error=str(exc)
                    )
        return self._runs_to_wake(namespace) if wake else []

    def forget(self, namespace: str, name: str) -> None:
        """The run is gone: it counts no more as in flight or queued (the gauges and the oldest in
        flight drop it), and its slot is no longer this process's to hold."""
        self._count((namespace, name), None, False)
        self._admitted.discard((namespace, name))
        self.children.release(namespace, name)
        self.workers.release(namespace, name)

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
        metrics.IN_FLIGHT.set(len(self._in_flight))
        metrics.QUEUED.set(len(self._queued))

    # --- the reconcile path --------------------------------------------------------------------------

    def _reconcile_run(self, run: HarnessRun, retry: int) -> HarnessRunStatus | None:
        ns = run.metadata["namespace"]
        try:
            targets = self._resolve_targets(run, retry)
        except Rejection as rejection:
            return self._write(run, Observed(providers=[], rejected=(rejection.reason, rejection.message)))
        providers = [t.provider for t in targets]
        positions = [t.position for t in targets]
        attempts = recorded_attempts(run.status)
        # A routed run's meter is read at its end (then `retry` counts the gateway's silences).
        routed = any(compute_model_route(run, t.definition, self.config) for t in targets)
        meter_retry = retry if routed else None
        try:
            attempts = self.metering.meter(run, targets, self._observe_attempts(run, targets), retry)
            cancelled = run.spec.cancel
            for name in decide_deletions(attempts, cancelled):
                self.kube.delete_job(ns, name, grace_period(run, self.config))
            output, output_cm, output_invalid = self._collect_output(run, attempts, retry)
            changes, publish_failed = self._collect_changes(run, attempts, retry)
            observed = Observed(
                providers,
                attempts,
                output,
                output_cm,
                positions=positions,
                changes=changes,
                publish_failed=publish_failed,
                output_invalid=output_invalid,
                cancelled=cancelled,
            )
            next_index = compute_next_attempt(observed)
            if next_index is None:
                return self._write(run, observed, meter_retry)
            backoff = self._backoff(run, observed, next_index)
            if backoff is not None:
                return self._write(run, Observed(providers, attempts, positions=positions, waiting=backoff))
            queued = self._start_attempt(run, targets, next_index, attempts, retry)
        except Rejection as rejection:
            return self._write(run, Observed(providers=[], rejected=(rejection.reason, rejection.message)))
        except Waiting as waiting:
            return self._write(run, Observed(providers=[], waiting=(waiting.reason, waiting.message)))
        except RunFailure as failure:
            failed = Observed(providers, attempts, failed=(failure.reason, failure.message))
            return self._write(run, failed, meter_retry)
        if queued is not None:
            return self._write(run, Observed(providers, attempts, positions=positions, waiting=queued))
        started = ObservedAttempt(
            next_index, providers[next_index - 1], job_name(run.metadata["name"], next_index)
        )
        return self._write(
            run, Observed(providers, [*attempts, started], output, output_cm, positions=positions)
        )

    def _backoff(self, run: HarnessRun, observed: Observed, next_index: int) -> tuple[str, str] | None:
        """(Retrying, message) while retry `next_index` waits out its backoff, which counts from its
        predecessor's recorded end; its wake is scheduled, and the run keeps its slot of the namespace
        meanwhile. None once it is due (or the next attempt is no retry)."""
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
        if not self._queue_of(run):
            self.children.hold(ns, name)
        self.wake_later(ns, name, (due - now).total_seconds())
        _, line = describe_next_attempt(run, observed, next_index)
        return Reason.Retrying, retry_waiting_message(line, due)

    def _fail_visibly(self, run: HarnessRun, verdict: Permanent, exc: Exception) -> HarnessRunStatus:
        """A permanent API error ends the run with its reason in status and an Event; when even the
        status cannot be written, the Event is still tried and the error goes back to the handler."""
        observed = Observed([], recorded_attempts(run.status), failed=(verdict.reason, verdict.message))
        try:  # an attempt's token may have gone live before the failure: the run's meter is read once
            return self._write(run, observed, METER_RETRIES if self.config.model_gateway_service else None)
        except Exception:
            # The handler logs the original error; an Event that cannot be posted either adds nothing.
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
            rest = self.metering.meter_run(run, status.attempts, meter_retry)
            if rest is not None:
                status = compute_status(run, replace(observed, unattributed=rest), now)
        decision = decide(run, status)
        ns, name = run.metadata["namespace"], run.metadata["name"]
        body = {"metadata": run.metadata}
        for event in decision.events:
            if event.name is not None:
                self.kube.create_event(body, event.type, event.reason, event.message, event.name)
        if decision.patch is not None:
            self.kube.patch_run_status(ns, name, decision.patch)
        for event in decision.events:
            if event.name is None:
                self.kube.create_event(body, event.type, event.reason, event.message)
        ended: dict[str, set[str]] = defaultdict(set)
        for attempt in observed.attempts:
            if attempt.cluster and attempt.state == FINISHED and attempt.job_name:
                ended[attempt.cluster].add(attempt.job_name)
        if ended:
            self.workers.release(ns, name, ended)
        return decision.status

    # --- resolution ----------------------------------------------------------------------------------

    def _resolve_targets(self, run: HarnessRun, retry: int) -> list[AttemptTarget]:
        check_publish(run)
        problem = output_schema_problem(run.spec.output_schema)
        if problem is not None:
            raise Rejection(Reason.InvalidSpec, problem)
        targets = route_targets(
            run, resolve_targets(KubeReader(self.kube, self.definitions, retry), run), self.config
        )
        problem = find_mcp_destinations_problem(run, targets, self.config)
        if problem is not None:
            raise Rejection(Reason.McpUnsupported, problem)
        return targets

    def _resolve_inputs(self, run: HarnessRun, retry: int) -> ResolvedInputs:
        return resolve_inputs(KubeReader(self.kube, retry=retry), run)

    # --- observation ---------------------------------------------------------------------------------

    def _observe_attempts(self, run: HarnessRun, targets: list[AttemptTarget]) -> list[ObservedAttempt]:
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
        targets: list[AttemptTarget],
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
                seen[index] = self._observe_dispatched(run, target, index, job, workload, local_queue)
                continue
            mine = [p for p in pods if is_owned_child(p, job["metadata"]["uid"])]
            seen[index] = self._observe(
                self.kube, run, targets[index - 1].provider, index, job, mine, workload, local_queue
            )
        return seen

    def _observe(
        self,
        kube: Kube,
        run: HarnessRun,
        provider: str,
        index: int,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        workload: dict[str, Any] | None = None,
        local_queue: dict[str, Any] | None = None,
    ) -> ObservedAttempt:
        """observe_attempt, with a Job Kueue seems to have taken back read again first: the Job's and the
        Pods' watches are apart, and a pod's creation can arrive before its Job's resumption (an attempt
        withdrawn is never run again; a read on this rare path only). A Job whose queue admits nothing says
        why, from the ClusterQueue down (_explain_inactive)."""
        attempt = observe_attempt(index, provider, job, pods, run.spec.cancel, workload, local_queue)
        if attempt.state == SUSPENDED and is_inadmissible(workload) and local_queue is not None:
            why = self._explain_inactive(str(local_queue["spec"].get("clusterQueue") or ""))
            return replace(attempt, waiting=f"{attempt.waiting} ({why})") if why else attempt
        if not attempt.withdrawn:
            return attempt
        fresh = kube.fetch_job(job["metadata"]["namespace"], job["metadata"]["name"])
        if fresh is None or fresh["metadata"].get("uid") != job["metadata"].get("uid"):
            return attempt
        return observe_attempt(index, provider, fresh, pods, run.spec.cancel, workload, local_queue)

    def _explain_inactive(self, cluster_queue: str) -> str | None:
        """Why ClusterQueue `cluster_queue` admits nothing, from its admission checks and the MultiKueue
        worker clusters behind them (reads on this rare path only: a run waiting on an inactive queue)."""
        queue = self.kube.fetch_kueue_object("clusterqueues", cluster_queue) if cluster_queue else None
        if queue is None:
            return None
        checks = [self.kube.fetch_kueue_object("admissionchecks", n) for n in admission_check_names(queue)]
        found = [c for c in checks if c is not None]
        workers = []
        for check in found:
            config_name = multikueue_config_name(check)
            config = self.kube.fetch_kueue_object("multikueueconfigs", config_name) if config_name else None
            for name in ((config or {}).get("spec") or {}).get("clusters") or []:
                workers.append(self.kube.fetch_kueue_object("multikueueclusters", str(name)))
        return describe_inactive(queue, found, [w for w in workers if w is not None])

    def _observe_dispatched(
        self,
        run: HarnessRun,
        target: AttemptTarget,
        index: int,
        job: dict[str, Any],
        workload: dict[str, Any] | None,
        local_queue: dict[str, Any] | None,
    ) -> ObservedAttempt:
        """An attempt whose Job MultiKueue dispatches (core/multikueue): until a worker admits it, its Job
        here shows why it waits; then its copy on that worker, and the pods there, are the attempt. What
        the copy's pod needs is written there first."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        provider, job_name_ = target.provider, job["metadata"]["name"]
        cluster = dispatched_cluster(workload)
        if cluster is None or workload is None:  # not admitted by a worker yet (or evicted from it)
            return self._observe(self.kube, run, provider, index, job, [], workload, local_queue)
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
        attempt = self._observe(worker.kube, run, provider, index, remote, pods)
        if attempt.state == SUSPENDED:
            attempt = replace(attempt, waiting=describe_remote_wait(cluster, job_name_, True))
        return replace(attempt, cluster=cluster)

    def _prepare_remote(
        self,
        run: HarnessRun,
        target: AttemptTarget,
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
        model = compute_model_route(run, target.definition, self.config) is not None
        egress = compute_route(run, target.definition, self.config) == ROUTE_GATEWAY
        warning = describe_gateways_elsewhere(target.index, worker.name, model, egress)
        if warning is not None:
            self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.GatewayNotOnWorker, warning)
        return None

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

    def _collect_output(
        self, run: HarnessRun, attempts: list[ObservedAttempt], retry: int = 0
    ) -> tuple[bytes | None, str | None, tuple[str, str] | None]:
        """The successful attempt's output from its log, checked, kept in the output ConfigMap, and
        (OutputInvalid, message) when it does not match spec.outputSchema. The log may lag the
        container's recorded end (the runtime copies it apart): it is read again, LOG_RETRIES times with
        the classifier's backoff, before the attempt is left without its output."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        last = attempts[-1] if attempts else None
        if last is None or not last.succeeded or last.pod_name is None:
            return None, None, None
        expected = last.result.output.sha256 if last.result and last.result.output else None
        log = self._kube_of(last).fetch_pod_log(ns, last.pod_name) or ""
        decoded = decode_frame(log, expected)
        if isinstance(decoded, FrameError) and retry < LOG_RETRIES:
            raise LogNotComplete(
                f"the output of attempt {last.index} is not in its log yet: {decoded.message}"
            )
        if isinstance(decoded, FrameError):
            message = f"the output of attempt {last.index} cannot be read from its log: {decoded.message}"
            self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.OutputUnavailable, message)
            invalid = (Reason.OutputInvalid, message) if run.spec.output_schema is not None else None
            return None, None, invalid
        # What the ConfigMap holds is the output the status describes (its sha256 is checked by readers).
        text = decoded.decode("utf-8", "replace")
        checked = validate_output(run.spec.output_schema, text) if run.spec.output_schema else None
        value = checked.json if isinstance(checked, OutputChecked) else None
        self._create(run, build_output_config_map(run, text, value))
        invalid = (Reason.OutputInvalid, checked.message) if isinstance(checked, OutputMismatch) else None
        return text.encode("utf-8"), output_config_map_name(name), invalid

    def _collect_changes(
        self, run: HarnessRun, attempts: list[ObservedAttempt], retry: int = 0
    ) -> tuple[ChangesStatus | None, tuple[str, str] | None]:
        """The successful attempt's change as its publishing container reported it (termination message),
        its patch from that container's log, checked, kept in the changes ConfigMap; and the run's
        failure when publishing failed. The log is read again as the output's is."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        last = attempts[-1] if attempts else None
        if last is None or not last.succeeded or last.publisher is None or last.pod_name is None:
            return None, None
        report = parse_report(str(last.publisher.get("message") or ""))
        if report is None:
            return None, lost_publish(last.publisher)
        kept = False
        if report.patch_sha256:
            log = self._kube_of(last).fetch_pod_log(ns, last.pod_name, PUBLISH_CONTAINER) or ""
            decoded = decode_frame(log, report.patch_sha256)
            if isinstance(decoded, FrameError) and retry < LOG_RETRIES:
                raise LogNotComplete(
                    f"the patch of attempt {last.index} is not in its log yet: {decoded.message}"
                )
            if isinstance(decoded, FrameError):
                message = f"the patch of attempt {last.index} cannot be read from its log: {decoded.message}"
                self.kube.create_event(
                    {"metadata": run.metadata}, "Warning", Reason.OutputUnavailable, message
                )
            else:
                self._create(run, build_changes_config_map(run, decoded))
                kept = True
        return compute_changes(report, kept, name)

    def _kube_of(self, attempt: ObservedAttempt) -> Kube:
        """The client of the cluster the attempt's pod ran on."""
        return self.workers.kube_of(attempt.cluster, self.kube)

    def _create(self, run: HarnessRun, obj: dict[str, Any]) -> bool:
        """Create a child; True when created now. A name already taken by an object that is not this
        run's child (owner, content hash) fails the run with ChildConflict before anything else runs."""
        existing = self.kube.create(obj)
        if existing is None:
            return True
        if not is_expected_child(existing, obj):
            raise RunFailure(Reason.ChildConflict, describe_conflict(existing, obj, run.metadata["name"]))
        return False

    # --- starting attempts ---------------------------------------------------------------------------

    def _queue_of(self, run: HarnessRun) -> str | None:
        """The Kueue LocalQueue the run's Jobs go to (core/kueue.resolve_queue); None: the namespace's
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

    def _start_attempt(
        self,
        run: HarnessRun,
        targets: list[AttemptTarget],
        index: int,
        attempts: list[ObservedAttempt],
        retry: int,
    ) -> tuple[str, str] | None:
        """Create what attempt `index` needs; for the first, only if the namespace has room (else Queued).

        The first attempt also writes every attempt's plan, so the prompt and stdin are read only then:
        a run's inputs are consumed once, not on every event of its Jobs and Pods."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        queue = self._queue_of(run)
        if queue is not None:
            if not self.kube.serves_api_group(KUEUE_GROUP):
                raise RunFailure(
                    Reason.QueueUnavailable, describe_missing_kueue(queue, queue_of(run) is not None)
                )
            self.kueue.ensure_watching()
        inputs = self._resolve_inputs(run, retry) if index == 1 else ResolvedInputs("", None, [])
        resumption = resolve_resumption(KubeReader(self.kube, retry=retry), run) if index == 1 else None
        start = resolve_start(KubeReader(self.kube, retry=retry), run)
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
        try:
            target = targets[index - 1]
            policies = [
                build_workspace_claim(run, target.provider),
                build_network_policy(run, target, self.config),
                build_fqdn_policy(run, target, self.config),
            ]
            # What the Job needs is written at once, in parallel (none needs another): the Job only
            # after all of it, so its pod never starts before its policy or without its plan.
            writes = [self._writer.submit(self._create, run, obj) for obj in policies if obj is not None]
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
                        self._create(run, build_resume_secret(run, resumption.archive))
                    self._create(run, build_plan_secret(run, plans, self.grants.write(run, targets)))
            finally:
                futures.wait(writes)
            for write in writes:
                write.result()  # the first failure, in order
            # The attempt's model token goes live now, and not before: one not started spends nothing.
            self.grants.admit(planned, targets, index)
            created = self._create(run, build_job(run, target, self.config, start, queue))
            self.children.release(ns, name)  # a backoff's hold: the Job takes the slot now
        except BaseException:
            with self._namespace_locks[ns]:  # no Job: the slot is free again
                self.children.forget_started(ns, name)
                self._admitted.discard((ns, name))
            raise
        if created and compute_route(run, target.definition, self.config) == ROUTE_PUBLIC:
            self.kube.create_event(
                {"metadata": run.metadata},
                "Warning",
                Reason.EgressNotEnforcedByName,
                f"attempt {index} ({target.provider}): host egress rules are not enforced by name: no egress "
                "gateway and no Cilium; the sandbox may reach their ports on every public address",
            )
        if created:
            where, given = attempt_options_field(run, target.position)
            for key, why in find_unknown_options(target.provider, target.definition, given):
                line = f"attempt {index}: {where}.{key}: {why}"
                self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.UnknownOption, line)
        warning = compute_key_warning(run, target, self.config) if created else None
        if warning is not None:
            self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.ModelKeyInSandbox, warning)
        unheld = (
            compute_tool_policy_warning(run.spec.tools, index, target.provider, target.definition)
            if created
            else None
        )
        if unheld is not None:
            self.kube.create_event(
                {"metadata": run.metadata}, "Warning", Reason.ToolPolicyNotEnforced, unheld
            )
        if created and resumption is not None:
            for line in describe_replays(resumption, targets):
                self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.SessionReplayed, line)
        if created and index > 1:
            failed = attempts[-1]
            positions = [t.position for t in targets]
            observed = Observed([t.provider for t in targets], attempts, positions=positions)
            reason, line = describe_next_attempt(run, observed, index)
            counter = metrics.RETRIES if reason == Reason.Retrying else metrics.FALLBACKS
            counter.labels(namespace=ns, provider=failed.provider).inc()
            self.kube.create_event({"metadata": run.metadata}, "Warning", reason, line)
        return None

    def runs_waiting(self, namespace: str) -> list[tuple[str, str]]:
        """The namespace's queued and waiting runs, to reconcile when one of its Jobs has finished: a
        run can end (its runner reported) before the Job controller marks its Job complete, and a run
        woken in between finds the slot still taken and stays Queued."""
        return self._runs_to_wake(namespace)

    def _runs_to_wake(self, namespace: str) -> list[tuple[str, str]]:
        """Runs that may move now a run has ended: the earliest queued, one per free slot, and those
        waiting for a run's output or for budget room (from the caches: no LIST)."""
        in_flight = len(self.children.in_flight(namespace))
        with self._namespace_locks[namespace]:
            queue = self._queue(namespace)
        names = compute_runs_to_wake(queue, in_flight, self.config.max_runs_per_namespace)
        return [(namespace, name) for name in names]
