"""The gateway's meter as an attempt's usage: metered outranks reported, held worst cases count, an
unpriced model leaves the cost unknown, a refusal at the cap is CostLimitExceeded, differences are said;
an AuthFailed says whose key the vendor refused and where it is fixed: the platform's Secret (as the chart
configures the operator) or the run's own, and it is not retried."""

from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import CostSource, HarnessRun, RetryPolicy, Usage
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.model_access import MeteredUsage
from harness_operator.contract.result import ResultDocument
from harness_operator.core.access.model_route import compute_model_route
from harness_operator.core.config import OperatorConfig
from harness_operator.core.resolve.retry import compute_next_index
from harness_operator.core.status.metered import (
    build_metered_usage,
    compute_unattributed,
    compute_usage_mismatch,
    describe_cap_refusal,
    is_meter_whole,
    with_metered,
    with_refused_key,
    with_reported,
)
from harness_operator.core.status.usage import sum_usage

METER = MeteredUsage(requests=2, input_tokens=2468, output_tokens=112, cache_read_tokens=200, cost_usd=0.0092)
FORGED = Usage(input_tokens=0, output_tokens=0, cost_usd=0.0, cost_source=CostSource.reported)


def run(limits: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> HarnessRun:
    body = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
        "spec": {"provider": "claude", "prompt": "p", "limits": limits or {}},
        "status": status or {},
    }
    return HarnessRun.model_validate(body)


RUN = run({"maxCostUSD": 1})


def result(**fields: object) -> ResultDocument:
    return ResultDocument.model_validate({"attempt": 1, "provider": "claude", "exitCode": 0, **fields})


def test_metered_usage_counts_and_the_sandboxs_report_is_kept_beside_it() -> None:
    done = with_metered(result(usage={**FORGED.to_api(), "turns": 3}), METER, RUN)
    assert done.usage == Usage(
        input_tokens=2468, output_tokens=112, cache_read_tokens=200, cache_write_tokens=0, turns=3,
        cost_usd=0.0092, cost_source=CostSource.metered, price_source=done.usage.price_source if done.usage else None,
    )  # fmt: skip
    assert done.usage is not None and "model gateway" in (done.usage.price_source or "")
    assert done.reported_usage is not None and done.reported_usage.cost_usd == 0.0
    assert done.succeeded


def test_worst_cases_still_held_are_spent_and_an_unpriced_request_leaves_the_cost_unknown() -> None:
    held = build_metered_usage(METER.model_copy(update={"reserved_usd": 0.5}), None)
    assert held.cost_usd == 0.5092 and held.cost_source == CostSource.metered
    unpriced = build_metered_usage(METER.model_copy(update={"unpriced": 1}), None)
    assert unpriced.cost_usd is None and unpriced.cost_source == CostSource.unknown
    assert unpriced.input_tokens == 2468  # the tokens are still the meter's


def test_a_failure_after_a_refusal_at_the_cap_is_a_cost_stop() -> None:
    failed = result(exitCode=1, reason="ProviderFailed", message="the agent exited with code 1")
    stopped = with_metered(failed, METER.model_copy(update={"refused": 2}), RUN)
    assert stopped.reason == Reason.CostLimitExceeded
    assert (stopped.message or "").startswith(
        "the model gateway refused 2 request(s) at limits.maxCostUSD 1.0 USD"
    )
    assert (stopped.message or "").endswith("; raise limits.maxCostUSD; the agent then exited 1")
    assert with_metered(result(), METER.model_copy(update={"refused": 1}), RUN).succeeded


WORST = (
    "below one request's worst case in {} (its input at the dearest price and a minimal answer; the gateway's "
    "refusal in the agent's log gives it): a lower max output does not help, the gateway already lowers a "
    "request's output to what the cap leaves"
)
BUDGET_FIX = (
    "raise HarnessBudget team's limits.maxCostUSD (it had no more left) or its defaultReservationUSD (a run "
    "without limits.maxCostUSD reserves it)"
)
NOTHING = MeteredUsage(refused=1)


