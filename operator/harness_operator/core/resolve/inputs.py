"""Named inputs: `$(inputs.NAME)` in a run's prompt and stdin, and the runs a run waits for (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from harness_operator.api.v1alpha1 import INPUT_REFERENCE_PATTERN, HarnessRunSpec

_REFERENCE = re.compile(INPUT_REFERENCE_PATTERN)


class InputReferenceError(ValueError):
    """spec.prompt or spec.stdin references an input spec.inputs does not declare."""


def find_unknown_references(text: str, names: Sequence[str]) -> list[str]:
    """Every `$(inputs....)` in `text` that is not `$(inputs.NAME)` for a NAME in `names`, in order."""
    known = {f"$(inputs.{name})" for name in names}
    return [m.group(0) for m in _REFERENCE.finditer(text) if m.group(0) not in known]


def compute_reference_problem(spec: HarnessRunSpec) -> str | None:
    """What is wrong with the references of spec.prompt and spec.stdin, naming the first bad one."""
    names = [i.name for i in spec.inputs]
    for field, text in (("prompt", spec.prompt), ("stdin", spec.stdin)):
        unknown = find_unknown_references(text or "", names)
        if unknown:
            return (
                f"spec.{field} references {unknown[0]}, which spec.inputs does not declare; add an input "
                "of that name or correct the reference"
            )
    return None


def substitute_inputs(text: str, values: Mapping[str, str]) -> str:
    """`text` with each `$(inputs.NAME)` replaced by its value, in one pass: a value is never read again
    for references of its own."""

    def value(match: re.Match[str]) -> str:
        reference = match.group(0)
        name = reference.removeprefix("$(inputs.").removesuffix(")")
        if not reference.endswith(")") or name not in values:
            raise InputReferenceError(f"{reference} names no declared input")
        return values[name]

    return _REFERENCE.sub(value, text)


class DependencyCycle(ValueError):
    """Runs that wait for each other, so none of them would ever start."""

    def __init__(self, cycle: list[str]) -> None:
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


def compute_dependencies(spec: HarnessRunSpec) -> list[tuple[str, str]]:
    """(field, run name) for every run this run waits for: spec.after, each runOutput source, then the run
    whose conversation it continues."""
    found = [(f"spec.after[{i}]", name) for i, name in enumerate(spec.after)]
    found += [
        (f"spec.inputs[{i}].runOutput", item.run_output.name)
        for i, item in enumerate(spec.inputs)
        if item.run_output is not None
    ]
    sources = (("spec.promptFrom.runOutput", spec.prompt_from), ("spec.stdinFrom.runOutput", spec.stdin_from))
    for field, source in sources:
        if source is not None and source.run_output is not None:
            found.append((field, source.run_output.name))
    if spec.resume_from is not None:
        found.append(("spec.resumeFrom.run", spec.resume_from.run))
    return found


def compute_run_order(graph: Mapping[str, Sequence[str]]) -> list[str]:
    """The runs in the order given, except that a run's dependencies come before it. Dependencies
    outside `graph` are ignored. Raises DependencyCycle."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise DependencyCycle([*path[path.index(name) :], name])
        state[name] = "visiting"
        for dependency in graph[name]:
            if dependency in graph:
                visit(dependency, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in graph:
        visit(name, [])
    return order
