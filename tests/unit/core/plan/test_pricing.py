"""Computed cost: every built-in's real captured output priced through the plan the operator builds,
checked against genai-prices' own calculator; precedence (a namespaced definition's prices only raise
the platform's), provenance, unknown models, the pinned table."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from genai_prices import data_snapshot
from genai_prices.types import Tier, TieredPrices
from tests.attempt_plans import plan_of

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun, ModelPricing
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.pricing import PriceBook
from harness_operator.contract.usage import Tokens
from harness_operator.core.plan.pricing import (
    PRICE_TABLE,
    build_model_pricing,
    build_table_pricing,
    build_vendor_table,
    compute_tier_floor,
    find_vendor_table,
    list_model_prices,
    with_pricing,
)
from harness_operator.runner.cost import compute_cost, compute_usage, price_book
from harness_operator.runner.parsers import Report, parse_text

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "cli"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}


def attempt_usage(provider: str, capture: str, options: dict[str, Any]) -> Any:
    """Plan the run as the operator does (table prices included), then price the real capture."""
    definition = CATALOG[provider]
    run = HarnessRun.model_validate(
        {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"provider": provider, "prompt": "hi"}}
    )
    plan = with_pricing(plan_of(run, definition, 1, provider, options, "hi", None), definition, False, NOW)
    report = parse_text(definition.output.format, (FIXTURES / provider / capture).read_text())
    return compute_usage(report, price_book(plan), plan.model_hint)


def table_price(model: str, vendor: str, input_: int, output: int, cache_read: int) -> float:
    """What genai-prices' own calculator says (its input_tokens include the cached ones)."""
    usage = genai_prices.Usage(
        input_tokens=input_ + cache_read, output_tokens=output, cache_read_tokens=cache_read
    )
    result = genai_prices.calc_price(usage, model, provider_id=vendor, genai_request_timestamp=NOW)
    return float(result.total_price)


# provider, capture, options, expected source, expected price source, expected USD (None: unknown)
CASES = [
    ("claude", "success.stdout", {}, "reported", None, 0.006126),
    (
        "pi",
        "success.stdout",
        {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "reported",
        None,
        0.004609,
    ),
    ("opencode", "success.stdout", {"model": "anthropic/claude-sonnet-4-5"}, "reported", None, 0.004609),
    ("aider", "success_no_stream.stdout", {"model": "gpt-4o"}, "reported", None, 0.0035),
    (
        "codex",
        "success.stdout",
        {"model": "gpt-5.4"},
        "computed",
        PRICE_TABLE,
        table_price("gpt-5.4", "openai", 1134, 56, 100),
    ),
    (
        "gemini",  # the CLI's router used two models; each is priced apart
        "success.stdout",
        {},
        "computed",
        PRICE_TABLE,
        table_price("gemini-3.5-flash-lite", "google", 1134, 56, 100)
        + table_price("gemini-3.1-pro-preview", "google", 1134, 56, 100),
    ),
    (
        "gemini",
        "success_model.stdout",
        {"model": "gemini-2.5-flash"},
        "computed",
        PRICE_TABLE,
        table_price("gemini-2.5-flash", "google", 1134, 56, 100),
    ),
    # The table does not know qwen3.7-max: unknown, never zero.
    ("qwen", "success.stdout", {}, "unknown", None, None),
    # Copilot writes no tokens on stdout.
    ("copilot", "success_byok.stdout", {}, "unknown", None, None),
]


@pytest.mark.parametrize(("provider", "capture", "options", "source", "price_source", "usd"), CASES)
def test_every_builtin_prices_its_real_output(provider, capture, options, source, price_source, usd) -> None:
    usage = attempt_usage(provider, capture, options)
    assert (usage.cost_source, usage.price_source) == (source, price_source)
    if usd is None:
        assert usage.cost_usd is None
    else:
        assert usage.cost_usd == pytest.approx(usd, abs=1e-6)
        assert usage.cost_usd > 0


def test_a_cluster_definitions_pricing_overrides_the_table() -> None:
    definition = CATALOG["codex"].model_copy(update={"pricing": {"gpt-5.4": ModelPricing(input=1000)}})
    table = build_table_pricing(definition, "gpt-5.4", NOW)
    book = PriceBook(platform=definition.pricing, table=table, table_name=PRICE_TABLE)
    cost = compute_cost(Report(tokens=Tokens(input=1000)), book, "gpt-5.4")
    assert cost == (pytest.approx(1.0), "computed", "definition")
    cheap = PriceBook(platform={"gpt-5.4": ModelPricing(input=0.001)}, table=table, table_name=PRICE_TABLE)
    assert compute_cost(Report(tokens=Tokens(input=1000)), cheap, "gpt-5.4").usd == pytest.approx(1e-6)


def priced_plan(definition: HarnessDefinitionSpec, namespaced: bool, options: dict[str, Any]) -> Any:
    run = HarnessRun.model_validate(
        {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"provider": "p", "prompt": "hi"}}
    )
    return with_pricing(plan_of(run, definition, 1, "p", options, "hi", None), definition, namespaced, NOW)