@pytest.mark.parametrize(
    ("limits", "status", "meter", "expected"),
    [
        (  # the issue's case: a 0.03 USD budget reservation, nothing spent: one request is above it
            {},
            {"budget": {"names": ["team"], "reservedUSD": 0.03}},
            NOTHING,
            "the model gateway refused 1 request(s) at the 0.03 USD the run reserved from HarnessBudget team "
            f"(status.budget.reservedUSD): the run spent 0.0 USD of it, 0.03 USD left, {WORST.format('USD')}; "
            f"{BUDGET_FIX}",
        ),
        (  # the budget's reservation is below the run's own cap: the budget bound
            {"maxCostUSD": 0.5},
            {"budget": {"names": ["team"], "reservedUSD": 0.2}},
            MeteredUsage(refused=1, cost_usd=0.2),
            "the model gateway refused 1 request(s) at the 0.2 USD the run reserved from HarnessBudget team "
            f"(status.budget.reservedUSD): the run spent 0.2 USD of it, 0.0 USD left; {BUDGET_FIX}",
        ),
        (  # the run's own cap is the smaller: it bound, spent with an earlier attempt's cost
            {"maxCostUSD": 0.5},
            {
                "budget": {"names": ["team"], "reservedUSD": 0.5},
                "attempts": [{"index": 1, "provider": "claude", "usage": {"costUSD": 0.3}}],
            },
            MeteredUsage(refused=3, cost_usd=0.1, reserved_usd=0.05),
            "the model gateway refused 3 request(s) at limits.maxCostUSD 0.5 USD: the run spent 0.45 USD of it, "
            f"0.05 USD left, {WORST.format('USD')}; raise limits.maxCostUSD",
        ),
        (  # tokens only
            {"maxTokens": 1000},
            {},
            MeteredUsage(refused=1, input_tokens=900, output_tokens=100),
            "the model gateway refused 1 request(s) at limits.maxTokens 1000: the run used 1000 tokens, 0 left; "
            "raise limits.maxTokens",
        ),
        (  # both: the one used more of bound
            {"maxTokens": 1000, "maxCostUSD": 10},
            {},
            MeteredUsage(refused=1, input_tokens=800, cost_usd=1),
            "the model gateway refused 1 request(s) at limits.maxTokens 1000: the run used 800 tokens, 200 left, "
            f"{WORST.format('tokens')}; raise limits.maxTokens",
        ),
        (
            {"maxTokens": 1000, "maxCostUSD": 10},
            {},
            MeteredUsage(refused=1, input_tokens=100, cost_usd=9.99),
            "the model gateway refused 1 request(s) at limits.maxCostUSD 10.0 USD: the run spent 9.99 USD of it, "
            f"0.01 USD left, {WORST.format('USD')}; raise limits.maxCostUSD",
        ),
    ],
)
def test_a_refusal_names_the_one_cap_that_bound_what_it_left_and_the_fix(
    limits: dict[str, Any], status: dict[str, Any], meter: MeteredUsage, expected: str
) -> None:
    assert describe_cap_refusal(run(limits, status), 2, meter) == expected


def test_differences_beyond_rounding_are_said_and_rounding_is_not() -> None:
    metered = build_metered_usage(METER, None)
    said = compute_usage_mismatch(FORGED, metered)
    assert said is not None and "0 tokens reported, 2780 metered" in said and "0.000000 USD reported" in said
    close = Usage(input_tokens=2468, output_tokens=112, cache_read_tokens=200, cost_usd=0.00921)
    assert compute_usage_mismatch(close, metered) is None
    assert compute_usage_mismatch(None, metered) is None  # a CLI that reports nothing has nothing to compare
    assert compute_usage_mismatch(Usage(turns=2), metered) is None


def test_a_run_of_metered_attempts_is_metered_and_a_mixed_one_computed() -> None:
    metered = build_metered_usage(METER, None)
    assert sum_usage([metered, metered]).cost_source == CostSource.metered
    reported = Usage(input_tokens=1, output_tokens=1, cost_usd=0.1, cost_source=CostSource.reported)
    assert sum_usage([metered, reported]).cost_source == CostSource.computed


def test_a_meter_counts_only_when_the_store_kept_it_for_all_of_the_attempt() -> None:
    kept = METER.model_copy(update={"store_since": "2026-12-01T10:00:00Z"})
    assert is_meter_whole(kept, "2026-12-01T10:00:00Z") and is_meter_whole(kept, "2026-12-01T11:00:00Z")
    assert not is_meter_whole(kept, "2026-12-01T09:59:59Z")  # the store started empty during the attempt
    assert not is_meter_whole(METER, "2026-12-01T11:00:00Z")  # a store that says nothing
    lost = with_reported(result(usage=FORGED.to_api()))
    assert lost.usage == FORGED and lost.reported_usage == FORGED


def test_what_the_runs_meter_holds_beyond_its_attempts_is_unattributed() -> None:
    first = build_metered_usage(METER, None)
    run = METER.model_copy(
        update={"input_tokens": 3702, "output_tokens": 168, "cache_read_tokens": 300, "cost_usd": 0.0138}
    )
    rest = compute_unattributed(run, [first])
    assert rest is not None
    assert (rest.input_tokens, rest.output_tokens, rest.cache_read_tokens, rest.cache_write_tokens) == (
        1234, 56, 100, 0,
    )  # fmt: skip
    assert rest.cost_usd == 0.0046 and rest.cost_source == CostSource.metered
    assert sum_usage([first, rest]).cost_usd == 0.0138  # the run's usage is its whole meter
    held = compute_unattributed(run.model_copy(update={"reserved_usd": 0.01}), [first])
    assert held is not None and held.cost_usd == 0.0146  # a worst case still held is spent
    assert compute_unattributed(run, []) == build_metered_usage(run, None)  # no attempt was read


