"""The runs a pipeline's step creates, and what the pipeline reads back from its runs (pure).

A step's run is its template's spec with the matrix's values put in (provider, with.model,
`$(matrix.NAME)`), each `$(steps.NAME.output...)` made into `$(inputs.…)` of one input per succeeded run
of that step (runOutput, so the run reads the output as any chained run does), and the run its
workspaceFrom chooses as its workspace.from. Names are fixed by the pipeline, the step and the index, so
a restart never creates a run twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness_operator.api.v1alpha1 import API_VERSION, GROUP, HarnessPipeline, PipelineStep, StepWorkspace
from harness_operator.core.objects.conditions import FALSE, SUCCEEDED, TRUE
from harness_operator.core.objects.naming import (
    APPROVAL_PREFIX,
    FORGE_ANNOTATIONS,
    FORGE_LABELS,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    fit_name,
    label_value,
    short_hash,
)
from harness_operator.core.pipeline.graph import MATRIX_REFERENCE, STEP_REFERENCE, build_combinations

LABEL_PIPELINE = f"{GROUP}/pipeline"
LABEL_STEP = f"{GROUP}/pipeline-step"
ANNOTATION_STEP = f"{GROUP}/pipeline-step"  # the step's name in full (a label value may be hashed)
ANNOTATION_INDEX = f"{GROUP}/pipeline-index"
ANNOTATION_MATRIX = f"{GROUP}/pipeline-matrix"


@dataclass(frozen=True)
class StepRun:
    """A run a pipeline controls, as the pipeline reads it."""

    name: str
    uid: str
    step: str
    index: int
    matrix: dict[str, str]
    finished: bool
    succeeded: bool
    cancelled: bool  # its spec.cancel is set
    phase: str | None
    provider: str | None
    cost_usd: float | None


def pipeline_owner(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, UID) of the HarnessPipeline that controls the run; None for any other run."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "HarnessPipeline"
            and ref.get("apiVersion") == API_VERSION
        ):
            return str(ref.get("name")), str(ref.get("uid"))
    return None


def build_step_run_entry(body: Mapping[str, Any]) -> tuple[str, StepRun] | None:
    """(owner pipeline's UID, the run) of a run a HarnessPipeline controls; None for any other run."""
    owner = pipeline_owner(body)
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if owner is None or ANNOTATION_STEP not in annotations:
        return None
    status = body.get("status") or {}
    succeeded = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == SUCCEEDED), None
    )
    attempts = status.get("attempts") or []
    cost = (status.get("usage") or {}).get("costUSD", (status.get("progress") or {}).get("costUSD"))
    try:
        matrix = json.loads(annotations.get(ANNOTATION_MATRIX, "{}"))
        index = int(annotations.get(ANNOTATION_INDEX, "0"))
    except ValueError:
        matrix, index = {}, 0
    return owner[1], StepRun(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        step=annotations[ANNOTATION_STEP],
        index=index,
        matrix=matrix if isinstance(matrix, dict) else {},
        finished=succeeded in (TRUE, FALSE),
        succeeded=succeeded == TRUE,
        cancelled=bool((body.get("spec") or {}).get("cancel")),
        phase=status.get("phase"),
        provider=attempts[-1].get("provider") if attempts else (body.get("spec") or {}).get("provider"),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
    )


Field = tuple[str, str | None]  # (run, path): one field of a run's output, or (path None) all of it


@dataclass(frozen=True)
class Selection:
    """What workspaceFrom chose: the run, or why none (problem), or the output fields it must read first."""

    run: StepRun | None = None
    problem: str | None = None
    needs: tuple[Field, ...] = ()


def select_source(
    workspace: StepWorkspace, done: Mapping[str, list[StepRun]], fields: Mapping[Field, str | None]
) -> Selection:
    """The succeeded run of workspace.step whose matrix values are `where`'s, each reference read from
    `fields` (None: unreadable); the fields to read first when some are not there yet."""
    wanted: dict[str, str] = {}
    needs: list[Field] = []
    for key, value in workspace.where.items():
        match = STEP_REFERENCE.fullmatch(value.strip())
        if match is None:
            wanted[key] = value.strip()
            continue
        read = done.get(match.group(1)) or []
        if len(read) != 1:
            return Selection(problem=f"workspaceFrom.where.{key}: step {match.group(1)} has no succeeded run")
        field = (read[0].name, match.group(2))
        if field not in fields:
            needs.append(field)
        elif fields[field] is None:
            return Selection(
                problem=f"workspaceFrom.where.{key}: the output of run {read[0].name} cannot be read"
            )
        else:
            wanted[key] = str(fields[field]).strip()
    if needs:
        return Selection(needs=tuple(needs))
    runs = [r for r in done.get(workspace.step, []) if all(r.matrix.get(k) == v for k, v in wanted.items())]
    if len(runs) != 1:
        names = ", ".join(f"{k} {v!r}" for k, v in wanted.items())
        return Selection(
            problem=f"workspaceFrom: no succeeded run of step {workspace.step} has {names or 'one run'}"
        )
    return Selection(run=runs[0])


