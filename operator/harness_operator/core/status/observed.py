"""What the operator observed of a run's attempts: each one's state and result from its Job and Pods,
merged with what status.attempts[] recorded (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, ChangesStatus, HarnessRunStatus, Usage
from harness_operator.contract.result import EXIT_STOPPED, ResultDocument
from harness_operator.contract.times import normalize_time, parse_time, timestamp
from harness_operator.core.objects.naming import (
    AGENT_CONTAINER,
    CLONE_CONTAINER,
    KUEUE_QUEUE_LABEL,
    PUBLISH_CONTAINER,
    RUNNER_CONTAINER,
)
from harness_operator.core.queue.kueue import describe_eviction, describe_wait
from harness_operator.core.status.results import (
    compute_clone_failure,
    container_state,
    explain_stop,
    lost_result,
    pod_init_containers,
    preempted_result,
    read_result,
)

PENDING, SUSPENDED, RUNNING, FINISHED = "Pending", "Suspended", "Running", "Finished"
# Waits every pod goes through on its way to start: nothing to explain.
ROUTINE_WAITS = frozenset({"ContainerCreating", "PodInitializing"})
STATUS_KEYS = ("initContainerStatuses", "containerStatuses")  # init containers run, and so wait, first


@dataclass(frozen=True)
class PodStep:
    """A step of an attempt's pod: `name` (schedule, clone, runner, agent, publish) from start to end."""

    name: str
    start: str
    end: str


# The containers whose run is a step of the attempt, and where the kubelet records them.
STEP_CONTAINERS = (
    ("clone", CLONE_CONTAINER, "initContainerStatuses"),
    ("runner", RUNNER_CONTAINER, "containerStatuses"),
    ("agent", AGENT_CONTAINER, "containerStatuses"),
    ("publish", PUBLISH_CONTAINER, "initContainerStatuses"),
)


def compute_pod_steps(pod: Mapping[str, Any] | None) -> tuple[PodStep, ...]:
    """The pod's scheduling (its creation until the scheduler placed it) and each container's run that
    ended, in that order; steps without both times are left out. The publisher is a sidecar that waits for
    the agent: its step starts when the agent ended."""
    if not pod:
        return ()
    steps = []
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled = next(
        (
            c.get("lastTransitionTime")
            for c in conditions
            if c.get("type") == "PodScheduled" and c.get("status") == "True"
        ),
        None,
    )
    if created and scheduled:
        steps.append(PodStep("schedule", created, scheduled))
    agent_end = None
    for step, container, kind in STEP_CONTAINERS:
        ended = container_state(dict(pod), container, kind).get("terminated") or {}
        start, end = ended.get("startedAt"), ended.get("finishedAt")
        if step == "agent":
            agent_end = end
        if step == "publish" and start and agent_end:
            start = max(start, agent_end, key=lambda t: parse_time(t) or datetime.min.replace(tzinfo=UTC))
        if start and end:
            steps.append(PodStep(step, start, end))
    return tuple(steps)


