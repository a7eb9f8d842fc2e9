"""A pipeline's next step: the runs to create and cancel, its Events and its status (pure).

A step starts when every step it runs after has ended and none of them stops it: a failed step stops
what runs after it unless it has continueOn.failure, and a skipped or cancelled step stops it too. The
pipeline runs until every step has ended, and ends Failed when a step failed (continueOn lets the rest
run, as in Dagu), Cancelled on spec.cancel, else Succeeded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    HarnessPipeline,
    HarnessPipelineStatus,
    PipelineRunRef,
    PipelineStep,
    StepPhase,
    StepStatus,
)
from harness_operator.contract.times import timestamp
from harness_operator.core.objects.conditions import (
    FALSE,
    SUCCEEDED,
    TRUE,
    UNKNOWN,
    compute_kstatus_conditions,
    set_condition,
)
from harness_operator.core.objects.events import PlannedEvent
from harness_operator.core.objects.naming import fit_name
from harness_operator.core.pipeline.graph import build_combinations, build_order, compute_pipeline_problems
from harness_operator.core.pipeline.runs import Field, StepRun, build_step_runs, select_source

ENDED = {StepPhase.Succeeded, StepPhase.Failed, StepPhase.Skipped, StepPhase.Cancelled}


@dataclass(frozen=True)
class PipelineDecision:
    """What to do now: the runs to create (step by step) and to cancel, the Events, the status."""

    status: HarnessPipelineStatus
    needs: list[Field] = field(default_factory=list)  # output fields to read, then decide again
    create: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (step, run); each announced
    # with build_created_event once the controller has created it
    cancel: list[str] = field(default_factory=list)
    events: list[PlannedEvent] = field(default_factory=list)


def _run_ref(run: StepRun) -> PipelineRunRef:
    return PipelineRunRef(
        name=run.name, phase=run.phase, provider=run.provider, matrix=run.matrix, cost_usd=run.cost_usd
    )


def _ended_phase(runs: list[StepRun], expected: int) -> StepPhase:
    """The phase of a step whose runs have all ended."""
    if len(runs) >= expected and all(r.succeeded for r in runs):
        return StepPhase.Succeeded
    if any(not r.succeeded and not r.cancelled for r in runs):
        return StepPhase.Failed
    return StepPhase.Cancelled


def _blocker(step: PipelineStep, phases: Mapping[str, StepStatus], continues: set[str]) -> str | None:
    """Why the step will never start (an earlier step stops it), if it will not."""
    for name in step.after:
        phase = phases[name].phase
        if phase in (StepPhase.Skipped, StepPhase.Cancelled) or (
            phase == StepPhase.Failed and name not in continues
        ):
            return f"step {name} {phase.lower()}"
    return None


def _step(
    pipeline: HarnessPipeline,
    step: PipelineStep,
    runs: list[StepRun],
    phases: Mapping[str, StepStatus],
    done: Mapping[str, list[StepRun]],
    refused: Mapping[str, str],
    fields: Mapping[Field, str | None],
) -> tuple[StepStatus, list[dict[str, Any]], list[str], tuple[Field, ...]]:
    """The step's status, the runs to create for it, the runs to cancel and the fields to read first."""
    spec = pipeline.spec
    expected = len(build_combinations(step.matrix))
    refs = [_run_ref(r) for r in sorted(runs, key=lambda r: r.index)]
    continues = {s.name for s in spec.steps if s.continue_on and s.continue_on.failure}
    if step.name in refused:
        return (
            StepStatus(name=step.name, phase=StepPhase.Failed, message=refused[step.name], runs=refs),
            [],
            [],
            (),
        )
    if spec.cancel:
        cancel = [r.name for r in runs if not r.finished and not r.cancelled]
        if runs and not all(r.finished for r in runs):
            return StepStatus(name=step.name, phase=StepPhase.Running, runs=refs), [], cancel, ()
        phase = _ended_phase(runs, expected) if runs else StepPhase.Cancelled
        return StepStatus(name=step.name, phase=phase, runs=refs), [], [], ()
    if runs and len(runs) >= expected:
        if not all(r.finished for r in runs):
            return StepStatus(name=step.name, phase=StepPhase.Running, runs=refs), [], [], ()
        return StepStatus(name=step.name, phase=_ended_phase(runs, expected), runs=refs), [], [], ()
    blocker = _blocker(step, phases, continues)
    if blocker is not None:
        return StepStatus(name=step.name, phase=StepPhase.Skipped, message=blocker, runs=refs), [], [], ()
    waiting = [name for name in step.after if phases[name].phase not in ENDED]
    if waiting:
        message = "waits for step " + ", ".join(waiting)
        return StepStatus(name=step.name, phase=StepPhase.Waiting, message=message, runs=refs), [], [], ()
    source = None
    if step.workspace_from is not None:
        chosen = select_source(step.workspace_from, done, fields)
        if chosen.problem is not None:
            return StepStatus(name=step.name, phase=StepPhase.Failed, message=chosen.problem), [], [], ()
        if chosen.needs:
            message = "reads the output its workspaceFrom names"
            return StepStatus(name=step.name, phase=StepPhase.Waiting, message=message), [], [], chosen.needs
        source = chosen.run
    fanned = {s.name for s in spec.steps if s.matrix is not None}
    have = {r.name for r in runs}
    made = build_step_runs(pipeline, step, done, fanned, source)
    create = [r for r in made if r["metadata"]["name"] not in have]
    refs += [
        PipelineRunRef(name=r["metadata"]["name"], phase="Pending", provider=r["spec"]["provider"])
        for r in create
    ]
    return StepStatus(name=step.name, phase=StepPhase.Running, runs=refs), create, [], ()