def test_a_namespaced_definitions_zero_price_is_charged_at_the_table_price() -> None:
    """The red team's attack on the runner's cost: Opus priced at zero in a namespaced definition."""
    free = {"claude-opus-4-1": ModelPricing()}
    definition = CATALOG["claude"].model_copy(update={"pricing": free})
    plan = priced_plan(definition, True, {"model": "claude-opus-4-1"})
    assert (plan.pricing, plan.platform_pricing) == (free, {})
    cost = compute_cost(Report(model="claude-opus-4-1", tokens=Tokens(input=10**6)), price_book(plan))
    assert cost == (pytest.approx(plan.table_pricing["claude-opus-4-1"].input), "computed", PRICE_TABLE)
    assert cost.usd > 10  # Opus: 15 USD a million input tokens
    # The same prices in a ClusterHarnessDefinition are the platform's: they count.
    trusted = priced_plan(definition, False, {"model": "claude-opus-4-1"})
    assert (trusted.pricing, trusted.platform_pricing) == ({}, free)
    report = Report(model="claude-opus-4-1", tokens=Tokens(input=10**6))
    assert compute_cost(report, price_book(trusted)) == (0, "computed", "definition")


def test_a_routed_definition_without_a_vendor_gets_its_routes_table() -> None:
    # No `vendor`, no model asked for: the model route's vendor still names the table to raise over.
    definition = CATALOG["claude"].model_copy(
        update={"vendor": None, "pricing": {"claude-x": ModelPricing()}}
    )
    plan = priced_plan(definition, True, {})
    assert "claude-opus-4-1" in plan.table_pricing
    cost = compute_cost(Report(model="claude-x", tokens=Tokens(output=10**6)), price_book(plan))
    assert cost.usd == pytest.approx(max(p.output for p in plan.table_pricing.values()))


def test_table_tiers_base_for_totals_the_requests_own_and_the_dearest_for_a_worst_case() -> None:
    vendor = next(p for p in data_snapshot.get_snapshot().providers if p.id == "anthropic")
    tiered = next(m for m in vendor.models if isinstance(m.get_prices(NOW).input_mtok, TieredPrices))
    price = tiered.get_prices(NOW).input_mtok
    assert isinstance(price, TieredPrices)
    start, top = price.tiers[0].start, max(t.price for t in price.tiers)
    base = build_model_pricing(tiered, NOW)
    assert base is not None and base.input == float(price.base)
    assert build_model_pricing(tiered, NOW, prompt_tokens=start).input == float(price.base)  # type: ignore[union-attr]
    above = build_model_pricing(tiered, NOW, prompt_tokens=start + 1)
    assert above is not None and above.input == float(price.tiers[0].price)
    worst = build_model_pricing(tiered, NOW, worst=True)
    assert worst is not None and worst.input == float(top)


@pytest.mark.parametrize("provider_id", ["anthropic", "openai", "google"])
def test_the_gateways_kept_table_is_the_table_built_for_each_request(provider_id: str) -> None:
    """find_vendor_table keeps one table a minute per model and tier: for every prompt size around each
    tier start of the vendor, and the worst case, it is exactly what build_vendor_table gives that
    request."""
    vendor = next(p for p in data_snapshot.get_snapshot().providers if p.id == provider_id)
    model = vendor.models[0].id
    starts = {t.start for m in vendor.models for price in list_model_prices(m) for t in _tiers(price)}
    sizes = [None, 0, 1, *sorted({s + d for s in starts for d in (-1, 0, 1, 2)}), 10_000_000]
    for size in sizes:
        assert dict(find_vendor_table(provider_id, model, NOW, size)) == build_vendor_table(
            vendor, model, NOW, size
        ), size
    assert dict(find_vendor_table(provider_id, model, NOW, 5, worst=True)) == build_vendor_table(
        vendor, model, NOW, None, worst=True
    )
    assert find_vendor_table(provider_id, model, NOW, 1) is find_vendor_table(provider_id, model, NOW, 2)
    assert find_vendor_table("no-such-vendor", model, NOW) == {}


def test_the_tier_floor_is_just_past_the_highest_start_crossed() -> None:
    vendor = next(p for p in data_snapshot.get_snapshot().providers if p.id == "anthropic")
    starts = sorted({t.start for m in vendor.models for price in list_model_prices(m) for t in _tiers(price)})
    assert starts, "the table has a tiered Anthropic price"
    assert compute_tier_floor("anthropic", None) is None
    assert compute_tier_floor("anthropic", starts[0]) == 0  # at the start: still the base tier
    assert compute_tier_floor("anthropic", starts[0] + 1) == starts[0] + 1
    assert compute_tier_floor("anthropic", starts[-1] * 10) == starts[-1] + 1


