"""contract/pricing.py: the one price lookup (matching a model name) and the trust rule (a namespaced
definition's price only raises the platform's), as the runner, the gateway and the operator use it."""

from __future__ import annotations

import pytest

from harness_operator.api.v1alpha1 import ModelPricing
from harness_operator.contract.pricing import (
    DEFINITION,
    PriceBook,
    dearest_price,
    match_price,
    model_key,
    only_price,
    raise_price,
)

OPUS = ModelPricing(input=15, output=75, cache_read=1.5, cache_write=18.75)
SONNET = ModelPricing(input=3, output=15, cache_read=0.3, cache_write=3.75)
ZERO = ModelPricing()
TABLE = {"claude-opus-4-1": OPUS, "claude-sonnet-4-5": SONNET, "claude-sonnet-4": SONNET}
TABLE_NAME = "genai-prices 0.2.3"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("claude-opus-4-1", OPUS),
        ("Claude-Opus-4-1", OPUS),  # any case
        ("anthropic/claude-opus-4-1", OPUS),  # without the vendor prefix
        ("claude-opus-4-1-20250805", OPUS),  # a dated name extends the id at a '-'
        ("claude-opus-4-1@20250805", OPUS),  # ... or at an '@' (Vertex)
        ("claude-sonnet-4-5-20250929", SONNET),  # the longest id it extends, not claude-sonnet-4
        ("claude-opus-4-10", None),  # extends "claude-opus-4-1" at no separator
        ("claude-opus", None),  # shorter than every id
        ("gpt-5", None),
    ],
)
def test_match_price_exact_else_the_longest_id_the_name_extends(
    name: str, expected: ModelPricing | None
) -> None:
    assert match_price(TABLE, name) == expected


def test_match_price_keys_are_matched_in_any_case_and_without_a_vendor_prefix() -> None:
    assert match_price({"Anthropic/Claude-Opus-4-1": OPUS}, "claude-opus-4-1-20250805") == OPUS
    assert model_key("OpenAI/GPT-5") == "gpt-5"


def test_match_price_an_empty_key_matches_nothing() -> None:
    assert match_price({"": ZERO}, "-x") is None


def test_only_price_is_the_price_of_a_list_of_one() -> None:
    assert only_price({"m": OPUS}) == OPUS
    assert only_price({}) is None
    assert only_price(TABLE) is None


def test_raise_price_takes_each_component_at_least_the_floor() -> None:
    mixed = ModelPricing(input=20, output=1, cache_read=0, cache_write=100)
    assert raise_price(mixed, OPUS) == ModelPricing(input=20, output=75, cache_read=1.5, cache_write=100)
    assert raise_price(ZERO, OPUS) == OPUS


def test_dearest_price_is_each_component_at_the_largest_of_the_list() -> None:
    cheap_cache = ModelPricing(input=1, output=2, cache_read=5, cache_write=0)
    assert dearest_price({"a": OPUS, "b": cheap_cache}) == ModelPricing(
        input=15, output=75, cache_read=5, cache_write=18.75
    )
    assert dearest_price({}) is None


TABLE_BOOK = PriceBook(table=TABLE, table_name=TABLE_NAME)


def test_the_table_prices_a_model_it_lists_under_its_name() -> None:
    assert TABLE_BOOK.find("claude-opus-4-1-20250805") == (OPUS, TABLE_NAME)
    assert PriceBook(table=TABLE).find("claude-opus-4-1") == (OPUS, "table")


def test_a_namespaced_price_of_zero_is_the_table_price() -> None:
    """The red team's attack: a HarnessDefinition in the tenant's namespace prices Opus at zero."""
    book = PriceBook(tenant={"claude-opus-4-1": ZERO}, table=TABLE, table_name=TABLE_NAME)
    assert book.find("claude-opus-4-1") == (OPUS, TABLE_NAME)
    assert book.find("claude-opus-4-1-20250805") == (OPUS, TABLE_NAME)  # matched by the same rule


