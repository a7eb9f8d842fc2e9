"""A pipeline's graph: its steps' order, the matrix's combinations, the references between steps, and what
makes a pipeline unrunnable (pure).

A step's prompt and stdin may say `$(steps.NAME.output)` and `$(steps.NAME.output.PATH)` of a step it
runs after (directly or through others), and `$(matrix.NAME)` of its own matrix's axes. Each reference
becomes one input per run of the referenced step, so a step's inputs (its own and the references') are
bounded by a run's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from harness_operator.api.pipeline import MATRIX_MAX, HarnessPipelineSpec, PipelineStep, StepMatrix
from harness_operator.api.run import INPUTS_MAX

STEP_REFERENCE = re.compile(r"\$\(steps\.([a-z0-9-]+)\.output(?:\.([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*))?\)")
MATRIX_REFERENCE = re.compile(r"\$\(matrix\.([A-Za-z_][A-Za-z0-9_]*)\)")
# Anything that opens a reference; compared with the well-formed ones to find a misspelt one.
OPENED = re.compile(r"\$\((?:steps|matrix)\.[^)]{0,80}\)?")


@dataclass(frozen=True)
class StepReference:
    """`$(steps.STEP.output)` (path None) or `$(steps.STEP.output.PATH)`, as written."""

    text: str
    step: str
    path: str | None


def build_combinations(matrix: StepMatrix | None) -> list[dict[str, str]]:
    """One dict per run of the step, in order: providers, then models, then each param, the last varying
    fastest; a step without a matrix has one run and no values."""
    if matrix is None:
        return [{}]
    axes: list[tuple[str, list[str]]] = []
    if matrix.providers:
        axes.append(("provider", list(matrix.providers)))
    if matrix.models:
        axes.append(("model", list(matrix.models)))
    axes += [(p.name, list(p.values)) for p in matrix.params]
    names = [name for name, _ in axes]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(v for _, v in axes))]


def count_combinations(matrix: StepMatrix | None) -> int:
    """How many runs the step makes (without building them: a bad matrix may ask for millions)."""
    if matrix is None:
        return 1
    sizes = [len(matrix.providers), len(matrix.models), *(len(p.values) for p in matrix.params)]
    count = 1
    for size in sizes:
        count *= size or 1
    return count


def find_step_references(step: PipelineStep) -> list[StepReference]:
    """The step references of the step's prompt and stdin, each once, in order of appearance."""
    found: dict[str, StepReference] = {}
    for text in (step.run.spec.prompt or "", step.run.spec.stdin or ""):
        for match in STEP_REFERENCE.finditer(text):
            found.setdefault(match.group(0), StepReference(match.group(0), match.group(1), match.group(2)))
    return list(found.values())


def build_ancestors(spec: HarnessPipelineSpec) -> dict[str, set[str]]:
    """Each step's steps it runs after, directly or not (a cycle's steps include themselves)."""
    direct = {s.name: set(s.after) for s in spec.steps}
    ancestors: dict[str, set[str]] = {}
    for name in direct:
        seen: set[str] = set()
        todo = list(direct[name])
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            todo.extend(direct.get(current, ()))
        ancestors[name] = seen
    return ancestors


def build_order(spec: HarnessPipelineSpec) -> list[str]:
    """The steps in an order that puts every step after those it runs after; the spec's order among
    steps free to go (Kahn's algorithm, stable). Steps in a cycle are left out."""
    remaining = [s.name for s in spec.steps]
    after = {s.name: set(s.after) for s in spec.steps}
    order: list[str] = []
    while True:
        ready = next((n for n in remaining if after[n] <= set(order)), None)
        if ready is None:
            return order
        order.append(ready)
        remaining.remove(ready)


def _matrix_problems(step: PipelineStep, field: str) -> list[str]:
    options = step.matrix.provider_options if step.matrix else {}
    strays = [name for name in options if name not in (step.matrix.providers if step.matrix else [])]
    problems = [
        f"{field}.matrix.providerOptions.{name}: {name} is not one of matrix.providers; add it there or "
        "remove its options"
        for name in strays
    ]
    count = count_combinations(step.matrix)
    if count > MATRIX_MAX:
        return [
            *problems,
            f"{field}.matrix: {count} combinations, more than {MATRIX_MAX} (a later step reads each run as "
            "one of its inputs, and a run takes at most 16); split the step or drop an axis",
        ]
    return problems


