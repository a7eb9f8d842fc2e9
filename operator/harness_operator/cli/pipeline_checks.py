"""What `harnessctl validate` checks in a HarnessPipeline, or in a HarnessSchedule's or HarnessTrigger's
pipelineTemplate: the graph's problems, and every run its steps would create, checked as a HarnessRun is
(pure).

A step's runs are built as the operator builds them (core/pipeline/runs.py), with each earlier step
taken to have succeeded, so `$(steps.NAME.output)` and `$(matrix.NAME)` are put in as on the cluster and
the run checks see what the API server and the operator would see; each finding names the step's field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness_operator.api.pipeline import MATRIX_MAX
from harness_operator.api.v1alpha1 import (
    HarnessPipeline,
    HarnessPipelineSpec,
    HarnessSchedule,
    HarnessTrigger,
)
from harness_operator.cli.manifests import Document, Finding
from harness_operator.core.forge.triggering import EVENT_PARAMETERS, substitute
from harness_operator.core.pipeline.graph import (
    build_combinations,
    compute_pipeline_problems,
    count_combinations,
)
from harness_operator.core.pipeline.runs import StepRun, build_step_runs, step_run_name

UID_PLACEHOLDER = "<uid assigned by the API server>"

# Checks one run a step would create, given the names of every run of its pipeline (namespace, name).
CheckRun = Callable[[Document, set[tuple[str, str]]], list[Finding]]


@dataclass(frozen=True)
class StepDocument:
    """One run a step would create, as a manifest, and where it comes from in the pipeline."""

    step: int
    combination: int
    doc: Document


def find_pipeline(doc: Document) -> tuple[str, HarnessPipeline] | None:
    """(the field its spec is at, the pipeline) of a HarnessPipeline or a schedule's or trigger's
    pipelineTemplate that passed the schema check; None for any other document. A template's pipeline is
    named as its schedule or trigger here (the operator adds the scheduled minute, the receiver the
    delivery)."""
    meta = {"name": doc.name, "namespace": doc.namespace, "uid": UID_PLACEHOLDER}
    if doc.kind == "HarnessPipeline":
        pipeline = HarnessPipeline.model_validate(doc.obj)
        return "spec", pipeline.model_copy(update={"metadata": {**pipeline.metadata, **meta}})
    template = None
    if doc.kind == "HarnessSchedule":
        template = HarnessSchedule.model_validate(doc.obj).spec.pipeline_template
    if doc.kind == "HarnessTrigger":
        template = HarnessTrigger.model_validate(doc.obj).spec.pipeline_template
        if template is not None:  # as a delivery fills them in (their names checked by trigger_findings)
            sample = {name: "1" if name == "number" else name for name in EVENT_PARAMETERS}
            spec = HarnessPipelineSpec.model_validate(substitute(template.spec.to_api(), sample))
            template = template.model_copy(update={"spec": spec})
    if template is not None:
        return "spec.pipelineTemplate.spec", HarnessPipeline(metadata=meta, spec=template.spec)
    return None


def build_pipeline_problems(prefix: str, pipeline: HarnessPipeline) -> list[tuple[str, str]]:
    """(field, message) of each problem that keeps the pipeline from running, at the spec's `prefix` (in
    the message too, where it names a field)."""
    found = []
    for problem in compute_pipeline_problems(pipeline.spec):
        moved = problem.replace("spec.steps[", f"{prefix}.steps[")
        field, _, message = moved.partition(": ")
        found.append((field, message))
    return found


def build_step_documents(path: str, pipeline: HarnessPipeline) -> list[StepDocument]:
    """Every run of every step, each earlier step taken to have succeeded in every combination (a
    workspaceFrom starting from its first run); a step with too many combinations is left out (the graph's
    problems say so)."""
    spec = pipeline.spec
    fanned = {s.name for s in spec.steps if s.matrix is not None}
    done = {
        step.name: [
            StepRun(
                name=step_run_name(pipeline.metadata["name"], step.name, index, step.name in fanned),
                uid="",
                step=step.name,
                index=index,
                matrix=matrix,
                finished=True,
                succeeded=True,
                cancelled=False,
                phase="Succeeded",
                provider=None,
                cost_usd=None,
            )
            for index, matrix in enumerate(build_combinations(step.matrix))
        ]
        for step in spec.steps
        if count_combinations(step.matrix) <= MATRIX_MAX
    }
    found = []
    for i, step in enumerate(spec.steps):
        if step.name not in done:
            continue
        source = done.get(step.workspace_from.step, [None])[0] if step.workspace_from else None
        for j, run in enumerate(build_step_runs(pipeline, step, done, fanned, source)):
            found.append(StepDocument(i, j, Document(path, run)))
    return found


def build_step_field(prefix: str, pipeline: HarnessPipeline, where: StepDocument, field: str) -> str:
    """The pipeline's field that a finding about one of its step's runs is about: the matrix's value for
    the provider and model it put in, workspaceFrom for the workspace it set, else the template's."""
    step = pipeline.spec.steps[where.step]
    at = f"{prefix}.steps[{where.step}]"
    matrix = build_combinations(step.matrix)[where.combination]
    axes = step.matrix
    if axes is not None and "provider" in matrix and field == "spec.provider":
        return f"{at}.matrix.providers[{axes.providers.index(matrix['provider'])}]"
    if axes is not None and "model" in matrix and field == "spec.with.model":
        return f"{at}.matrix.models[{axes.models.index(matrix['model'])}]"
    if step.workspace_from is not None and field.startswith("spec.workspace.from"):
        return f"{at}.workspaceFrom"
    return f"{at}.run.{field}" if field.startswith("spec") else f"{at}.run.spec"


def is_reference_text(message: str) -> bool:
    """A finding about a `$(steps...)` or `$(matrix...)` left in a run: the pipeline's problems say what
    is wrong with it, so the run check's word on it is left out."""
    return message.startswith(("$(steps.", "$(matrix."))


def build_step_run_names(pipeline: HarnessPipeline) -> set[str]:
    """The names of every run the pipeline may create (a step's runs read each other's outputs)."""
    return {
        step_run_name(pipeline.metadata["name"], step.name, index, step.matrix is not None)
        for step in pipeline.spec.steps
        for index in range(min(count_combinations(step.matrix), MATRIX_MAX))
    }


def pipeline_findings(doc: Document, check_run: CheckRun) -> list[Finding]:
    """A HarnessPipeline, or a schedule's or trigger's pipelineTemplate, that the API server takes: the
    graph's problems, then each run its steps would create as `check_run` finds it, at the step's field,
    each finding once; empty for any other document."""
    found_pipeline = find_pipeline(doc)
    if found_pipeline is None:
        return []
    prefix, pipeline = found_pipeline
    problems = build_pipeline_problems(prefix, pipeline)
    found = [Finding(doc.path, doc.kind, doc.name, field, message) for field, message in problems]
    own = {(doc.namespace, name) for name in build_step_run_names(pipeline)}
    for where in build_step_documents(doc.path, pipeline):
        for finding in check_run(where.doc, own):
            field = build_step_field(prefix, pipeline, where, finding.field)
            mapped = Finding(doc.path, doc.kind, doc.name, field, finding.message, finding.severity)
            if not is_reference_text(finding.message) and mapped not in found:
                found.append(mapped)
    return found
