"""`harnessctl logs`: follow a run's attempts, or a pipeline's steps and their runs, through the API and hand
their events on, in order (I/O); what a pipeline's follower says, as text or JSON (pure)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessPipeline, HarnessPipelineStatus, HarnessRun, StepStatus
from harness_operator.contract.events import Event, decode_event_line, render_event
from harness_operator.controller.kube import Kube
from harness_operator.core.objects.conditions import (
    SUCCEEDED,
    is_finished,
    is_succeeded,
)
from harness_operator.core.objects.naming import output_config_map_name
from harness_operator.core.objects.ownership import is_run_output
from harness_operator.core.pipeline.graph import build_order
from harness_operator.core.resolve.retry import build_positions, retry_number
from harness_operator.core.status.watch import (
    build_attempt_events,
    build_pods_by_attempt,
    build_run_event,
    build_waiting_event,
    is_attempt_over,
    is_log_readable,
    is_unclaimed,
)

WAKE_SECONDS = 30.0  # a follower reads afresh at least this often, watches or not


class RunNotFound(LookupError):
    """The run does not exist (or went away while followed)."""


def follow_run(
    kube: Kube,
    namespace: str,
    name: str,
    follow: bool,
    write: Callable[[Event], None],
    changed: threading.Event | None = None,
) -> int:
    """Write every attempt's events, then the run's outcome; 0 unless the run ended without success.

    An attempt whose pod is still there is read from its log (followed while it runs, with `follow`);
    one whose pod is gone is told from status.attempts[] and, for the answer, the output ConfigMap.
    Between attempts and until the run's status is final it waits for a watch of the run or its pods
    to say something changed: pods of the next attempt have no log to follow yet; `changed` given, the
    caller's watches set it instead. Meanwhile, with `follow`, it says why the run waits each time the
    reason changes (from the run's status)."""
    shown = 0
    hinted = False
    said: Event | None = None
    if changed is None:
        changed = threading.Event()
        if follow:
            kube.watch_run_and_pods(namespace, name, changed.set)
    while True:
        changed.clear()
        raw = kube.fetch_run(namespace, name)
        if raw is None:
            raise RunNotFound(f'HarnessRun "{name}" not found in namespace "{namespace}"')
        run = HarnessRun.model_validate(raw)
        status = run.status
        positions = build_positions(run.spec)
        total = len(positions)
        pods = build_pods_by_attempt(kube.fetch_pods(namespace, name))
        recorded = {a.index: a for a in (status.attempts if status else [])}
        for index in range(shown + 1, total + 1):
            pod = pods.get(index)
            attempt = recorded.get(index)
            if pod is None and attempt is None and any(i > index for i in [*pods, *recorded]):
                pass  # a number a retry not needed left unused (core/resolve/retry.py)
            elif pod is not None and is_log_readable(pod):
                live = follow and not is_attempt_over(pod)
                for line in kube.fetch_pod_log_lines(namespace, pod["metadata"]["name"], follow=live):
                    event = decode_event_line(line.rstrip("\r"))
                    if event is not None:
                        write(event)
            elif attempt is not None and (attempt.exit_code is not None or attempt.reason):
                output = _read_output(kube, raw) if attempt.exit_code == 0 and not attempt.reason else None
                retry = retry_number(positions, index)
                for event in build_attempt_events(attempt, total, output, retry):
                    write(event)
            else:
                break
            shown = index
        finished = is_finished(status.conditions if status else [])
        unclaimed_in = namespace if is_unclaimed(raw, datetime.now(UTC)) else None
        if finished or not follow:
            write(build_run_event(status, unclaimed_in))
            return 1 if finished and status is not None and not is_succeeded(status.conditions) else 0
        waiting = build_waiting_event(status)
        if waiting is not None and waiting != said:
            write(waiting)
        said = waiting
        if unclaimed_in is not None and not hinted:
            write(build_run_event(status, unclaimed_in))  # once; following goes on, an operator may come
            hinted = True
        changed.wait(WAKE_SECONDS)


def _read_output(kube: Kube, run: dict[str, Any]) -> str | None:
    """The answer from the output ConfigMap, only when it is this run's (owner and hash checked)."""
    meta = run["metadata"]
    cm = kube.fetch_config_map(meta["namespace"], output_config_map_name(meta["name"]))
    if cm is None or not is_run_output(cm, run):
        return None
    return str(cm["data"]["output"])


class PipelineNotFound(LookupError):
    """The pipeline does not exist (or went away while followed)."""


@dataclass(frozen=True)
class PipelineNews:
    """What `harnessctl logs pipeline/NAME` tells: a step's new phase (`step`, `phase`, `message`), an
    event of one of its runs (`step`, `run`, `event`; no event: the run is gone), or the pipeline's
    outcome (`step` None: `phase`, `reason`, `message`)."""

    step: str | None
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    run: str | None = None
    event: Event | None = None

    def render(self) -> str | None:
        """Lines for a person: a run's prefixed with [step/run]; None for events that add nothing."""
        if self.run is not None:
            line = render_event(self.event) if self.event else "not found: deleted before it was read"
            if line is None:
                return None
            return "\n".join(f"[{self.step}/{self.run}] {part}" for part in line.split("\n"))
        if self.step is not None:
            return f"step {self.step}: {self.phase}" + (f" ({self.message})" if self.message else "")
        return f"pipeline {self.phase} ({self.reason})" + (f": {self.message}" if self.message else "")

    def to_json(self) -> dict[str, Any]:
        """One JSON line: a run's event with its step and run added, else kind `step` or `pipeline`."""
        if self.run is not None:
            event = self.event.to_json() if self.event else {"kind": "gone"}
            return {**event, "step": self.step, "run": self.run}
        kind = "step" if self.step is not None else "pipeline"
        fields = {"step": self.step, "phase": self.phase, "reason": self.reason, "message": self.message}
        return {"kind": kind, **{k: v for k, v in fields.items() if v is not None}}


def _tell_steps(
    steps: list[StepStatus], said: dict[str, tuple[str, str | None]], write: Callable[[PipelineNews], None]
) -> None:
    for step in steps:
        now = (str(step.phase), step.message)
        if said.get(step.name) != now:
            write(PipelineNews(step.name, phase=now[0], message=step.message))
            said[step.name] = now


def _run_writer(write: Callable[[PipelineNews], None], step: str, run: str) -> Callable[[Event], None]:
    return lambda event: write(PipelineNews(step, run=run, event=event))


def follow_pipeline(
    kube: Kube, namespace: str, name: str, follow: bool, write: Callable[[PipelineNews], None]
) -> int:
    """Write each step's phase as it changes and each of its runs' events, the runs one after another in
    the steps' order (each followed to its end with `follow`, as follow_run follows a run), then the
    pipeline's outcome; 0 unless the pipeline ended without success. With `follow` it waits for a watch
    of the pipeline or its runs to say something changed, and goes on until the pipeline has ended."""
    said: dict[str, tuple[str, str | None]] = {}
    done: set[str] = set()
    changed = threading.Event()
    if follow:
        kube.watch_pipeline(namespace, name, changed.set)
    while True:
        changed.clear()
        raw = kube.fetch_pipeline(namespace, name)
        if raw is None:
            raise PipelineNotFound(f'HarnessPipeline "{name}" not found in namespace "{namespace}"')
        pipeline = HarnessPipeline.model_validate(raw)
        status = pipeline.status or HarnessPipelineStatus()
        finished = is_finished(status.conditions)
        order = build_order(pipeline.spec)
        steps = sorted(status.steps, key=lambda s: order.index(s.name) if s.name in order else len(order))
        _tell_steps(steps, said, write)
        pending = next(((s.name, r.name) for s in steps for r in s.runs if r.name not in done), None)
        if pending is not None:
            step, run = pending
            try:
                follow_run(kube, namespace, run, follow, _run_writer(write, step, run), changed)
            except RunNotFound:
                if follow and not finished:  # listed before it was created: wait for it
                    changed.wait(WAKE_SECONDS)
                    continue
                write(PipelineNews(step, run=run))
            done.add(run)
            continue
        if finished or not follow:
            ended = next((c for c in status.conditions if c.type == SUCCEEDED), None)
            reason, message = (ended.reason, ended.message) if ended else (Reason.Pending, None)
            write(PipelineNews(None, phase=status.phase or "Pending", reason=reason, message=message))
            return 1 if finished and not is_succeeded(status.conditions) else 0
        changed.wait(WAKE_SECONDS)