def _reference_problems(
    spec: HarnessPipelineSpec, step: PipelineStep, field: str, ancestors: set[str]
) -> list[str]:
    steps = {s.name: s for s in spec.steps}
    problems: list[str] = []
    axes = _axes(step)
    for text, where in ((step.run.spec.prompt, "prompt"), (step.run.spec.stdin, "stdin")):
        for opened in OPENED.findall(text or ""):
            if not (STEP_REFERENCE.fullmatch(opened) or MATRIX_REFERENCE.fullmatch(opened)):
                problems.append(
                    f"{field}.run.spec.{where}: {opened!r} is not a reference; write $(steps.STEP.output), "
                    "$(steps.STEP.output.FIELD) or $(matrix.NAME)"
                )
        for match in MATRIX_REFERENCE.finditer(text or ""):
            if match.group(1) not in axes:
                problems.append(
                    f"{field}.run.spec.{where}: {match.group(0)} names no axis of this step's matrix; its "
                    f"axes: {', '.join(sorted(axes)) or 'none (the step has no matrix)'}"
                )
    inputs = len(step.run.spec.inputs)
    for ref in find_step_references(step):
        if ref.step not in steps:
            problems.append(f"{field}.run.spec: {ref.text} names no step of this pipeline")
            continue
        if ref.step not in ancestors:
            problems.append(
                f"{field}.run.spec: {ref.text} reads step {ref.step}, which this step does not run after; "
                f"add {ref.step!r} to {field}.after"
            )
        inputs += min(count_combinations(steps[ref.step].matrix), MATRIX_MAX + 1)
    if inputs > INPUTS_MAX:
        problems.append(
            f"{field}.run.spec: {inputs} inputs with one per run of each step referenced, more than "
            f"{INPUTS_MAX}; reference fewer steps or fan out less"
        )
    return problems


def _axes(step: PipelineStep) -> set[str]:
    """The names of the step's matrix axes (none for a matrix too large to build)."""
    if count_combinations(step.matrix) > MATRIX_MAX:
        return set()
    return set(build_combinations(step.matrix)[0])


def _workspace_problems(
    spec: HarnessPipelineSpec, step: PipelineStep, field: str, ancestors: set[str]
) -> list[str]:
    source = step.workspace_from
    if source is None:
        return []
    steps = {s.name: s for s in spec.steps}
    if source.step not in steps or source.step not in ancestors:
        return [f"{field}.step: {source.step!r} is not a step this one runs after; add it to its after"]
    axes = _axes(steps[source.step])
    problems = []
    if axes and set(source.where) != axes:
        problems.append(
            f"{field}.where: step {source.step} fans out over {', '.join(sorted(axes))}; name the run by "
            "each of them (e.g. provider: $(steps.judge.output.winner))"
        )
    if not axes and source.where:
        problems.append(f"{field}.where: step {source.step} has one run; leave where out")
    for key, value in source.where.items():
        match = STEP_REFERENCE.fullmatch(value.strip())
        if match is None and OPENED.search(value):
            problems.append(
                f"{field}.where.{key}: {value!r} is neither a literal nor one $(steps.STEP.output[.FIELD])"
            )
        elif match is not None:
            read = steps.get(match.group(1))
            if read is None or read.name not in ancestors or count_combinations(read.matrix) != 1:
                problems.append(
                    f"{field}.where.{key}: {value} must read a step of one run that this step runs after"
                )
    return problems


def compute_pipeline_problems(spec: HarnessPipelineSpec) -> list[str]:
    """What keeps the pipeline from running, each naming the field and the fix; empty when it can run."""
    ancestors = build_ancestors(spec)
    problems: list[str] = []
    for i, step in enumerate(spec.steps):
        field = f"spec.steps[{i}]"
        if step.name in ancestors[step.name]:
            problems.append(
                f"{field}.after: step {step.name} runs after itself (a cycle); remove one 'after'"
            )
        problems += _matrix_problems(step, field)
        problems += _reference_problems(spec, step, field, ancestors[step.name])
        problems += _workspace_problems(spec, step, f"{field}.workspaceFrom", ancestors[step.name])
    return problems
