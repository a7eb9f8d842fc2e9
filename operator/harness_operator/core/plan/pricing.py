"""List prices from the pinned genai-prices table, and the prices an attempt is charged at, put into its
plan for the runner and its grant for the model gateway (pure).

The runner carries no table (the sandbox has only its own modules and pydantic): the operator, and
`harnessctl run`, copy the vendor's prices into the plan, where the runner finds the model the CLI
reports; the gateway builds the same table per request (at the tier of the request's size). The table is
the wheel's offline snapshot, never updated at run time, so a figure changes only with the pinned version
(pyproject), which `usage.priceSource` names. Whose definition the other prices come from decides how far
they count (contract/pricing.py): a ClusterHarnessDefinition's are the platform's, a namespaced
HarnessDefinition's only raise them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from importlib.metadata import version
from types import MappingProxyType

from genai_prices import data_snapshot, types

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, ModelPricing
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.pricing import model_key

PRICE_TABLE = f"genai-prices {version('genai-prices')}"
# The table's vendor of each model route's (modelgateway/vendors.py names the same).
ROUTE_VENDORS = {"anthropic": "anthropic", "openai": "openai", "gemini": "google"}


def _usd(value: Decimal | types.TieredPrices | None, prompt_tokens: int | None, worst: bool) -> float | None:
    """USD per million tokens. A tier applies per request above a prompt size (200k tokens): with no
    request size (an attempt's totals cannot say which requests crossed it) the base price, the honest
    lower bound; with one, the tier that size is in (above its start, as the table bills); `worst`: the
    dearest tier."""
    if value is None:
        return None
    if not isinstance(value, types.TieredPrices):
        return float(value)
    if worst:
        return float(max([value.base, *(t.price for t in value.tiers)]))
    price = value.base
    for tier in sorted(value.tiers, key=lambda t: t.start):
        if prompt_tokens is not None and prompt_tokens > tier.start:
            price = tier.price
    return float(price)


def build_model_pricing(
    model: types.ModelInfo, now: datetime, prompt_tokens: int | None = None, worst: bool = False
) -> ModelPricing | None:
    """The model's token prices at `now`, for a request of `prompt_tokens` (else the base tier; `worst`:
    the dearest tier); None when it has no token price (priced per request). A cache price the table
    lacks is the input price: the table bills those tokens as input."""
    price = model.get_prices(now)
    if price.input_mtok is None and price.output_mtok is None:
        return None
    given = _usd(price.input_mtok, prompt_tokens, worst) or 0.0
    cache_read = _usd(price.cache_read_mtok, prompt_tokens, worst)
    cache_write = _usd(price.cache_write_mtok, prompt_tokens, worst)
    return ModelPricing(
        input=given,
        output=_usd(price.output_mtok, prompt_tokens, worst) or 0.0,
        cache_read=given if cache_read is None else cache_read,
        cache_write=given if cache_write is None else cache_write,
    )


def find_provider(provider_id: str) -> types.Provider | None:
    """The table's vendor of this id."""
    return next((p for p in data_snapshot.get_snapshot().providers if p.id == provider_id), None)


def find_vendor(definition: HarnessDefinitionSpec, model: str | None) -> types.Provider | None:
    """The definition's vendor, else the `vendor/` prefix of the model, else its model route's vendor,
    else the table's match."""
    snapshot = data_snapshot.get_snapshot()
    names = [definition.vendor] if definition.vendor else []
    if model and "/" in model:
        names.append(model.split("/", 1)[0].lower())
    if definition.model_route is not None:
        names.append(ROUTE_VENDORS.get(definition.model_route.vendor, definition.model_route.vendor))
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
    return None if vendor is None else find_vendor_model(vendor, model)


def find_vendor_model(vendor: types.Provider, model: str) -> types.ModelInfo | None:
    """The vendor's table entry for a model name, by the table's own rules (aliases, dated names)."""
    try:
        return data_snapshot.get_snapshot().find_provider_model(model, vendor, None, None)[1]
    except LookupError:
        return None


