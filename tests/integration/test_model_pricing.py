"""A tenant's HarnessDefinition prices its model at zero (red team 49, item 3), replayed on the real
cluster through two real model gateways and the Anthropic stub: the definition is created in the tenant's
namespace and read back from the API server as the operator reads it; the run's plans and grant are the
operator's own (build_plans, Grants); its budget is admitted and charged by the operator's own functions.

Before the fix the gateway metered each Opus answer at the definition's 0 USD and a 0.05 USD budget never
bound. Now the price is the pinned table's (a namespaced definition's price only raises it), the gateway
refuses at the budget's reservation, and the budget charges the table price and refuses the next run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import genai_prices
import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION, HarnessBudgetSpec, HarnessRun, ModelPricing
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.usage import Tokens
from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_reader import KubeReader
from harness_operator.controller.metering import MeterReader
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.queue.budget import (
    BudgetRef,
    Ledger,
    build_run_charge,
    compute_run_admission,
    reserve,
    settle_run,
)
from harness_operator.core.resolve.resolution import resolve_targets
from harness_operator.core.status.metered import build_metered_usage
from harness_operator.runner.cost import compute_cost, price_book
from harness_operator.runner.parsers import Report

from .test_crd_admission import apply_crds
from .test_model_gateway import ROUTED_CLAUDE, Env, env, operator_side, post  # noqa: F401  (env: fixture)

OPUS = "claude-opus-4-1"
FREE = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
BUDGET_USD = 0.05
NOW = datetime.now(UTC)


@pytest.fixture(scope="module", autouse=True)
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)
    yield


def table_usd(usage: dict[str, int]) -> float:
    """What the pinned table bills an Opus answer's usage at (genai-prices' own calculator)."""
    cache_read = usage.get("cache_read_input_tokens", 0)
    cache_write = usage.get("cache_creation_input_tokens", 0)
    counted = genai_prices.Usage(
        input_tokens=usage["input_tokens"] + cache_read + cache_write,
        output_tokens=usage["output_tokens"],
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    return float(genai_prices.calc_price(counted, OPUS, provider_id="anthropic").total_price)


def test_a_namespaced_definitions_zero_price_is_metered_at_the_table_price_and_the_budget_binds(
    env: Env,  # noqa: F811  (test_model_gateway's fixture)
    namespace: str,
) -> None:
    # The tenant's definition: Claude Code routed through the gateway, Opus (and every Claude) free.
    spec = ROUTED_CLAUDE.model_dump(by_alias=True, mode="json", exclude_defaults=True)
    spec["pricing"] = {OPUS: FREE, "claude": FREE}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HarnessDefinition", "metadata": {"name": "claude"}}
    client.CustomObjectsApi(env.kube).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessdefinitions", {**body, "spec": spec}
    )
    config, grants = operator_side(env, env.gateways[0])
    budget = BudgetRef(
        "team", HarnessBudgetSpec.model_validate({"period": "daily", "limits": {"maxCostUSD": BUDGET_USD}})
    )
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "opus", "namespace": namespace, "uid": f"uid-opus-{namespace}"},
            "spec": {"provider": "claude", "prompt": "x", "with": {"model": OPUS}},
        }
    )
    # The operator admits the run in its budget: the whole budget is its reservation.
    admission, names = compute_run_admission(run.metadata["uid"], {}, None, [(budget, Ledger())], NOW)
    assert admission.admitted and admission.cap_usd == BUDGET_USD and names == ["team"]
    ledger = reserve(Ledger(), run.metadata["uid"], "opus", admission.cap_usd, NOW)
    # ... recorded in the run's status before its first Job, where the grant's cap comes from.
    admitted = {"budget": {"names": names, "reservedUSD": admission.cap_usd}}
    run = HarnessRun.model_validate({**run.model_dump(by_alias=True, mode="json"), "status": admitted})

    targets = resolve_targets(KubeReader(Kube(env.kube)), run)
    assert targets[0].namespaced  # read from the tenant's namespace, not the ClusterHarnessDefinition
    targets = decide_attempts(run, targets, config)

    # The runner's cost (what a CLI that reports tokens only is charged) is the table's, not zero.
    plan = build_plans(run, targets[:1], "x", None, NOW, config)[0]
    assert ModelPricing.model_validate(plan["pricing"][OPUS]) == ModelPricing()  # the tenant's 0, kept as its
    book = price_book(AttemptPlan.model_validate(plan))
    runner_cost = compute_cost(Report(model=OPUS, tokens=Tokens(input=10**6)), book)
    assert runner_cost.usd is not None and runner_cost.usd >= 15
    assert runner_cost.usd == pytest.approx(plan["tablePricing"][OPUS]["input"])

    # The gateway's meter: every Opus answer at the table's price, refused at the budget's reservation.
    secrets = grants.write(run, targets)
    token = secrets["model-env-1-ANTHROPIC_API_KEY"]
    grants.admit(run, targets, 1)
    url = f"{env.gateways[1].url}/anthropic/v1/messages"
    # A prompt the size of the stub's answer's input (1234 tokens): the gateway's worst case, estimated
    # from the request's bytes, covers it, so the budget is never overspent.
    prompt = "Hi " * 1300
    message = {"model": OPUS, "max_tokens": 1024, "messages": [{"role": "user", "content": prompt}]}
    billed: list[float] = []
    statuses: list[int] = []
    for _ in range(60):  # the red team's 60 Opus answers
        status, answer = post(url, token, message)
        statuses.append(status)
        if status != 200:
            break
        billed.append(table_usd(json.loads(answer)["usage"]))
    assert statuses[-1] == 400, statuses  # refused at the budget's reservation, in Anthropic's shape
    assert 1 <= len(billed) <= 3, statuses
    meter = MeterReader(config).read(run.metadata["uid"], None)
    assert min(billed) > 0.01  # each Opus answer costs what the table says, not the definition's 0
    assert meter.cost_usd == pytest.approx(sum(billed))
    assert BUDGET_USD - max(billed) < meter.cost_usd + meter.reserved_usd <= BUDGET_USD + 1e-9
    grants.revoke_attempt(run, 1)

    # The run's status usage is the meter's; the budget charges it, and refuses the next run.
    usage = build_metered_usage(meter, None)
    assert usage.cost_usd == pytest.approx(meter.cost_usd) and usage.cost_source == "metered"
    finished = {
        "metadata": run.metadata,
        "status": {
            "usage": usage.to_api(),
            "conditions": [{"type": "Succeeded", "status": "False", "reason": "CostLimitExceeded"}],
        },
    }
    ledger = settle_run(budget.spec, ledger, build_run_charge(finished), NOW)
    assert sum(b.spent_usd for b in ledger.buckets) == pytest.approx(meter.cost_usd)
    after, _ = compute_run_admission("uid-next", {}, None, [(budget, ledger)], NOW)
    print(f"\nmeasured: {len(billed)} Opus answers, {meter.cost_usd:.6f} USD metered of {BUDGET_USD}")
    assert not after.admitted or (after.cap_usd is not None and after.cap_usd < min(billed))
