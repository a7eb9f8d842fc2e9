"""Usage and cost of one attempt: reported by the CLI, else tokens x pricing, else unknown (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from harness_operator.api.v1alpha1 import CostSource, ModelPricing, Usage
from harness_operator.runner.parsers.base import Report, Tokens

PER_MILLION = 1_000_000


def find_pricing(
    pricing: Mapping[str, ModelPricing], model: str | None, model_hint: str | None = None
) -> ModelPricing | None:
    """The reported model's price, else the requested model's, else the only entry; None if unknown."""
    for name in (model, model_hint):
        if name and name in pricing:
            return pricing[name]
    if len(pricing) == 1:
        return next(iter(pricing.values()))
    return None


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


def compute_cost(
    report: Report, pricing: Mapping[str, ModelPricing], model_hint: str | None = None
) -> tuple[float | None, CostSource]:
    """(cost, source): `reported` when the CLI gave it, `computed` from pricing, else (None, unknown)."""
    if report.cost_usd is not None:
        return report.cost_usd, CostSource.reported
    if not pricing:
        return None, CostSource.unknown
    if report.by_model and all(name in pricing for name in report.by_model):
        costs = [price_tokens(t, pricing[name]) for name, t in report.by_model.items()]
        if all(c is not None for c in costs):
            return sum(c for c in costs if c is not None), CostSource.computed
    price = find_pricing(pricing, report.model, model_hint)
    if price is None:
        return None, CostSource.unknown
    cost = price_tokens(report.tokens, price)
    return (cost, CostSource.computed) if cost is not None else (None, CostSource.unknown)


def compute_usage(
    report: Report, pricing: Mapping[str, ModelPricing], model_hint: str | None = None
) -> Usage:
    """The attempt's Usage as the API shows it; unknown figures stay absent."""
    cost, source = compute_cost(report, pricing, model_hint)
    return Usage(
        input_tokens=report.tokens.input,
        output_tokens=report.tokens.output,
        cache_read_tokens=report.tokens.cache_read,
        cache_write_tokens=report.tokens.cache_write,
        turns=report.turns,
        cost_usd=None if cost is None else round(cost, 6),
        cost_source=source,
    )


def sum_usage(items: list[Usage]) -> Usage:
    """Usage summed across attempts; a cost is known only if every attempt's is, and is then
    `reported` only if every attempt's was."""
    if not items:
        return Usage()

    def total(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    costs = [u.cost_usd for u in items]
    sources = {u.cost_source for u in items}
    if any(c is None for c in costs):
        cost, source = None, CostSource.unknown
    else:
        cost = round(sum(c for c in costs if c is not None), 6)
        source = CostSource.reported if sources == {CostSource.reported} else CostSource.computed
    return Usage(
        input_tokens=total([u.input_tokens for u in items]),
        output_tokens=total([u.output_tokens for u in items]),
        cache_read_tokens=total([u.cache_read_tokens for u in items]),
        cache_write_tokens=total([u.cache_write_tokens for u in items]),
        turns=total([u.turns for u in items]),
        cost_usd=cost,
        cost_source=source,
    )