def step_run_name(pipeline: str, step: str, index: int, fanned_out: bool) -> str:
    """The run of `step` (its `index`th, when the step fans out)."""
    return fit_name(f"{pipeline}-{step}", f"-{index}" if fanned_out else "", 253)


def reference_input_name(step: str, index: int, path: str | None) -> str:
    """The input a reference becomes for one run of the referenced step."""
    suffix = f"-{short_hash(path, 6)}" if path else ""
    return fit_name(f"steps-{step}-{index}", suffix, 63)


def _heading(step: str, run: StepRun) -> str:
    values = ", ".join(f"{k}: {v}" for k, v in run.matrix.items())
    return f"### {step}" + (f" ({values})" if values else "")


def _substitute(
    text: str, matrix: dict[str, str], done: Mapping[str, list[StepRun]], fanned: set[str]
) -> tuple[str, list[dict[str, Any]]]:
    """The text with its matrix values and step references put in; the inputs the references need."""
    inputs: dict[str, dict[str, Any]] = {}

    def reference(match: Any) -> str:
        step, path = match.group(1), match.group(2)
        parts = []
        for run in done.get(step, []):
            name = reference_input_name(step, run.index, path)
            ref: dict[str, Any] = {"name": run.name}
            if path:
                ref["path"] = path
            inputs[name] = {"name": name, "runOutput": ref}
            value = f"$(inputs.{name})"
            parts.append(f"{_heading(step, run)}\n{value}" if step in fanned else value)
        return "\n\n".join(parts)

    text = MATRIX_REFERENCE.sub(lambda m: matrix.get(m.group(1), m.group(0)), text)
    return STEP_REFERENCE.sub(reference, text), list(inputs.values())


def build_step_runs(
    pipeline: HarnessPipeline,
    step: PipelineStep,
    done: Mapping[str, list[StepRun]],
    fanned: set[str],
    source: StepRun | None = None,
) -> list[dict[str, Any]]:
    """The HarnessRuns of `step`: one per matrix combination. `done` holds each earlier step's succeeded
    runs (a reference reads those), `fanned` the steps with a matrix (their outputs get headings), `source`
    the run whose change it starts from (its workspaceFrom, chosen by select_source)."""
    meta = pipeline.metadata
    template = step.run
    labels = dict(template.metadata.labels if template.metadata else {})
    annotations = {
        k: v
        for k, v in (template.metadata.annotations if template.metadata else {}).items()
        if not k.startswith(APPROVAL_PREFIX)
    }
    # A trigger's pipeline hands its forge context on, so each run is reported on the issue and a pull
    # request one opens is followed up (core/forge/triggering.py); a template cannot set it.
    labels = {k: v for k, v in labels.items() if k not in FORGE_LABELS}
    labels.update({k: v for k, v in (meta.get("labels") or {}).items() if k in FORGE_LABELS})
    annotations = {k: v for k, v in annotations.items() if k not in FORGE_ANNOTATIONS}
    annotations.update({k: v for k, v in (meta.get("annotations") or {}).items() if k in FORGE_ANNOTATIONS})
    combinations = build_combinations(step.matrix)
    runs = []
    for index, matrix in enumerate(combinations):
        spec = template.spec.to_api()
        inputs = list(spec.get("inputs") or [])
        for key in ("prompt", "stdin"):
            if spec.get(key):
                spec[key], added = _substitute(spec[key], matrix, done, fanned)
                inputs += [i for i in added if i["name"] not in {j["name"] for j in inputs}]
        if inputs:
            spec["inputs"] = inputs
        if "provider" in matrix:
            spec["provider"] = matrix["provider"]
            options = step.matrix.provider_options.get(matrix["provider"]) if step.matrix else None
            if options:
                spec["with"] = {**(spec.get("with") or {}), **options}
        if "model" in matrix:
            spec["with"] = {**(spec.get("with") or {}), "model": matrix["model"]}
        if source is not None:
            spec["workspace"] = {**(spec.get("workspace") or {}), "from": {"run": source.name}}
        runs.append(
            {
                "apiVersion": API_VERSION,
                "kind": "HarnessRun",
                "metadata": {
                    "name": step_run_name(meta["name"], step.name, index, step.matrix is not None),
                    "namespace": meta["namespace"],
                    "labels": {
                        **labels,
                        LABEL_PIPELINE: label_value(meta["name"]),
                        LABEL_STEP: label_value(step.name),
                        LABEL_MANAGED_BY: MANAGED_BY,
                    },
                    "annotations": {
                        **annotations,
                        ANNOTATION_STEP: step.name,
                        ANNOTATION_INDEX: str(index),
                        ANNOTATION_MATRIX: json.dumps(matrix, sort_keys=True),
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": API_VERSION,
                            "kind": "HarnessPipeline",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": spec,
            }
        )
    return runs
