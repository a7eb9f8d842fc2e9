"""HarnessPipeline's API: its CEL rules, judged offline by the generated CRD's schema as the API server
judges them, with messages naming the field; immutability but for cancel."""

from typing import Any

from harness_operator.api.crd import crd_schema_for
from harness_operator.core.objects.cel import check_rules

SCHEMA = crd_schema_for("HarnessPipeline")


def step(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, **more, "run": {"spec": {"provider": "claude", "prompt": "x"}}}


def body(*steps: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"serviceAccountName": "runner", "steps": list(steps) or [step("a")], **spec},
    }


def violations(doc: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    return [f"{v.path}: {v.message}" for v in check_rules(SCHEMA, doc, old)]


def test_a_pipeline_of_steps_with_and_without_after_and_a_matrix_passes() -> None:
    doc = body(step("a"), step("b", after=["a"], matrix={"providers": ["claude", "codex"]}))
    assert violations(doc) == []


def test_unique_steps_known_after_and_a_matrix_with_an_axis() -> None:
    doc = body(step("a"), step("a"), step("b", after=["zz"]), step("c", matrix={}))
    assert violations(doc) == [
        "spec.steps: step names must be unique",
        "spec.steps: every step's after names a step of this pipeline",
        "spec.steps[3].matrix: a matrix needs at least one axis: providers, models or params",
    ]


def test_step_names_and_matrix_params_are_checked() -> None:
    doc = body(step("Bad_Name"), step("m", matrix={"params": [{"name": "provider", "values": ["x"]}]}))
    assert violations(doc) == [
        "spec.steps[0].name: must be a step name: lowercase letters, digits and '-', starting and ending with "
        "a letter or digit",
        "spec.steps[1].matrix.params: matrix.params: provider and model are axes of their own "
        "(matrix.providers, matrix.models)",
    ]


def test_the_spec_is_immutable_but_for_cancel_which_stays_set() -> None:
    old = body(step("a"), cancel=False)
    assert violations(body(step("a"), cancel=True), old) == []
    changed = [
        "spec: spec is immutable after creation except spec.cancel, which cannot be unset; create a new "
        "HarnessPipeline instead"
    ]
    assert violations(body(step("b"), cancel=False), old) == changed
    assert violations(body(step("a"), cancel=False), body(step("a"), cancel=True)) == changed


def test_provider_options_keep_each_clis_own_options() -> None:
    """The API server prunes what a structural schema does not declare: each provider's options map keeps
    its unknown keys (the CLI's flags), or kubectl apply refuses them."""
    matrix = SCHEMA["properties"]["spec"]["properties"]["steps"]["items"]["properties"]["matrix"]
    options = matrix["properties"]["providerOptions"]
    assert options["additionalProperties"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    doc = body(
        step("a", matrix={"providers": ["claude"], "providerOptions": {"claude": {"permission-mode": "x"}}})
    )
    assert violations(doc) == []
