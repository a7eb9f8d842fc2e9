"""Re-prompts (spec.outputReprompts): a CLI whose answer does not match spec.outputSchema is asked
again within its attempt, with the validation error (pure).

The runner's check only decides whether to ask again: the operator checks the attempt's output itself,
and that check decides the run. A re-prompt spends what the attempt has left: one timeout for all its
invocations, and what the earlier ones spent comes off maxCostUSD and maxTurns.
"""

from __future__ import annotations

import dataclasses

from harness_operator.api.v1alpha1 import CostSource, Limits, Usage
from harness_operator.contract.plan import REPROMPT_TEXT, AttemptPlan
from harness_operator.contract.structured_output import OutputMismatch, build_correction, validate_output
from harness_operator.runner.attempt import AttemptResult

_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "turns")


def remaining_limits(limits: Limits, spent: Usage) -> Limits | None:
    """The cost and turn limits less what was spent (a figure not known is not taken off); None when
    one of them is used up."""
    update: dict[str, float | int] = {}
    if limits.max_cost_usd is not None and spent.cost_usd is not None:
        left = limits.max_cost_usd - spent.cost_usd
        if left <= 0:
            return None
        update["max_cost_usd"] = left
    if limits.max_turns is not None and spent.turns is not None:
        turns = limits.max_turns - spent.turns
        if turns <= 0:
            return None
        update["max_turns"] = turns
    return limits.model_copy(update=update)


def plan_reprompt(plan: AttemptPlan, result: AttemptResult, nth: int) -> tuple[str, AttemptPlan] | None:
    """The line that says why, and the invocation of re-prompt `nth`, when `result` succeeded with an
    answer that does not match and the attempt has room for another; None otherwise."""
    if plan.output_schema is None or not result.succeeded or result.truncated or not plan.reprompt_args:
        return None
    checked = validate_output(plan.output_schema, result.output.decode("utf-8", "replace"))
    if not isinstance(checked, OutputMismatch):
        return None
    limits = remaining_limits(plan.limits, result.usage)
    if limits is None:
        return None
    correction = build_correction(plan.output_schema, checked.message)
    args = [a.replace(REPROMPT_TEXT, correction) for a in plan.reprompt_args]
    stdin = None if plan.reprompt_stdin is None else plan.reprompt_stdin.replace(REPROMPT_TEXT, correction)
    line = f"{checked.message}; re-prompt {nth}/{plan.output_reprompts} with {plan.provider}"
    # The home holds the session the first invocation left: an earlier one is not restored over it.
    following = {"args": args, "stdin": stdin, "limits": limits, "session_sha256": None}
    return line, plan.model_copy(update=following)


def add_usage(first: Usage, second: Usage) -> Usage:
    """Two invocations' usage as one: a figure is summed when both know it, else not known."""
    summed: dict[str, object] = {}
    for name in _TOKENS:
        a, b = getattr(first, name), getattr(second, name)
        summed[name] = a + b if a is not None and b is not None else None
    same = first.cost_source == second.cost_source and first.price_source == second.price_source
    known = first.cost_usd is not None and second.cost_usd is not None and same
    summed["cost_usd"] = (first.cost_usd or 0) + (second.cost_usd or 0) if known else None
    summed["cost_source"] = first.cost_source if known else CostSource.unknown
    summed["price_source"] = first.price_source if known else None
    return first.model_copy(update=summed)


def combine_results(first: AttemptResult, second: AttemptResult) -> AttemptResult:
    """The attempt after a re-prompt: the re-prompt's outcome and answer, both invocations' usage, the
    first one's start."""
    return dataclasses.replace(
        second, usage=add_usage(first.usage, second.usage), start_time=first.start_time
    )
