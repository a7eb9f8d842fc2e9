"""The one price lookup of a model, for the runner, the model gateway and the operator alike, with the
trust rule applied once (pure).

Prices have three origins. The pinned price table's list prices (`table`, filled by the operator or the
gateway) and a ClusterHarnessDefinition's `pricing` (`platform`) are the platform's: trusted. A
namespaced HarnessDefinition's `pricing` (`tenant`) is written by the namespace's `edit` users, who may be
hostile: it can only raise a price, never lower it. Per model and per component (input, output, cache
read, cache write) the price is the larger of the tenant's and the trusted one. A model no trusted source
prices costs at least the dearest price the vendor's table lists (per component); with no vendor table
at all (a custom CLI, never routed through the model gateway, whose cost is then the CLI's own word), the
tenant's price counts as given.

One matching rule for a model name as a CLI or a vendor writes it: exact (any case, without a `vendor/`
prefix), else the longest price key it extends at a `-`, `.` or `@` (`gpt-5-2025-08-07` is `gpt-5`).
With no model name at all, a list of exactly one price is that price.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness_operator.api.v1alpha1 import ModelPricing

DEFINITION = "definition"
TABLE = "table"
SEPARATORS = ("-", ".", "@")


def model_key(name: str) -> str:
    """A model name as price lists key it: lower case, without a `vendor/` prefix."""
    return name.lower().rsplit("/", 1)[-1]


def match_price(prices: Mapping[str, ModelPricing], name: str) -> ModelPricing | None:
    """The price of a model name: exact (any case, without a `vendor/` prefix), else the longest key the
    name extends at a `-`, `.` or `@`; None when no key matches."""
    keyed = {model_key(key): price for key, price in prices.items()}
    ref = model_key(name)
    if ref in keyed:
        return keyed[ref]
    best = max(
        (key for key in keyed if key and ref.startswith(key) and ref[len(key) : len(key) + 1] in SEPARATORS),
        key=len,
        default=None,
    )
    return None if best is None else keyed[best]


def only_price(prices: Mapping[str, ModelPricing]) -> ModelPricing | None:
    """The one price of a list of one, for a model nobody named; None otherwise."""
    return next(iter(prices.values())) if len(prices) == 1 else None


def raise_price(price: ModelPricing, floor: ModelPricing) -> ModelPricing:
    """Each component at least the floor's."""
    return ModelPricing(
        input=max(price.input, floor.input),
        output=max(price.output, floor.output),
        cache_read=max(price.cache_read, floor.cache_read),
        cache_write=max(price.cache_write, floor.cache_write),
    )


def dearest_price(prices: Mapping[str, ModelPricing]) -> ModelPricing | None:
    """Each component at the largest of the list; None for an empty list."""
    if not prices:
        return None
    values = list(prices.values())
    return ModelPricing(
        input=max(p.input for p in values),
        output=max(p.output for p in values),
        cache_read=max(p.cache_read for p in values),
        cache_write=max(p.cache_write for p in values),
    )


@dataclass(frozen=True)
class PriceBook:
    """The prices one attempt may be charged at: `platform` (a ClusterHarnessDefinition's pricing) and
    `table` (the pinned table's list prices of the vendor) are trusted; `tenant` (a namespaced
    HarnessDefinition's pricing) only raises them."""

    tenant: Mapping[str, ModelPricing] = field(default_factory=dict)
    platform: Mapping[str, ModelPricing] = field(default_factory=dict)
    table: Mapping[str, ModelPricing] = field(default_factory=dict)
    table_name: str | None = None

    def trusted(self, name: str | None) -> tuple[ModelPricing, str] | None:
        """The platform's price of a model (its definition's, else the table's), with where it came from."""
        if name is None:
            price = only_price(self.platform)
            return None if price is None else (price, DEFINITION)
        if (price := match_price(self.platform, name)) is not None:
            return price, DEFINITION
        if (price := match_price(self.table, name)) is not None:
            return price, self.table_name or TABLE
        return None

    def find_one(self, name: str | None) -> tuple[ModelPricing, str] | None:
        """(price, where it came from) of one model name (None: nobody named it), the trust rule applied."""
        trusted = self.trusted(name)
        own = only_price(self.tenant) if name is None else match_price(self.tenant, name)
        if own is None:
            return trusted
        if trusted is None:
            floor = dearest_price(self.table)
            if floor is None:
                return own, DEFINITION
            return raise_price(own, floor), DEFINITION
        price, source = trusted
        raised = raise_price(own, price)
        return raised, (source if raised == price else DEFINITION)

    def find(self, model: str | None, model_hint: str | None = None) -> tuple[ModelPricing, str] | None:
        """(price, where it came from) of the reported model, else of the requested one, else (neither
        named) of the only price listed; None when nothing prices it."""
        names = [name for name in (model, model_hint) if name]
        for name in names:
            if (found := self.find_one(name)) is not None:
                return found
        return None if names else self.find_one(None)
