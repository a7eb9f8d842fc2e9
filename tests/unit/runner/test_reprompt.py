"""Re-prompts within an attempt (pure): what is left of its limits, when one is planned, usage summed."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import CostSource, Limits, Usage
from harness_operator.contract.plan import REPROMPT_TEXT, AttemptPlan
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.reprompt import add_usage, plan_reprompt, remaining_limits

SCHEMA = {"type": "object", "required": ["verdict"]}


def attempt_plan(**fields: Any) -> AttemptPlan:
    base = {"attempt": 1, "total_attempts": 1, "provider": "pi", "binary": "pi", "args": ["-p", "task"]}
    base |= {"reprompt_args": ["--continue", "-p", REPROMPT_TEXT], "output_schema": SCHEMA}
    return AttemptPlan.model_validate({**base, "output_reprompts": 1, **fields})


def answered(output: bytes, **fields: Any) -> AttemptResult:
    return AttemptResult(1, "pi", 0, None, "", output=output, **fields)


def test_what_was_spent_comes_off_the_cost_and_turn_limits() -> None:
    limits = Limits(max_cost_usd=1.0, max_turns=5, timeout_seconds=60)
    left = remaining_limits(limits, Usage(cost_usd=0.25, turns=2))
    assert left is not None and (left.max_cost_usd, left.max_turns, left.timeout_seconds) == (0.75, 3, 60)
    assert remaining_limits(limits, Usage(cost_usd=1.0)) is None
    assert remaining_limits(limits, Usage(turns=5)) is None
    assert remaining_limits(limits, Usage()) == limits  # nothing known is taken off


def test_a_mismatch_plans_a_reprompt_carrying_the_error_and_the_schema() -> None:
    planned = plan_reprompt(attempt_plan(), answered(b'{"other": 1}'), 1)
    assert planned is not None
    line, again = planned
    assert (
        line
        == "spec.outputSchema: the output does not match at $: missing required 'verdict'; re-prompt 1/1 with pi"
    )
    assert again.args[:2] == ["--continue", "-p"]
    assert again.args[2] == (
        "Your answer was refused: spec.outputSchema: the output does not match at $: missing required "
        "'verdict'. Answer again with only one JSON value, no other text, that matches this JSON Schema: "
        '{"required":["verdict"],"type":"object"}'
    )


@pytest.mark.parametrize(
    ("plan_fields", "result"),
    [
        ({}, answered(b'{"verdict": "ok"}')),  # it matches
        ({}, AttemptResult(1, "pi", 1, "ProviderFailed", "x", output=b"")),  # no answer to check
        ({}, answered(b"{", truncated=True)),  # cut at maxOutputBytes: asking again will not help
        ({"reprompt_args": []}, answered(b"not json")),
        ({"limits": {"max_turns": 1}}, answered(b"not json", usage=Usage(turns=1))),
    ],
)
def test_no_reprompt_when_none_is_due_or_none_fits(
    plan_fields: dict[str, Any], result: AttemptResult
) -> None:
    assert plan_reprompt(attempt_plan(**plan_fields), result, 1) is None


def test_usage_is_summed_where_both_know_it() -> None:
    first = Usage(input_tokens=10, output_tokens=2, turns=1, cost_usd=0.5, cost_source=CostSource.reported)
    second = Usage(input_tokens=5, turns=1, cost_usd=0.25, cost_source=CostSource.reported)
    both = add_usage(first, second)
    assert (both.input_tokens, both.output_tokens, both.turns) == (15, None, 2)
    assert (both.cost_usd, both.cost_source) == (0.75, CostSource.reported)
    unpriced = add_usage(first, second.model_copy(update={"cost_usd": None}))
    assert (unpriced.cost_usd, unpriced.cost_source) == (None, CostSource.unknown)