def _outcome(pipeline: HarnessPipeline, steps: list[StepStatus]) -> tuple[str, str, str]:
    """(Succeeded's status, reason, message) from the steps' phases."""
    unended = [s.name for s in steps if s.phase not in ENDED]
    failed = [s.name for s in steps if s.phase == StepPhase.Failed]
    if unended:
        return UNKNOWN, Reason.Running, "steps running or waiting: " + ", ".join(unended)
    if failed:
        return FALSE, Reason.StepFailed, "failed: step " + ", ".join(failed)
    if pipeline.spec.cancel:
        return FALSE, Reason.Cancelled, "spec.cancel was set; no further step started"
    return TRUE, Reason.Succeeded, f"all {len(steps)} steps succeeded"


def _event_name(pipeline: HarnessPipeline, what: str) -> str:
    meta = pipeline.metadata
    return fit_name(f"{meta['name']}.{meta.get('uid', '')}", f".{what}", 253)


def build_created_event(step: str, run: str) -> PlannedEvent:
    """The Event of a run created for a step."""
    return PlannedEvent("Normal", Reason.RunCreated, f"created run {run} for step {step}")


def decide_pipeline(
    pipeline: HarnessPipeline,
    runs: list[StepRun],
    now: datetime,
    refused: Mapping[str, str] | None = None,
    fields: Mapping[Field, str | None] | None = None,
) -> PipelineDecision:
    """The pipeline's next step from its spec, its status and the runs it owns. `refused` names the steps
    whose run the API server refused just now, with its message (kept in the status from then on);
    `fields` holds the output fields read for a workspaceFrom (decision.needs says which to read)."""
    meta, spec = pipeline.metadata, pipeline.spec
    previous = pipeline.status or HarnessPipelineStatus()
    generation = meta.get("generation")
    refused = {
        **{s.name: s.message or "" for s in previous.steps if s.phase == StepPhase.Failed and not s.runs},
        **(refused or {}),
    }
    if previous.completion_time is not None:  # ended: its runs may expire (TTL); nothing starts again
        return PipelineDecision(previous)
    problems = compute_pipeline_problems(spec)
    if problems:
        conditions = set_condition(
            previous.conditions,
            SUCCEEDED,
            FALSE,
            Reason.InvalidPipeline,
            "; ".join(problems),
            generation,
            now,
        )
        status = previous.model_copy(
            update={
                "phase": "Failed",
                "completion_time": timestamp(now),
                "conditions": compute_kstatus_conditions(conditions, generation, now),
                "observed_generation": generation,
            }
        )
        event = PlannedEvent(
            "Warning", Reason.InvalidPipeline, "; ".join(problems), _event_name(pipeline, "invalid")
        )
        return PipelineDecision(status, events=[event])
    by_step: dict[str, list[StepRun]] = {}
    for run in runs:
        by_step.setdefault(run.step, []).append(run)
    steps = {s.name: s for s in spec.steps}
    phases: dict[str, StepStatus] = {}
    done: dict[str, list[StepRun]] = {}
    create: list[tuple[str, dict[str, Any]]] = []
    cancel: list[str] = []
    needs: list[Field] = []
    for name in build_order(spec):
        own = by_step.get(name, [])
        done[name] = sorted((r for r in own if r.succeeded), key=lambda r: r.index)
        phases[name], made, stop, read = _step(
            pipeline, steps[name], own, phases, done, refused, fields or {}
        )
        create += [(name, run) for run in made]
        cancel += stop
        needs += read
    ordered = [phases[s.name] for s in spec.steps]
    state, reason, message = _outcome(pipeline, ordered)
    conditions = set_condition(previous.conditions, SUCCEEDED, state, reason, message, generation, now)
    costs = [r.cost_usd for r in runs if r.cost_usd is not None]
    ended = state != UNKNOWN
    status = HarnessPipelineStatus(
        phase={TRUE: "Succeeded", UNKNOWN: "Running" if runs or create else "Pending"}.get(
            state, "Cancelled" if reason == Reason.Cancelled else "Failed"
        ),
        steps=ordered,
        step_phases=" ".join(s.phase for s in ordered),
        cost_usd=round(sum(costs), 6) if costs else None,
        start_time=previous.start_time or (timestamp(now) if runs or create else None),
        completion_time=previous.completion_time or (timestamp(now) if ended else None),
        conditions=compute_kstatus_conditions(conditions, generation, now),
        observed_generation=generation,
    )
    events = []
    if ended and previous.completion_time is None:
        kind = "Normal" if state == TRUE else "Warning"
        events.append(PlannedEvent(kind, reason, message, _event_name(pipeline, "end")))
    return PipelineDecision(status, needs, create, cancel, events)