def test_nothing_is_unattributed_when_the_attempts_hold_it_all_or_more() -> None:
    first = build_metered_usage(METER, None)
    assert compute_unattributed(METER, [first]) is None
    assert compute_unattributed(MeteredUsage(), []) is None
    # Each attempt's cost rounded to 6 decimals: no residue counts.
    rounded = [Usage(cost_usd=0.0000014, cost_source=CostSource.metered)] * 3
    assert compute_unattributed(MeteredUsage(cost_usd=0.0000041), rounded) is None
    # An attempt read with a worst case held (its request settled lower after): nothing negative.
    assert compute_unattributed(METER.model_copy(update={"cost_usd": 0.005}), [first]) is None
    # The store lost the run's meter mid-run: nothing negative either.
    assert compute_unattributed(MeteredUsage(requests=1, cost_usd=0.001), [first, first]) is None
    # A request settled after its attempt's reading (the worst case counted): its tokens are counted.
    late = compute_unattributed(METER.model_copy(update={"output_tokens": 200}), [first])
    assert late is not None and (late.output_tokens, late.cost_usd) == (88, 0.0)


# As the chart's deployment sets them (templates/deployment.yaml).
CHART_ENV = {
    "HARNESS_MODEL_GATEWAY_SERVICE": "harness-operator-model.harness-system.svc",
    "HARNESS_MODEL_GATEWAY_NAMESPACE": "harness-system",
    "HARNESS_MODEL_GATEWAY_KEY": "k" * 48,
    "HARNESS_MODEL_GATEWAY_VENDORS": "anthropic,openai",
    "HARNESS_MODEL_GATEWAY_KEY_SECRETS": "anthropic=anthropic-api-key,openai=openai-api-key",
}
CLAUDE = next(d for d in load_builtin_catalog() if d.metadata["name"] == "claude").spec
# What Claude Code reported behind the gateway before (docs/cli-facts.md): the team's key, it says.
CLI_SAID = "Invalid API key · Fix external API key"


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a"},
            "spec": {"provider": "claude", "prompt": "x", **spec},
        }
    )


def auth_failed(reason: str = Reason.AuthFailed, message: str = CLI_SAID) -> ResultDocument:
    return ResultDocument.model_validate(
        {"attempt": 1, "provider": "claude", "exitCode": 1, "reason": reason, "message": message}
    )


def test_the_platforms_refused_key_is_named_by_its_secret_not_the_teams() -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None and route.vendor == "anthropic"
    message = with_refused_key(auth_failed(), run, route, config).message or ""
    assert "refused the platform's key" in message and "not this run's" in message
    assert "Secret harness-system/anthropic-api-key" in message
    assert "modelGateway.vendors.anthropic.secretName" in message and "Fix external API key" not in message


def test_without_the_secrets_name_it_still_says_whose_key_it_is() -> None:
    config = OperatorConfig.from_env({**CHART_ENV, "HARNESS_MODEL_GATEWAY_KEY_SECRETS": ""})
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None
    message = with_refused_key(auth_failed(), run, route, config).message or ""
    assert "refused the platform's key" in message and "in its Secret" in message


def test_a_runs_own_key_the_gateway_holds_is_named_as_the_runs() -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    own = {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "team-key", "key": "api-key"}}
    run = make_run(credentials=[own])
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None  # the gateway holds the run's own key for it
    message = with_refused_key(auth_failed(), run, route, config).message or ""
    assert "the run's own key, Secret team-a/team-key key api-key" in message
    assert "platform" not in message


@pytest.mark.parametrize("reason", [Reason.ProviderError, Reason.RateLimited, None])
def test_other_results_are_left_as_the_cli_said(reason: str | None) -> None:
    config = OperatorConfig.from_env(CHART_ENV)
    run = make_run()
    route = compute_model_route(run, CLAUDE, config)
    assert route is not None
    result = (
        auth_failed(reason, "something else")
        if reason
        else ResultDocument(attempt=1, provider="claude", exit_code=0)
    )
    assert with_refused_key(result, run, route, config) == result


def test_a_refused_key_is_not_retried() -> None:
    # Two tries of claude, then codex: the refused key goes to the fallback, never to claude's retry.
    assert compute_next_index([1, 1, 2], 1, RetryPolicy(limit=1), Reason.AuthFailed, 1) == 3
    assert compute_next_index([1, 1], 1, RetryPolicy(limit=1), Reason.AuthFailed, 1) is None