def test_a_namespaced_prefix_key_cannot_lower_a_model_the_table_lists() -> None:
    # "claude" extends to every Claude model: each is still priced at least at its own table price.
    book = PriceBook(tenant={"claude": ZERO}, table=TABLE, table_name=TABLE_NAME)
    assert book.find("claude-opus-4-1") == (OPUS, TABLE_NAME)
    assert book.find("claude-sonnet-4-5") == (SONNET, TABLE_NAME)


def test_a_namespaced_price_raises_per_component() -> None:
    higher_output = ModelPricing(input=1, output=100, cache_read=0, cache_write=0)
    book = PriceBook(tenant={"claude-opus-4-1": higher_output}, table=TABLE, table_name=TABLE_NAME)
    raised = ModelPricing(input=15, output=100, cache_read=1.5, cache_write=18.75)
    assert book.find("claude-opus-4-1") == (raised, DEFINITION)


def test_a_namespaced_price_cannot_lower_the_platforms() -> None:
    platform = {"claude-opus-4-1": ModelPricing(input=10, output=50)}
    book = PriceBook(tenant={"claude-opus-4-1": ZERO}, platform=platform, table=TABLE)
    assert book.find("claude-opus-4-1") == (platform["claude-opus-4-1"], DEFINITION)


def test_the_platforms_price_wins_over_the_table_even_when_lower() -> None:
    platform = {"claude-opus-4-1": ModelPricing(input=10, output=50)}
    book = PriceBook(platform=platform, table=TABLE, table_name=TABLE_NAME)
    assert book.find("claude-opus-4-1") == (platform["claude-opus-4-1"], DEFINITION)
    assert book.find("claude-sonnet-4-5") == (SONNET, TABLE_NAME)  # the table for the rest


def test_a_model_only_the_tenant_prices_costs_at_least_the_vendors_dearest() -> None:
    book = PriceBook(tenant={"claude-secret-9": ZERO}, table=TABLE, table_name=TABLE_NAME)
    assert book.find("claude-secret-9") == (OPUS, DEFINITION)
    dearer = ModelPricing(input=100, output=1, cache_read=2, cache_write=3)
    book = PriceBook(tenant={"claude-secret-9": dearer}, table=TABLE)
    assert book.find("claude-secret-9") == (
        ModelPricing(input=100, output=75, cache_read=2, cache_write=18.75),
        DEFINITION,
    )


def test_with_no_vendor_table_the_tenants_price_counts_as_given() -> None:
    # A custom CLI the table knows no vendor of: never routed, its cost is the CLI's own word anyway.
    own = ModelPricing(input=0.1)
    assert PriceBook(tenant={"fake-model": own}).find("fake-model") == (own, DEFINITION)


def test_a_model_nobody_prices_is_unknown() -> None:
    assert TABLE_BOOK.find("gpt-5") is None
    assert PriceBook(tenant={"other": OPUS}, table=TABLE).find("gpt-5") is None
    assert PriceBook().find("m") is None


def test_the_reported_model_first_then_the_requested_one() -> None:
    assert TABLE_BOOK.find("claude-sonnet-4-5", "claude-opus-4-1") == (SONNET, TABLE_NAME)
    assert TABLE_BOOK.find("unknown-model", "claude-opus-4-1") == (OPUS, TABLE_NAME)
    assert TABLE_BOOK.find(None, "claude-opus-4-1") == (OPUS, TABLE_NAME)


def test_with_no_model_named_a_single_price_applies_by_the_same_rule() -> None:
    assert PriceBook(platform={"m": SONNET}).find(None) == (SONNET, DEFINITION)
    # the tenant's only price: no trusted price of an unnamed model, so the vendor's dearest at least
    assert PriceBook(tenant={"m": ZERO}, table=TABLE).find(None) == (OPUS, DEFINITION)
    assert PriceBook(tenant={"m": SONNET}).find(None) == (SONNET, DEFINITION)
    assert PriceBook(platform=TABLE).find(None) is None  # more than one: which?
    assert TABLE_BOOK.find(None) is None


def test_a_named_model_never_takes_a_lone_price_of_another() -> None:
    # The old lookup priced any model at a definition's only entry: a cheap one for Opus.
    assert PriceBook(tenant={"claude-haiku": ZERO}).find("claude-opus-4-1") is None
    assert PriceBook(platform={"claude-haiku": ZERO}).find("claude-opus-4-1") is None
