"""spec.outputSchema (pure): the schema checked, the output read as one JSON value and validated with
messages that name the path and keyword but never the output's values, one field picked by path."""

import json
from typing import Any

import pytest

from harness_operator.contract.structured_output import (
    MAX_SCHEMA_BYTES,
    OutputChecked,
    OutputMismatch,
    canonical_json,
    output_schema_problem,
    pick_field,
    read_json_output,
    validate_output,
)

REVIEW = {
    "type": "object",
    "required": ["verdict", "findings"],
    "properties": {
        "verdict": {"enum": ["approve", "changes"]},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["file"],
                "properties": {"file": {"type": "string"}, "line": {"type": "integer"}},
            },
        },
    },
    "additionalProperties": False,
}


def test_a_matching_output_is_kept_as_canonical_json() -> None:
    text = '\n{"verdict": "approve", "findings": [{"line": 3, "file": "a.py"}]}\n'
    checked = validate_output(REVIEW, text)
    assert checked == OutputChecked('{"findings":[{"file":"a.py","line":3}],"verdict":"approve"}')


def test_one_json_fence_around_the_whole_output_is_allowed() -> None:
    fenced = '```json\n{"verdict": "changes", "findings": []}\n```'
    assert isinstance(validate_output(REVIEW, fenced), OutputChecked)
    assert read_json_output("```\n[1, 2]\n```") == [1, 2]
    with pytest.raises(ValueError, match="not one JSON value"):
        read_json_output('Here it is: ```json\n{"a": 1}\n```')  # prose around it is not one value


SECRET = "sk-live-0123456789"


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            f"I think {SECRET} is fine",
            "spec.outputSchema: the output is not one JSON value (Expecting value at line 1 column 1)",
        ),
        (
            json.dumps({"verdict": SECRET, "findings": []}),
            "spec.outputSchema: the output does not match at $.verdict: not one of the values the schema "
            "allows (enum)",
        ),
        (
            json.dumps({"verdict": "approve"}),
            "spec.outputSchema: the output does not match at $: missing required 'findings'",
        ),
        (
            json.dumps({"verdict": "approve", "findings": [{"file": SECRET, "line": SECRET}]}),
            "spec.outputSchema: the output does not match at $.findings[0].line: must be of type 'integer'",
        ),
        (
            json.dumps({"verdict": "approve", "findings": [], SECRET: 1}),
            "spec.outputSchema: the output does not match at $: fails the schema's 'additionalProperties'",
        ),
        (
            json.dumps({"verdict": 1, "findings": {}}),
            "spec.outputSchema: the output does not match at $.verdict: not one of the values the schema "
            "allows (enum) (and 1 more)",
        ),
    ],
)
def test_a_mismatch_names_the_path_and_keyword_never_the_output(output: str, message: str) -> None:
    checked = validate_output(REVIEW, output)
    assert isinstance(checked, OutputMismatch)
    assert checked.message == message
    assert SECRET not in checked.message


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (None, None),
        (REVIEW, None),
        ({"type": "objekt"}, "spec.outputSchema.type: not a valid JSON Schema (2020-12): "),
        ({"properties": {"a": {"minLength": -1}}}, "spec.outputSchema.properties.a.minLength: not a valid"),
        (
            {"enum": ["x" * 100] * (MAX_SCHEMA_BYTES // 100)},
            "spec.outputSchema: 33691 bytes as JSON, more than 32768",
        ),
    ],
)
def test_a_schema_that_is_not_one_is_named_with_its_field(schema: Any, problem: str | None) -> None:
    found = output_schema_problem(schema)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def test_a_field_is_picked_by_a_dotted_path_strings_as_they_are() -> None:
    document = canonical_json('{"verdict": "approve", "findings": [{"file": "a.py", "line": 3}], "n": 2}')
    assert pick_field(document, "verdict") == "approve"
    assert pick_field(document, "findings.0.file") == "a.py"
    assert pick_field(document, "findings.0") == '{"file":"a.py","line":3}'
    assert pick_field(document, "n") == "2"
    for missing, step in (("verdikt", "verdikt"), ("findings.1", "findings.1"), ("verdict.x", "verdict.x")):
        with pytest.raises(KeyError) as caught:
            pick_field(document, missing)
        assert caught.value.args == (step,)
