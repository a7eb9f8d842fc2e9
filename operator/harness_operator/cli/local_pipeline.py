"""`harnessctl run` of a HarnessPipeline: its steps' runs on this machine, one after another, as the
operator would create them (I/O).

decide_pipeline says which runs to create from the runs ended so far (a step after the steps it names,
each matrix combination a run, a failed step stopping what runs after it unless continueOn.failure, the
output fields a workspaceFrom names read first); each is run as a HarnessRun of the files is, so a step
reads an earlier step's output through runOutput as a chained run does. Progress goes to stderr; the
outputs of the final steps (those no step runs after) are the pipeline's output.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from harness_operator.api.v1alpha1 import HarnessPipeline, HarnessPipelineStatus, HarnessRunStatus
from harness_operator.cli.manifests import Document
from harness_operator.contract.structured_output import pick_field
from harness_operator.core.objects.conditions import SUCCEEDED
from harness_operator.core.pipeline.decide import ENDED, decide_pipeline
from harness_operator.core.pipeline.graph import build_order
from harness_operator.core.pipeline.runs import Field, StepRun, build_step_run_entry

LOCAL_UID = "harnessctl-run"  # no API server assigns one on this machine

# Runs one HarnessRun manifest to its end: (its final status, its exit code).
RunOne = Callable[[Document], tuple[HarnessRunStatus, int]]


@dataclass
class PipelineOutcome:
    """What a local pipeline did: its status, its runs' statuses, the final steps' outputs, the exit code
    (0 when it succeeded, else its first failed run's, else 1)."""

    status: HarnessPipelineStatus
    runs: list[tuple[str, HarnessRunStatus]] = field(default_factory=list)
    outputs: list[bytes] = field(default_factory=list)
    code: int = 0


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _say_ended(label: str, status: HarnessPipelineStatus, said: set[str]) -> None:
    """A line for each step that has ended since the last time."""
    for step in status.steps:
        if step.phase in ENDED and step.name not in said:
            said.add(step.name)
            why = f": {step.message}" if step.message else ""
            _say(f"harness: HarnessPipeline {label}: step {step.name} {step.phase.lower()}{why}")


def _read(outputs: Mapping[tuple[str, str], bytes], namespace: str, run: str, path: str | None) -> str | None:
    """One field (path None: all) of a run's output, as the operator reads it; None when there is none."""
    output = outputs.get((namespace, run))
    if output is None:
        return None
    text = output.decode("utf-8", "replace")
    try:
        return pick_field(text, path) if path else text
    except (KeyError, ValueError):
        return None


def run_pipeline(
    doc: Document, run_one: RunOne, outputs: Mapping[tuple[str, str], bytes], cancel: threading.Event
) -> PipelineOutcome:
    """Run the pipeline of `doc` (validated already) to its end with `run_one`; `outputs` holds each run's
    output once it succeeded (the runs' reader fills it); `cancel` set stops it as spec.cancel does."""
    meta = {**doc.obj.get("metadata", {}), "namespace": doc.namespace, "uid": LOCAL_UID}
    pipeline = HarnessPipeline.model_validate({**doc.obj, "metadata": meta})
    label = f"{doc.namespace}/{doc.name}"
    outcome = PipelineOutcome(HarnessPipelineStatus())
    ran: list[StepRun] = []
    fields: dict[Field, str | None] = {}
    said: set[str] = set()
    while True:
        if cancel.is_set() and not pipeline.spec.cancel:
            pipeline = pipeline.model_copy(update={"spec": pipeline.spec.model_copy(update={"cancel": True})})
        decision = decide_pipeline(pipeline, ran, datetime.now(UTC), fields=fields)
        if decision.needs:  # a workspaceFrom names its run by an output: read it, then decide again
            fields |= {needed: _read(outputs, doc.namespace, *needed) for needed in decision.needs}
            decision = decide_pipeline(pipeline, ran, datetime.now(UTC), fields=fields)
        pipeline = pipeline.model_copy(update={"status": decision.status})
        _say_ended(label, decision.status, said)
        if not decision.create:
            break
        started: set[str] = set()
        for step, body in decision.create:
            if cancel.is_set():
                break
            if step not in started:
                started.add(step)
                names = [r["metadata"]["name"] for s, r in decision.create if s == step]
                _say(f"harness: HarnessPipeline {label}: step {step} started: {', '.join(names)}")
            status, code = run_one(Document(doc.path, body))
            spec = {**body["spec"], "cancel": cancel.is_set()}  # as the operator marks the runs it cancels
            entry = build_step_run_entry({**body, "spec": spec, "status": status.to_api()})
            assert entry is not None  # build_step_runs made it a run of this pipeline
            ran.append(entry[1])
            outcome.runs.append((f"{doc.namespace}/{body['metadata']['name']}", status))
            outcome.code = outcome.code or code
    outcome.status = decision.status
    ended = next((c for c in decision.status.conditions if c.type == SUCCEEDED), None)
    _say(
        f"harness: HarnessPipeline {label}: {decision.status.phase}" + (f": {ended.message}" if ended else "")
    )
    if decision.status.phase != "Succeeded":
        outcome.code = outcome.code or 1
    final = [
        name for name in build_order(pipeline.spec) if not any(name in s.after for s in pipeline.spec.steps)
    ]
    for name in final:
        for run in sorted((r for r in ran if r.step == name and r.succeeded), key=lambda r: r.index):
            output = outputs.get((doc.namespace, run.name))
            if output is not None:
                outcome.outputs.append(output)
    return outcome
