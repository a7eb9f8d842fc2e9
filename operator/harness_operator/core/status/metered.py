"""A routed attempt's result as the model gateway saw it: its usage as metered, in place of what its
sandbox reported, and whose key a refusal refused (pure).

The sandbox's figures are the agent's to forge; the gateway's come from the vendor's answers. A routed
attempt's `usage` is therefore the metered one (`costSource: metered`), with the reported one kept beside
it, and a difference beyond rounding between the two is said in a Warning Event. The run's meter (all its
attempts together) is read at its end: what it holds beyond its attempts' meters counts in its usage too.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import CostSource, HarnessRun, Limits, ModelRoute, Usage
from harness_operator.contract.model_access import MeteredUsage
from harness_operator.contract.result import ResultDocument
from harness_operator.contract.times import parse_time
from harness_operator.contract.usage import USAGE_FIELDS, tokens_of
from harness_operator.core.access.model_route import find_own_key
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.pricing import PRICE_TABLE
from harness_operator.core.pod.model_grant import compute_model_caps

# Rounding: CLIs print costs to a few decimals and some round token counts (aider: "1.2k").
TOKEN_TOLERANCE = 0.05
COST_TOLERANCE_USD = 0.0001
# Each attempt's metered cost is rounded to 6 decimals: a run's meter may exceed their sum by this much.
ROUNDING_USD = 0.00001


def build_metered_usage(meter: MeteredUsage, turns: int | None) -> Usage:
    """The meter as status usage. Worst cases still held (a request whose end no gateway saw) count as
    spent; a request of a model without a price leaves the cost unknown, never a lower figure."""
    priced = meter.unpriced == 0
    return Usage(
        input_tokens=meter.input_tokens,
        output_tokens=meter.output_tokens,
        cache_read_tokens=meter.cache_read_tokens,
        cache_write_tokens=meter.cache_write_tokens,
        turns=turns,
        cost_usd=round(meter.cost_usd + meter.reserved_usd, 6) if priced else None,
        cost_source=CostSource.metered if priced else CostSource.unknown,
        price_source=f"model gateway ({PRICE_TABLE})" if priced else None,
    )


def with_metered(result: ResultDocument, meter: MeteredUsage, run: HarnessRun) -> ResultDocument:
    """The result with the metered usage counting and the sandbox's report kept as reported. An attempt
    that failed after the gateway refused it at a cap stopped at its limit: CostLimitExceeded, saying
    which cap (describe_cap_refusal)."""
    turns = result.usage.turns if result.usage else None
    update: dict[str, object] = {
        "usage": build_metered_usage(meter, turns),
        "reported_usage": result.usage or Usage(),
    }
    if meter.refused and not result.succeeded and result.reason != Reason.CostLimitExceeded:
        update["reason"] = Reason.CostLimitExceeded
        update["message"] = (
            f"{describe_cap_refusal(run, result.attempt, meter)}; the agent then exited {result.exit_code}"
        )
    return result.model_copy(update=update)


def describe_cap_refusal(run: HarnessRun, attempt: int, meter: MeteredUsage) -> str:
    """Which one of the run's caps the gateway refused attempt `attempt`'s requests at (the grant's:
    core/pod/model_grant.compute_model_caps), what the run had spent of it, and the fix. With both a cost
    and a token cap, the one the run has used more of bound. A cap not reached means one request's worst
    case (its input at the dearest price and a minimal answer) was above what it left: a lower max output
    does not help, as the gateway already lowers a request's output to what the cap leaves."""
    limits = run.spec.limits or Limits()
    budget = run.status.budget if run.status else None
    cost_cap, token_cap = compute_model_caps(run)
    earlier = [a.usage for a in (run.status.attempts if run.status else []) if a.index != attempt and a.usage]
    spent = round(meter.cost_usd + meter.reserved_usd + sum(u.cost_usd or 0.0 for u in earlier), 6)
    used = meter.input_tokens + meter.output_tokens + meter.cache_read_tokens + meter.cache_write_tokens
    used += sum(tokens_of(u).total or 0 for u in earlier)
    cost_share = spent / cost_cap if cost_cap else None
    token_share = used / token_cap if token_cap else None
    refused = f"the model gateway refused {meter.refused} request(s)"
    if cost_share is None or (token_share is not None and token_share > cost_share):
        assert token_cap is not None  # a refusal is at a cap
        tokens_left = max(0, token_cap - used)
        said = f"{refused} at limits.maxTokens {token_cap}: the run used {used} tokens, {tokens_left} left"
        return f"{said}{_worst_case(tokens_left > 0, 'tokens')}; raise limits.maxTokens"
    assert cost_cap is not None  # cost_share is set
    own = limits.max_cost_usd
    reserved = budget.reserved_usd if budget is not None and budget.names else None
    if budget is not None and reserved == cost_cap and (own is None or cost_cap < own):
        names = ", ".join(budget.names)
        cap = f"the {cost_cap} USD the run reserved from HarnessBudget {names} (status.budget.reservedUSD)"
        fix = (
            f"raise HarnessBudget {names}'s limits.maxCostUSD (it had no more left) or its "
            "defaultReservationUSD (a run without limits.maxCostUSD reserves it)"
        )
    else:
        cap, fix = f"limits.maxCostUSD {cost_cap} USD", "raise limits.maxCostUSD"
    left = round(max(0.0, cost_cap - spent), 6)
    said = f"{refused} at {cap}: the run spent {spent} USD of it, {left} USD left"
    return f"{said}{_worst_case(left > 0, 'USD')}; {fix}"