def list_model_prices(model: types.ModelInfo) -> list[types.ModelPrice]:
    """Every price the table lists for the model, at any time (its conditional prices' too)."""
    return [model.prices] if isinstance(model.prices, types.ModelPrice) else [c.prices for c in model.prices]


def is_priced_by_table(definition: HarnessDefinitionSpec, model: str) -> bool:
    """Whether the table has a token price for the model, at any time it lists."""
    info = find_table_model(definition, model)
    if info is None:
        return False
    return any(p.input_mtok is not None or p.output_mtok is not None for p in list_model_prices(info))


def build_vendor_table(
    vendor: types.Provider,
    model: str | None,
    now: datetime,
    prompt_tokens: int | None = None,
    worst: bool = False,
) -> dict[str, ModelPricing]:
    """Every token-priced model of the vendor by table id, plus `model` under its own name (matched by
    the table's rules, which know aliases and dated names); prices as build_model_pricing gives them."""
    prices = {
        m.id.lower(): p
        for m in vendor.models
        if (p := build_model_pricing(m, now, prompt_tokens, worst)) is not None
    }
    info = find_vendor_model(vendor, model) if model else None
    if model and info and (price := build_model_pricing(info, now, prompt_tokens, worst)) is not None:
        prices[model_key(model)] = price
    return prices


def find_vendor_table(
    provider_id: str, model: str | None, now: datetime, prompt_tokens: int | None = None, worst: bool = False
) -> Mapping[str, ModelPricing]:
    """build_vendor_table of the table's vendor `provider_id` (empty when the table has none), built once
    a minute for each model and tier: the table is pinned, and a price changes only with the date or the
    time of day, so the model gateway need not rebuild a vendor's hundred prices for each request."""
    tier = None if worst else compute_tier_floor(provider_id, prompt_tokens)
    return _vendor_table(provider_id, model, now.replace(second=0, microsecond=0), tier, worst)


def compute_tier_floor(provider_id: str, prompt_tokens: int | None) -> int | None:
    """The smallest prompt size priced as `prompt_tokens` is by every model of the vendor: just past
    the highest tier start it crosses (0: the base tier; None: no size, the base tier too)."""
    if prompt_tokens is None:
        return None
    return max((start + 1 for start in _tier_starts(provider_id) if prompt_tokens > start), default=0)


@lru_cache(maxsize=64)
def _tier_starts(provider_id: str) -> tuple[int, ...]:
    vendor = find_provider(provider_id)
    starts: set[int] = set()
    for model in vendor.models if vendor else ():
        for price in list_model_prices(model):
            for value in vars(price).values():
                if isinstance(value, types.TieredPrices):
                    starts.update(t.start for t in value.tiers)
    return tuple(sorted(starts))


@lru_cache(maxsize=1024)  # a tenant naming many models only evicts: each entry is one vendor's table
def _vendor_table(
    provider_id: str, model: str | None, minute: datetime, tier: int | None, worst: bool
) -> Mapping[str, ModelPricing]:
    vendor = find_provider(provider_id)
    table = {} if vendor is None else build_vendor_table(vendor, model, minute, tier, worst)
    return MappingProxyType(table)


def build_table_pricing(
    definition: HarnessDefinitionSpec, model: str | None, now: datetime
) -> dict[str, ModelPricing]:
    """The table's prices of the definition's vendor (find_vendor), at their base tier."""
    vendor = find_vendor(definition, model)
    return {} if vendor is None else build_vendor_table(vendor, model, now)


def with_pricing(
    plan: AttemptPlan, definition: HarnessDefinitionSpec, namespaced: bool, now: datetime
) -> AttemptPlan:
    """The plan with the prices its attempt is charged at: the definition's, as a namespaced
    HarnessDefinition's (`pricing`: they only raise the trusted price) or a ClusterHarnessDefinition's
    (`platform_pricing`), and the table's for its vendor (none when the table knows no vendor)."""
    own = dict(definition.pricing)
    update: dict[str, object] = {
        "pricing": own if namespaced else {},
        "platform_pricing": {} if namespaced else own,
    }
    table = build_table_pricing(definition, plan.model_hint, now)
    if table:
        update.update(table_pricing=table, price_table=PRICE_TABLE)
    return plan.model_copy(update=update)
