"""HarnessPipeline's CRD rules, evaluated offline as the API server does: a pipeline as the README writes
it (no `after` on its first step, a matrix of providers alone) is admitted; the rules still refuse what
they name."""

from __future__ import annotations

from typing import Any

from harness_operator.api.crd import crd_schema_for
from harness_operator.core.objects.cel import check_rules

SCHEMA = crd_schema_for("HarnessPipeline")


def step(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, **more, "run": {"spec": {"provider": "claude", "prompt": "go"}}}


def violations(*steps: dict[str, Any]) -> list[str]:
    body = {"metadata": {"name": "p"}, "spec": {"serviceAccountName": "runner", "steps": list(steps)}}
    return [f"{v.path}: {v.message}" for v in check_rules(SCHEMA, body)]


def test_a_step_without_after_and_a_matrix_of_one_axis_are_admitted() -> None:
    """An empty list is not stored (the CRD defaults no container), so a rule must not read an absent one:
    the API server refused the README's pipeline with `no such key: after`."""
    assert (
        violations(
            step("implement", matrix={"providers": ["claude", "codex"]}), step("judge", after=["implement"])
        )
        == []
    )
    assert violations(step("sweep", matrix={"params": [{"name": "n", "values": ["1", "2"]}]})) == []


def test_the_rules_still_refuse_what_they_name() -> None:
    assert violations(step("a"), step("b", after=["c"])) == [
        "spec.steps: every step's after names a step of this pipeline"
    ]
    assert violations(step("a", matrix={})) == [
        "spec.steps[0].matrix: a matrix needs at least one axis: providers, models or params"
    ]
    assert violations(step("a"), step("a")) == ["spec.steps: step names must be unique"]
