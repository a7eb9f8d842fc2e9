"""List prices from the pinned genai-prices table, put into attempt plans for the runner (pure).

The runner carries no table (the sandbox has only its own modules and pydantic): the operator, and
`harnessctl run`, copy the vendor's prices into the plan, where the runner finds the model the CLI
reports. The table is the wheel's offline snapshot, never updated at run time, so a figure changes only
with the pinned version (pyproject), which `usage.priceSource` names.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from importlib.metadata import version

from genai_prices import data_snapshot, types

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, ModelPricing
from harness_operator.contract.plan import AttemptPlan

PRICE_TABLE = f"genai-prices {version('genai-prices')}"


def _usd(value: Decimal | types.TieredPrices | None) -> float:
    # A tier applies per request above a prompt size (200k tokens); an attempt's totals cannot say which
    # requests crossed it, so the base price is the honest lower bound.
    if value is None:
        return 0.0
    return float(value.base if isinstance(value, types.TieredPrices) else value)


def build_model_pricing(model: types.ModelInfo, now: datetime) -> ModelPricing | None:
    """The model's token prices at `now`; None when it has no token price (priced per request)."""
    price = model.get_prices(now)
    if price.input_mtok is None and price.output_mtok is None:
        return None
    return ModelPricing(
        input=_usd(price.input_mtok),
        output=_usd(price.output_mtok),
        cache_read=_usd(price.cache_read_mtok),
        cache_write=_usd(price.cache_write_mtok),
    )


def find_vendor(definition: HarnessDefinitionSpec, model: str | None) -> types.Provider | None:
    """The definition's vendor, else the `vendor/` prefix of the model, else the table's match."""
    snapshot = data_snapshot.get_snapshot()
    names = [definition.vendor] if definition.vendor else []
    if model and "/" in model:
        names.append(model.split("/", 1)[0].lower())
    for name in names:
        for provider in snapshot.providers:
            if provider.id == name:
                return provider
    if model and not definition.vendor:
        try:
            return snapshot.find_provider_model(model, None, None, None)[0]
        except LookupError:
            return None
    return None


def find_table_model(definition: HarnessDefinitionSpec, model: str) -> types.ModelInfo | None:
    """The table's entry for a requested model, by the table's own rules (aliases, dated names)."""
    vendor = find_vendor(definition, model)
    if vendor is None:
        return None
    try:
        return data_snapshot.get_snapshot().find_provider_model(model, vendor, None, None)[1]
    except LookupError:
        return None


def is_priced_by_table(definition: HarnessDefinitionSpec, model: str) -> bool:
    """Whether the table has a token price for the model, at any time it lists."""
    info = find_table_model(definition, model)
    if info is None:
        return False
    prices = [info.prices] if isinstance(info.prices, types.ModelPrice) else [c.prices for c in info.prices]
    return any(p.input_mtok is not None or p.output_mtok is not None for p in prices)


def build_table_pricing(
    definition: HarnessDefinitionSpec, model: str | None, now: datetime
) -> dict[str, ModelPricing]:
    """Every token-priced model of the vendor by table id, plus the requested model under its own name
    (matched by the table's rules, which know aliases and dated names)."""
    vendor = find_vendor(definition, model)
    if vendor is None:
        return {}
    prices = {m.id.lower(): p for m in vendor.models if (p := build_model_pricing(m, now)) is not None}
    info = find_table_model(definition, model) if model else None
    if model and info and (price := build_model_pricing(info, now)) is not None:
        prices[model.lower().rsplit("/", 1)[-1]] = price
    return prices


def with_table_pricing(plan: AttemptPlan, definition: HarnessDefinitionSpec, now: datetime) -> AttemptPlan:
    """The plan with the table's prices for its vendor; unchanged when the table knows no vendor."""
    table = build_table_pricing(definition, plan.model_hint, now)
    if not table:
        return plan
    return plan.model_copy(update={"table_pricing": table, "price_table": PRICE_TABLE})