def _tiers(price: Any) -> list[Tier]:
    return [t for v in vars(price).values() if isinstance(v, TieredPrices) for t in v.tiers]


def test_a_cache_price_the_table_lacks_is_the_input_price() -> None:
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            price = model.get_prices(NOW)
            if (
                price.input_mtok is not None
                and price.cache_read_mtok is None
                and not isinstance(price.input_mtok, TieredPrices)
            ):
                built = build_model_pricing(model, NOW)
                assert built is not None and built.cache_read == built.input == float(price.input_mtok)
                return
    pytest.fail("the table has no model without a cache price")


def test_reported_cost_wins_over_computed() -> None:
    table = build_table_pricing(CATALOG["claude"], "claude-sonnet-4-5", NOW)
    report = Report(model="claude-sonnet-4-5", tokens=Tokens(input=10**6), cost_usd=0.25)
    assert compute_cost(report, PriceBook(table=table, table_name=PRICE_TABLE)) == (0.25, "reported", None)


def test_the_reported_model_is_priced_before_the_requested_one() -> None:
    table = build_table_pricing(CATALOG["gemini"], "gemini-2.5-flash", NOW)
    book = PriceBook(table=table, table_name=PRICE_TABLE)
    tokens = Tokens(input=10**6)
    used = compute_cost(Report(model="gemini-2.5-pro", tokens=tokens), book, "gemini-2.5-flash")
    requested = compute_cost(Report(tokens=tokens), book, "gemini-2.5-flash")
    assert used.usd == pytest.approx(table["gemini-2.5-pro"].input)
    assert requested.usd == pytest.approx(table["gemini-2.5-flash"].input)
    assert used.usd != requested.usd


@pytest.mark.parametrize("model", ["gpt-6.2-sol", "no-such-model", "qwen3.7-max", None])
def test_unknown_models_never_cost_zero(model) -> None:
    definition = HarnessDefinitionSpec(binary="x", vendor="openai")
    book = PriceBook(table=build_table_pricing(definition, model, NOW), table_name=PRICE_TABLE)
    cost = compute_cost(Report(model=model, tokens=Tokens(input=500, output=50)), book)
    assert cost == (None, "unknown", None)


def test_vendor_comes_from_the_definition_else_the_model_name() -> None:
    bare = HarnessDefinitionSpec(binary="x")
    assert "claude-sonnet-4-5" in build_table_pricing(bare, "anthropic/claude-sonnet-4-5", NOW)
    assert "gpt-4o" in build_table_pricing(bare, "gpt-4o", NOW)  # the table's own match finds openai
    assert build_table_pricing(bare, None, NOW) == {}
    assert "gemini-2.5-flash" in build_table_pricing(CATALOG["gemini"], None, NOW)


def test_the_table_is_the_pinned_offline_snapshot() -> None:
    pin = re.search(r'"genai-prices==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None
    assert PRICE_TABLE == f"genai-prices {pin.group(1)}" == f"genai-prices {genai_prices.__version__}"
    assert (
        "genai-prices==" + pin.group(1) in (ROOT / "sandbox-image" / "operator-requirements.txt").read_text()
    )
    assert data_snapshot.get_snapshot().from_auto_update is False


def test_figures_change_only_with_the_table_data() -> None:
    """Another table version (here the pinned data with OpenAI's prices doubled, installed through
    genai-prices' own snapshot hook) changes the computed figure; the code path is the same."""
    before = attempt_usage("codex", "success.stdout", {"model": "gpt-5.4"}).cost_usd
    pinned = data_snapshot.get_snapshot()

    def twice(value: Decimal | TieredPrices) -> Decimal | TieredPrices:
        if isinstance(value, Decimal):
            return value * 2
        return TieredPrices(value.base * 2, [Tier(t.start, t.price * 2) for t in value.tiers])

    def doubled(provider: Any) -> Any:
        models = []
        for model in provider.models:
            price = model.get_prices(NOW)
            fields = {k: twice(v) for k, v in vars(price).items() if isinstance(v, Decimal | TieredPrices)}
            models.append(dataclasses.replace(model, prices=type(price)(**fields), price_variants=None))
        return dataclasses.replace(provider, models=models)

    providers = [doubled(p) if p.id == "openai" else p for p in pinned.providers]
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=providers, from_auto_update=False))
    try:
        after = attempt_usage("codex", "success.stdout", {"model": "gpt-5.4"}).cost_usd
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert after == pytest.approx(2 * before, abs=2e-6)
    assert attempt_usage("codex", "success.stdout", {"model": "gpt-5.4"}).cost_usd == before


def test_the_sandbox_runner_never_loads_the_table() -> None:
    """The runner runs on the image's python3 with pydantic only: prices reach it in the plan."""
    code = "import sys, harness_operator.runner.__main__; sys.exit('genai_prices' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