@dataclass(frozen=True)
class ObservedAttempt:
    """One attempt's Job and Pod as seen; `result` is the runner's result document once it finished."""

    index: int
    provider: str
    job_name: str | None = None
    pod_name: str | None = None
    state: str = PENDING
    start_time: str | None = None
    result: ResultDocument | None = None
    # Ended, but the agent's container still runs (the runner gave up on it, or died): the Job goes.
    agent_running: bool = False
    # The publishing container's terminated state (spec.workspace.publish), once it ended.
    publisher: dict[str, Any] | None = None
    # Ended because Kueue took it back after it started, or would run it on another cluster: its Job goes
    # before Kueue admits it (again).
    withdrawn: bool = False
    # Why the attempt waits: Kueue holds its Job (state SUSPENDED), in Kueue's words; or its pod cannot be
    # placed or started (state PENDING), in the scheduler's or the kubelet's (describe_pod_wait).
    waiting: str | None = None
    # The MultiKueue worker cluster its Job runs on (core/queue/multikueue); None: this cluster.
    cluster: str | None = None
    # Once finished: when its pod was scheduled and each container ran, as the kubelet recorded them
    # (compute_pod_steps): the steps of the attempt's span.
    steps: tuple[PodStep, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.result is not None and self.result.succeeded


@dataclass(frozen=True)
class Observed:
    """Everything compute_status needs; built by reconcile from what the API server returned."""

    providers: list[str]
    attempts: list[ObservedAttempt] = field(default_factory=list)
    output: bytes | None = None
    output_config_map: str | None = None
    changes: ChangesStatus | None = None
    # The agent succeeded but publishing its change failed: (reason, message).
    publish_failed: tuple[str, str] | None = None
    # The agent succeeded and its change is kept for a person's approval (nothing pushed yet).
    awaiting_approval: bool = False
    # The agent succeeded but its output does not match spec.outputSchema: (OutputInvalid, message).
    output_invalid: tuple[str, str] | None = None
    rejected: tuple[str, str] | None = None
    waiting: tuple[str, str] | None = None
    failed: tuple[str, str] | None = None
    cancelled: bool = False
    # The chain position of each attempt number (retry.build_positions); empty: one attempt per provider.
    positions: list[int] = field(default_factory=list)
    # What the model gateway metered for the run beyond its attempts' meters (core/status/metered.py), read at
    # its end: counted in the run's usage, so in its budget's charge.
    unattributed: Usage | None = None


def _job_condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def is_job_finished(job: dict[str, Any]) -> bool:
    """The Job completed or failed (a suspended or running Job is still in flight)."""
    return _job_condition(job, "Complete") is not None or _job_condition(job, "Failed") is not None


def observe_attempt(
    index: int,
    provider: str,
    job: dict[str, Any],
    pods: Sequence[dict[str, Any]],
    cancelled: bool = False,
    workload: Mapping[str, Any] | None = None,
    local_queue: Mapping[str, Any] | None = None,
) -> ObservedAttempt:
    """The state and, when over, the result document of one attempt from its Job and the Pods it
    controls; `cancelled` says whether spec.cancel asked the attempt to stop. For a Job Kueue manages,
    its Workload and LocalQueue (slim, core/queue/kueue) say why it waits, or that Kueue took it back.
    A finished attempt carries its pod's steps."""
    name = job["metadata"]["name"]
    pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)
    pod_name = pod["metadata"]["name"] if pod else None

    def finished(result: ResultDocument, **more: Any) -> ObservedAttempt:
        steps = compute_pod_steps(pod)
        return ObservedAttempt(index, provider, name, pod_name, FINISHED, start, result, steps=steps, **more)

    runner = container_state(pod, RUNNER_CONTAINER).get("terminated")
    agent = container_state(pod, AGENT_CONTAINER)
    failed = _job_condition(job, "Failed")
    complete = _job_condition(job, "Complete")
    # The Job's start, else (the Job controller records it a moment after it creates the pod) the pod's
    # creation; none before the pod is seen (unless the Job has ended), so that the pod's first event
    # writes its name and the start in one status write, not a write for each.
    start = None
    if pod is not None or failed or complete:
        start = normalize_time((job.get("status") or {}).get("startTime")) or normalize_time(
            (pod or {}).get("metadata", {}).get("creationTimestamp")
        )
    suspended = bool((job.get("spec") or {}).get("suspend")) and not (failed or complete)
    queue = str((job["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL) or "")
    if suspended and not cancelled:
        # Suspended again after its pod started, or its Workload evicted: whatever the runner reported
        # as it was stopped, the attempt ends here, and its Job goes before Kueue re-creates the pod.
        eviction = describe_eviction(workload)
        if pod is not None or eviction:
            why = eviction or f"Kueue suspended Job {name} again after its pod {pod_name} started"
            result = preempted_result(index, provider, why)
            return finished(result, withdrawn=True)
    if runner:
        result, reported = read_result(index, provider, runner, agent.get("terminated"))
        agent_running = "running" in agent
        if agent_running and reported and not result.agent_left_running and not failed:
            # The runner ends once the agent's processes are gone; the kubelet records the agent's
            # container a moment later, and its exit is what the report is checked against.
            return ObservedAttempt(index, provider, name, pod_name, RUNNING, start)
        result = explain_stop(result, failed, cancelled, name)
        publishes = any(c.get("name") == PUBLISH_CONTAINER for c in pod_init_containers(pod))
        publisher = container_state(pod, PUBLISH_CONTAINER, "initContainerStatuses").get("terminated")
        if result.succeeded and publishes and publisher is None and not failed:
            # The kubelet stops the publisher once the runner and the agent have ended; its report is the
            # rest of the attempt.
            return ObservedAttempt(index, provider, name, pod_name, RUNNING, start)
        return finished(result, agent_running=agent_running, publisher=publisher)
    clone = container_state(pod, CLONE_CONTAINER, "initContainerStatuses").get("terminated")
    if clone and clone.get("exitCode"):
        result = compute_clone_failure(index, provider, clone)
        return finished(result)
    if failed:
        deadline = failed.get("reason") == "DeadlineExceeded"
        result = ResultDocument(
            attempt=index,
            provider=provider,
            exit_code=EXIT_STOPPED if deadline else 1,
            reason=Reason.Timeout if deadline else Reason.PodFailed,
            message=failed.get("message") or failed.get("reason") or "the Job failed",
        )
        if pod is None and not deadline:
            result = lost_result(index, provider, f"the pod of Job {name} vanished")
        return finished(result)
    if complete:
        result = ResultDocument(attempt=index, provider=provider, exit_code=0)
        return finished(result)
    if suspended:
        waiting = describe_wait(queue, workload, local_queue) if queue else None
        return ObservedAttempt(index, provider, name, pod_name, SUSPENDED, start, waiting=waiting)
    if (pod or {}).get("status", {}).get("phase") == "Running":
        return ObservedAttempt(index, provider, name, pod_name, RUNNING, start)
    waiting = describe_pod_wait(pod)
    if waiting is None:
        # A pod on its way to start, as every pod is: its name and start are written with Running, one
        # status write, not one for each.
        return ObservedAttempt(index, provider, name, None, PENDING, None)
    return ObservedAttempt(index, provider, name, pod_name, PENDING, start, waiting=waiting)


def describe_pod_wait(pod: dict[str, Any] | None) -> str | None:
    """Why the pod waits, or None when it waits as every pod does (or there is none yet): the scheduler
    cannot place it (its PodScheduled condition, e.g. Unschedulable: 0/1 nodes are available: 1
    Insufficient cpu), or a container cannot start (ErrImagePull, ImagePullBackOff,
    CreateContainerConfigError, ... with the kubelet's message)."""
    if pod is None:
        return None
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            why = f" ({cond['reason']})" if cond.get("reason") else ""
            said = cond.get("message") or "the scheduler gave no message"
            return f"the scheduler cannot place pod {name}{why}: {said}"
    for key in STATUS_KEYS:
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason and reason not in ROUTINE_WAITS:
                said = waiting.get("message") or "the kubelet gave no message"
                return f"container {container.get('name')} of pod {name} cannot start ({reason}): {said}"
    return None


def build_result_from_attempt(attempt: Attempt) -> ResultDocument:
    """The result document an ended attempt's status entry records (the inverse of
    core/status/status.build_attempt)."""
    assert attempt.exit_code is not None
    return ResultDocument(**attempt.outcome())


def recorded_attempts(status: HarnessRunStatus | None) -> list[ObservedAttempt]:
    """The attempts as status.attempts[] records them: ended when an exit code is recorded."""
    out = []
    for attempt in status.attempts if status else []:
        ended = attempt.exit_code is not None
        out.append(
            ObservedAttempt(
                attempt.index,
                attempt.provider,
                attempt.job_name,
                attempt.pod_name,
                FINISHED if ended else PENDING,
                attempt.start_time,
                build_result_from_attempt(attempt) if ended else None,
                cluster=attempt.cluster,
            )
        )
    return out


def merge_attempts(
    recorded: Sequence[ObservedAttempt], seen: dict[int, ObservedAttempt], cancelled: bool, now: datetime
) -> list[ObservedAttempt]:
    """Every attempt of a run from its durable record (status.attempts[]) and the Jobs that exist.

    A Job is the truth for its attempt. A recorded attempt whose Job is gone keeps the end it recorded;
    without one, it started and vanished: it ends lost (or cancelled, when spec.cancel removed it) and
    is never created again, so no attempt runs twice."""
    by_index = {a.index: a for a in recorded}
    out = []
    for index in sorted(set(seen) | set(by_index)):
        record = by_index.get(index)
        if index in seen:
            attempt = seen[index]
            if attempt.state == SUSPENDED and record and record.pod_name and record.state != FINISHED:
                # Kueue suspended it again after its recorded pod ran (missed while that pod went away).
                why = f"Kueue suspended Job {attempt.job_name} again after its pod {record.pod_name} ran"
                result = preempted_result(index, attempt.provider, why)
                attempt = replace(attempt, state=FINISHED, result=result, withdrawn=True)
            out.append(attempt)
            continue
        assert record is not None
        if record.state == FINISHED:
            out.append(record)
            continue
        if cancelled:
            result = ResultDocument(
                attempt=index,
                provider=record.provider,
                exit_code=EXIT_STOPPED,
                reason=Reason.Cancelled,
                message="cancelled by spec.cancel",
            )
        else:
            result = lost_result(index, record.provider, f"Job {record.job_name} vanished")
        result = result.model_copy(update={"completion_time": timestamp(now)})
        out.append(
            ObservedAttempt(
                index,
                record.provider,
                record.job_name,
                record.pod_name,
                FINISHED,
                record.start_time,
                result,
                cluster=record.cluster,
            )
        )
    return out
