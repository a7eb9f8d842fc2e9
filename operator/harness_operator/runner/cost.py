"""Usage and cost of one attempt: reported by the CLI, else tokens x prices, else unknown (pure).

Prices come from the plan, looked up by contract/pricing.py: a ClusterHarnessDefinition's `pricing`, then
the pinned price table's list prices that the operator put there (the runner itself carries no table); a
namespaced HarnessDefinition's `pricing` only raises them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from harness_operator.api.v1alpha1 import CostSource, ModelPricing, Usage
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.pricing import PriceBook
from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers.base import Report

PER_MILLION = 1_000_000


def price_book(plan: AttemptPlan) -> PriceBook:
    """The prices an attempt's plan carries: its definition's (a namespaced one's only raise the
    trusted price: contract/pricing.py) and the pinned table's."""
    return PriceBook(
        tenant=plan.pricing,
        platform=plan.platform_pricing,
        table=plan.table_pricing,
        table_name=plan.price_table,
    )


class Cost(NamedTuple):
    usd: float | None
    source: CostSource
    price_source: str | None = None


UNKNOWN = Cost(None, CostSource.unknown)


def price_tokens(tokens: Tokens, price: ModelPricing) -> float | None:
    """USD for these tokens; None when no token count is known."""
    if not tokens.known:
        return None
    return (
        (tokens.input or 0) * price.input
        + (tokens.output or 0) * price.output
        + (tokens.cache_read or 0) * price.cache_read
        + (tokens.cache_write or 0) * price.cache_write
    ) / PER_MILLION


def _figure(value: float | None) -> float | None:
    """A reported figure a bill can use: finite and not negative, else unknown."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _sane_tokens(tokens: Tokens) -> Tokens:
    return Tokens(*(None if v is None or v < 0 else v for v in tokens.as_tuple()))


def compute_sane_report(report: Report) -> tuple[Report, list[str]]:
    """The report without the figures no bill can use (a negative, infinite or NaN cost; negative
    token or turn counts): they become unknown, so a cap falls back to the tokens or warns
    (CostUnknown), and never refunds a budget. Also what was dropped, for the runner's log."""
    dropped = []
    cost = _figure(report.cost_usd)
    if report.cost_usd is not None and cost is None:
        dropped.append(f"cost {report.cost_usd}")
    tokens = _sane_tokens(report.tokens)
    by_model = {name: _sane_tokens(t) for name, t in report.by_model.items()}
    if tokens != report.tokens or by_model != report.by_model:
        dropped.append(f"tokens {report.tokens.as_tuple()}")
    turns = report.turns if report.turns is None or report.turns >= 0 else None
    if turns != report.turns:
        dropped.append(f"turns {report.turns}")
    if not dropped:
        return report, []
    return report.with_(cost_usd=cost, tokens=tokens, by_model=by_model, turns=turns), dropped


def compute_cost(report: Report, prices: PriceBook, model_hint: str | None = None) -> Cost:
    """`reported` when the CLI gave it, `computed` from the price book (each model priced apart when
    the CLI splits its tokens by model), else unknown: never a zero for a model nobody prices.
    Figures no bill can use count as unknown (compute_sane_report)."""
    report, _ = compute_sane_report(report)
    if report.cost_usd is not None:
        return Cost(report.cost_usd, CostSource.reported)
    priced = {name: m for name in report.by_model if (m := prices.find(name)) is not None}
    if priced and len(priced) == len(report.by_model):
        costs = [price_tokens(report.by_model[name], m[0]) for name, m in priced.items()]
        if all(c is not None for c in costs):
            where = ", ".join(sorted({m[1] for m in priced.values()}))
            return Cost(sum(c for c in costs if c is not None), CostSource.computed, where)
    match = prices.find(report.model, model_hint)
    if match is None:
        return UNKNOWN
    cost = price_tokens(report.tokens, match[0])
    return UNKNOWN if cost is None else Cost(cost, CostSource.computed, match[1])


def compute_usage(report: Report, prices: PriceBook, model_hint: str | None = None) -> Usage:
    """The attempt's Usage as the API shows it; unknown figures (and unusable ones) stay absent."""
    report, _ = compute_sane_report(report)
    cost = compute_cost(report, prices, model_hint)
    return Usage(
        input_tokens=report.tokens.input,
        output_tokens=report.tokens.output,
        cache_read_tokens=report.tokens.cache_read,
        cache_write_tokens=report.tokens.cache_write,
        turns=report.turns,
        cost_usd=None if cost.usd is None else round(cost.usd, 6),
        cost_source=cost.source,
        price_source=cost.price_source,
    )
