"""Named inputs: substitution, unknown references (pure and CEL offline), dependencies and run order."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from harness_operator.api.v1alpha1 import HarnessRunSpec
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import parse_documents
from harness_operator.cli.render import build_rendered_objects
from harness_operator.cli.validation import ERROR, validate_documents
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.inputs import (
    DependencyCycle,
    InputReferenceError,
    compute_dependencies,
    compute_reference_problem,
    compute_run_order,
    find_unknown_references,
    substitute_inputs,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("Implement this plan: $(inputs.PLAN)", {"PLAN": "step 1"}, "Implement this plan: step 1"),
        ("$(inputs.a)$(inputs.b) and $(inputs.a)", {"a": "1", "b": "2"}, "12 and 1"),
        ("no references", {"a": "1"}, "no references"),
        ("shell stays: $(date) ${PLAN} $PLAN", {"PLAN": "x"}, "shell stays: $(date) ${PLAN} $PLAN"),
        ("$(inputs.a)", {"a": "$(inputs.b)", "b": "never"}, "$(inputs.b)"),
        ("$(inputs.a)", {"a": ""}, ""),
        ("$(inputs.with-dash_1)", {"with-dash_1": "ok"}, "ok"),
        ("$(inputs.a)", {"a": "back\\1 slash"}, "back\\1 slash"),
    ],
    ids=[
        "the issue's prompt",
        "several, repeated",
        "nothing to do",
        "other dollar forms are text",
        "one pass: a value is not substituted again",
        "empty value",
        "dash and underscore in a name",
        "a backslash in a value is taken literally",
    ],
)
def test_substitution(text: str, values: dict[str, str], expected: str) -> None:
    assert substitute_inputs(text, values) == expected


@pytest.mark.parametrize("text", ["$(inputs.missing)", "$(inputs.PLAN", "$(inputs.)", "$(inputs.a b)"])
def test_substitution_refuses_what_it_cannot_resolve(text: str) -> None:
    with pytest.raises(InputReferenceError, match=r"names no declared input"):
        substitute_inputs(text, {"PLAN": "x", "a": "y"})


def test_unknown_references_are_named_in_order() -> None:
    text = "$(inputs.a) $(inputs.X) $(inputs.b $(inputs.a)"
    assert find_unknown_references(text, ["a"]) == ["$(inputs.X)", "$(inputs.b $(inputs.a)"]


def spec(**fields: Any) -> HarnessRunSpec:
    return HarnessRunSpec.model_validate({"provider": "claude", "prompt": "p", **fields})


def test_reference_problem_names_field_and_reference() -> None:
    assert compute_reference_problem(spec(prompt="$(inputs.a)", inputs=[{"name": "a", "value": "1"}])) is None
    assert compute_reference_problem(spec(stdin="use $(inputs.PLAN)")) == (
        "spec.stdin references $(inputs.PLAN), which spec.inputs does not declare; add an input of that "
        "name or correct the reference"
    )


def test_dependencies_from_after_inputs_and_value_sources() -> None:
    found = compute_dependencies(
        spec(
            prompt=None,
            after=["setup"],
            inputs=[{"name": "a", "value": "1"}, {"name": "PLAN", "runOutput": {"name": "plan"}}],
            promptFrom={"runOutput": {"name": "first"}},
            stdinFrom={"configMapKeyRef": {"name": "cm", "key": "k"}},
        )
    )
    assert found == [
        ("spec.after[0]", "setup"),
        ("spec.inputs[1].runOutput", "plan"),
        ("spec.promptFrom.runOutput", "first"),
    ]


def test_run_order_puts_dependencies_first_and_keeps_file_order_otherwise() -> None:
    graph = {"c": ["b"], "a": [], "b": ["a", "elsewhere"], "d": []}
    assert compute_run_order(graph) == ["a", "b", "c", "d"]


def test_run_order_names_a_cycle() -> None:
    with pytest.raises(DependencyCycle, match=r"dependency cycle: a -> b -> a"):
        compute_run_order({"a": ["b"], "b": ["a"]})


# --- harnessctl validate: the CRD's CEL rules offline, and the cross-manifest checks ------------------


def findings(*runs: dict[str, Any]) -> list[tuple[str, str, str]]:
    docs = [
        {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessRun", "metadata": {"name": n}, "spec": s}
        for n, s in runs
    ]
    parsed = parse_documents(yaml.safe_dump_all(docs), "runs.yaml")
    found = validate_documents(parsed, load_builtin_catalog(), strict=True)
    return [(f.name, f.field, f.message) for f in found if f.severity == ERROR]


def run_spec(**fields: Any) -> dict[str, Any]:
    return {"provider": "claude", "prompt": "p", "workspace": {"workingDir": "/w"}, **fields}


def test_validate_accepts_declared_references() -> None:
    assert (
        findings(
            ("plan", run_spec()),
            (
                "implement",
                run_spec(
                    prompt="Implement this plan: $(inputs.PLAN)",
                    stdin="$(inputs.ticket)",
                    inputs=[
                        {"name": "PLAN", "runOutput": {"name": "plan"}},
                        {"name": "ticket", "configMapKeyRef": {"name": "t", "key": "k"}},
                    ],
                ),
            ),
        )
        == []
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"prompt": "Implement $(inputs.PLAN)"},
            (
                "spec.prompt",
                "spec.prompt references $(inputs.PLAN), which spec.inputs does not declare; add an input of that name or correct the reference",
            ),
        ),
        (
            {"stdin": "$(inputs.a) $(inputs.b", "inputs": [{"name": "a", "value": "1"}]},
            (
                "spec.stdin",
                "spec.stdin references $(inputs.b, which spec.inputs does not declare; add an input of that name or correct the reference",
            ),
        ),
        (
            {"inputs": [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]},
            ("spec.inputs", "spec.inputs names must be unique"),
        ),
        (
            {"inputs": [{"name": "a", "value": "1", "secretKeyRef": {"name": "s", "key": "k"}}]},
            ("spec.inputs[0]", "set exactly one of value, configMapKeyRef, secretKeyRef or runOutput"),
        ),
        (
            {"inputs": [{"name": "9lives", "value": "1"}]},
            (
                "spec.inputs[0].name",
                "must be an input name: letters, digits, '_' and '-', not starting with a digit or '-'",
            ),
        ),
        (
            {"after": ["Not_A_Name"]},
            (
                "spec.after[0]",
                "must be a valid HarnessRun name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit; no '/')",
            ),
        ),
    ],
    ids=[
        "unknown reference",
        "malformed reference",
        "duplicate names",
        "two sources",
        "bad name",
        "bad after",
    ],
)
def test_validate_refuses_with_the_crds_message(fields: dict[str, Any], expected: tuple[str, str]) -> None:
    assert [(f, m) for _, f, m in findings(("r", run_spec(**fields)))] == [expected]


def test_validate_checks_dependencies_among_the_manifests() -> None:
    assert findings(
        ("a", run_spec(after=["b", "a", "ghost"])),
        ("b", run_spec(inputs=[{"name": "x", "runOutput": {"name": "a"}}])),
    ) == [
        (
            "a",
            "spec.after[1]",
            "names this run itself, which would wait for itself forever: name another run",
        ),
        (
            "a",
            "spec.after[2]",
            'HarnessRun "ghost" is not among the given manifests: unless it is on the cluster, this run waits '
            "for it (WaitingForRunOutput); `validate --cluster` looks it up, `--strict` makes this an error",
        ),
        ("a", "spec.after", "dependency cycle: default/a -> default/b -> default/a"),
    ]


def test_render_substitutes_values_and_names_what_it_cannot_read() -> None:
    run = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": "implement", "namespace": "default"},
        "spec": run_spec(
            prompt="Implement this plan: $(inputs.PLAN) for $(inputs.team)",
            stdin="$(inputs.token)",
            inputs=[
                {"name": "PLAN", "runOutput": {"name": "plan"}},
                {"name": "team", "value": "team-a"},
                {"name": "token", "secretKeyRef": {"name": "s", "key": "k"}},
            ],
        ),
    }
    docs = parse_documents(yaml.safe_dump(run), "run.yaml")
    objects, problems = build_rendered_objects(docs, load_builtin_catalog(), OperatorConfig(), NOW)
    assert problems == []
    plan = json.loads(objects[0]["stringData"]["attempt-1.json"])
    assert plan["args"][:2] == ["-p", "Implement this plan: <output of HarnessRun plan> for team-a"]
    assert plan["stdin"] == "<Secret s key k>"
