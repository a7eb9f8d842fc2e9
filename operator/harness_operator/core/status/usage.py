"""A run's usage: its attempts' usage summed (pure)."""

from __future__ import annotations

from functools import reduce

from harness_operator.api.v1alpha1 import CostSource, Usage
from harness_operator.contract.usage import Tokens, tokens_of


def sum_usage(items: list[Usage]) -> Usage:
    """Usage summed across attempts; a cost is known only if every attempt's is, and is then
    `metered` or `reported` only if every attempt's was."""
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
        source = next(
            (s for s in (CostSource.metered, CostSource.reported) if sources == {s}), CostSource.computed
        )
    where = ", ".join(sorted({u.price_source for u in items if u.price_source})) or None
    tokens = reduce(Tokens.plus, (tokens_of(u) for u in items))
    return Usage(
        input_tokens=tokens.input,
        output_tokens=tokens.output,
        cache_read_tokens=tokens.cache_read,
        cache_write_tokens=tokens.cache_write,
        turns=total([u.turns for u in items]),
        cost_usd=cost,
        cost_source=source,
        price_source=None if cost is None else where,
    )