def _worst_case(room_left: bool, unit: str) -> str:
    """Why a cap with room left refused: a single request's worst case was above it."""
    if not room_left:
        return ""
    return (
        f", below one request's worst case in {unit} (its input at the dearest price and a minimal answer; "
        "the gateway's refusal in the agent's log gives it): a lower max output does not help, the gateway "
        "already lowers a request's output to what the cap leaves"
    )


def is_meter_whole(meter: MeteredUsage, attempt_start: str | None) -> bool:
    """Whether the store kept its meters for all of the attempt: it has not started empty since."""
    since = parse_time(meter.store_since)
    started = parse_time(attempt_start)
    return since is not None and (started is None or since <= started)


def with_reported(result: ResultDocument) -> ResultDocument:
    """The result of an attempt whose meter the store lost: the sandbox's report counts, marked read."""
    return result.model_copy(update={"reported_usage": result.usage or Usage()})


def compute_usage_mismatch(reported: Usage | None, metered: Usage) -> str | None:
    """What differs beyond rounding between the sandbox's report and the meter, or None. A CLI that
    reports nothing has nothing to compare."""
    if reported is None:
        return None
    problems = []
    said = tokens_of(reported).total
    seen = tokens_of(metered).total or 0
    if said is not None and abs(said - seen) > max(1, TOKEN_TOLERANCE * seen):
        problems.append(f"{said} tokens reported, {seen} metered")
    cost_said, cost_seen = reported.cost_usd, metered.cost_usd
    tolerance = max(COST_TOLERANCE_USD, TOKEN_TOLERANCE * (cost_seen or 0))
    if cost_said is not None and cost_seen is not None and abs(cost_said - cost_seen) > tolerance:
        problems.append(f"{cost_said:.6f} USD reported, {cost_seen:.6f} metered")
    return "; ".join(problems) or None


def compute_unattributed(run_meter: MeteredUsage, metered: Sequence[Usage]) -> Usage | None:
    """What the run's meter holds beyond the metered usage of its attempts (`metered`: each attempt's
    reading), or None when nothing: spend through the token of an attempt that joined the grant but whose
    Job never ran, or a request that ended after its attempt's reading. Never negative: a meter the store
    lost, or an attempt read with a worst case still held, leaves nothing unattributed."""
    whole = build_metered_usage(run_meter, None)
    tokens = {
        name: max(0, (getattr(whole, name) or 0) - sum(getattr(u, name) or 0 for u in metered))
        for name in USAGE_FIELDS
    }
    cost: float | None = None
    if whole.cost_usd is not None:
        rest = whole.cost_usd - sum(u.cost_usd or 0.0 for u in metered)
        cost = round(rest, 6) if rest > ROUNDING_USD else 0.0
    if not any(tokens.values()) and not cost:
        return None
    return whole.model_copy(update={**tokens, "cost_usd": cost})


# Behind the gateway the team holds no vendor key: a 401 the CLI reports is the platform's key (or the run's
# own, which the gateway holds for it), and the CLI's words ("Invalid API key · Fix external API key") would
# send the team after a key it does not have. AuthFailed is not retried unless spec.retry.on is Any (not
# transient, resolve/retry.py), and the gateway's answer stops the CLI's own retries.
def with_refused_key(
    result: ResultDocument, run: HarnessRun, route: ModelRoute, config: OperatorConfig
) -> ResultDocument:
    """The result of a routed attempt, its AuthFailed message naming the refused key's Secret."""
    if result.reason != Reason.AuthFailed:
        return result
    own = find_own_key(run, route)
    if own is not None:
        where = f"{run.metadata['namespace']}/{own.secret_key_ref.name}"
        message = (
            f"the vendor ({route.vendor}) refused the run's own key, Secret {where} key "
            f"{own.secret_key_ref.key} (spec.credentials {own.env}), which the model gateway sent for it: "
            "put a valid key there"
        )
    else:
        name = config.model_gateway_key_secrets.get(route.vendor)
        where = f"Secret {config.model_gateway_namespace}/{name}" if name else "its Secret"
        message = (
            f"the vendor ({route.vendor}) refused the platform's key, which the model gateway holds for "
            f"every routed run, not this run's: the platform team replaces it in {where} (the chart's "
            f"modelGateway.vendors.{route.vendor}.secretName); a retry will not help"
        )
    return result.model_copy(update={"message": message})
