"""The model gateway's pure parts: routes and endpoints per vendor, tokens and keys, clamps and errors in
the vendor's shape, usage from answers and streams (split anywhere), prices and worst cases."""

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import genai_prices
import pytest
from genai_prices.types import TieredPrices
from hypothesis import given
from hypothesis import strategies as st

from harness_operator.api.v1alpha1 import ModelPricing
from harness_operator.contract.model_access import ModelAttemptGrant
from harness_operator.contract.usage import Tokens
from harness_operator.modelgateway.metering import (
    RequestUsage,
    StreamMeter,
    cost_of,
    estimate_input_tokens,
    find_prices,
    finish_reasons_of,
    fold_json_stream,
    usage_of,
)
from harness_operator.modelgateway.vendors import VENDORS, Flavor, split_route

ANTHROPIC, OPENAI, GEMINI = VENDORS["anthropic"], VENDORS["openai"], VENDORS["gemini"]
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e.get('type', 'x')}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


ANTHROPIC_STREAM = sse(
    {
        "type": "message_start",
        "message": {
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 1234, "output_tokens": 1, "cache_read_input_tokens": 100,
                      "cache_creation_input_tokens": 10},
        },
    },
    {"type": "content_block_delta", "delta": {"text": "Hi"}},
    {"type": "message_delta", "usage": {"output_tokens": 30}},
    {"type": "message_delta", "usage": {"output_tokens": 56}},  # cumulative: the last one counts
    {"type": "message_stop"},
)  # fmt: skip


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/anthropic/v1/messages", ("anthropic", "/v1/messages")),
        ("/openai/v1/responses", ("openai", "/v1/responses")),
        ("/gemini/v1beta/models/gemini-2.5-flash:generateContent", ("gemini", "/v1beta/models/gemini-2.5-flash:generateContent")),
        ("/azure/v1/x", None),
        ("/anthropic", None),
    ],
)  # fmt: skip
def test_routes(path: str, route: tuple[str, str] | None) -> None:
    found = split_route(path)
    assert (None if found is None else (found[0].name, found[1])) == route


@pytest.mark.parametrize(
    ("vendor", "method", "path", "body", "flavor", "streaming"),
    [
        ("anthropic", "POST", "/v1/messages", {"stream": True}, Flavor.anthropic, True),
        ("anthropic", "POST", "/v1/messages/count_tokens", {}, None, False),
        ("anthropic", "GET", "/v1/models", None, None, False),
        ("openai", "POST", "/v1/responses", {}, Flavor.openai_responses, False),
        ("openai", "POST", "/v1/chat/completions", {"stream": True}, Flavor.openai_chat, True),
        ("gemini", "POST", "/v1beta/models/g:streamGenerateContent", {}, Flavor.gemini, True),
        ("gemini", "POST", "/v1beta/models/g:countTokens", {}, None, False),
    ],
)
def test_forwarded_endpoints(
    vendor: str, method: str, path: str, body: Any, flavor: Flavor | None, streaming: bool
) -> None:
    endpoint = VENDORS[vendor].endpoint(method, path, body)
    assert endpoint is not None and (endpoint.flavor, endpoint.streaming) == (flavor, streaming)


@pytest.mark.parametrize(
    ("vendor", "method", "path"),
    [
        # Endpoints that could spend without being metered are refused.
        ("anthropic", "POST", "/v1/messages/batches"),
        ("anthropic", "POST", "/v1/complete"),
        ("openai", "POST", "/v1/embeddings"),
        ("openai", "POST", "/v1/audio/speech"),
        ("openai", "POST", "/v1/models"),
        ("gemini", "POST", "/v1beta/models/g:batchGenerateContent"),
        ("gemini", "POST", "/v1beta/files"),
    ],
)
def test_unmetered_spending_endpoints_are_not_forwarded(vendor: str, method: str, path: str) -> None:
    assert VENDORS[vendor].endpoint(method, path, {}) is None


def test_token_is_read_where_each_vendors_clients_put_their_key_and_the_key_replaces_it() -> None:
    assert ANTHROPIC.caller_token({"x-api-key": "hmg-t"}, {}) == "hmg-t"
    assert OPENAI.caller_token({"authorization": "Bearer hmg-t"}, {}) == "hmg-t"
    assert GEMINI.caller_token({"x-goog-api-key": "hmg-t"}, {}) == "hmg-t"
    assert GEMINI.caller_token({}, {"key": "hmg-t"}) == "hmg-t"
    assert ANTHROPIC.caller_token({}, {}) is None
    sent = {"x-api-key": "hmg-t", "authorization": "Bearer hmg-t", "anthropic-version": "2023-06-01",
            "connection": "keep-alive", "content-length": "10"}  # fmt: skip
    assert ANTHROPIC.upstream_headers(sent, "REAL") == {
        "anthropic-version": "2023-06-01",
        "x-api-key": "REAL",
    }
    assert OPENAI.upstream_headers(sent, "REAL")["authorization"] == "Bearer REAL"
    assert "hmg-t" not in json.dumps(GEMINI.upstream_headers(sent, "REAL"))


@pytest.mark.parametrize(
    ("vendor", "flavor", "body", "requested", "clamped"),
    [
        ("anthropic", Flavor.anthropic, {"max_tokens": 4096}, 4096, {"max_tokens": 100}),
        ("openai", Flavor.openai_responses, {}, None, {"max_output_tokens": 100}),
        ("openai", Flavor.openai_chat, {"max_tokens": 50}, 50, {"max_tokens": 100}),
        ("openai", Flavor.openai_chat, {}, None, {"max_completion_tokens": 100}),
        ("gemini", Flavor.gemini, {"generationConfig": {"temperature": 0}}, None,
         {"generationConfig": {"temperature": 0, "maxOutputTokens": 100}}),
    ],
)  # fmt: skip
def test_output_caps_are_read_and_clamped_in_the_callers_own_field(
    vendor: str, flavor: Flavor, body: dict[str, Any], requested: int | None, clamped: dict[str, Any]
) -> None:
    assert VENDORS[vendor].requested_output(flavor, body) == requested
    assert VENDORS[vendor].clamp(flavor, body, 100) == clamped


def test_errors_are_in_each_vendors_shape() -> None:
    status, body = ANTHROPIC.error(400, "cap reached", "cap")
    assert status == 400 and json.loads(body) == {
        "type": "error", "error": {"type": "invalid_request_error", "message": "cap reached"}
    }  # fmt: skip
    assert json.loads(OPENAI.error(429, "m", "cap")[1])["error"]["code"] == "insufficient_quota"
    assert json.loads(GEMINI.error(401, "m", "unauthorized")[1])["error"]["status"] == "UNAUTHENTICATED"


def test_anthropic_stream_counts_start_and_the_last_cumulative_delta_once() -> None:
    meter = StreamMeter(Flavor.anthropic)
    meter.feed(ANTHROPIC_STREAM)
    assert meter.completed
    assert usage_of(ANTHROPIC, Flavor.anthropic, meter.document) == used(
        "claude-sonnet-4-5", input=1234, output=56, cache_read=100, cache_write=10
    )


@given(st.lists(st.integers(min_value=0, max_value=2 * len(ANTHROPIC_STREAM)), max_size=12), st.booleans())
def test_a_stream_split_anywhere_meters_the_same(cuts: list[int], crlf: bool) -> None:
    stream = ANTHROPIC_STREAM.replace(b"\n", b"\r\n") if crlf else ANTHROPIC_STREAM
    meter = StreamMeter(Flavor.anthropic)
    edges = sorted({0, *(c for c in cuts if c < len(stream)), len(stream)})
    for start, end in itertools.pairwise(edges):
        meter.feed(stream[start:end])
    usage = usage_of(ANTHROPIC, Flavor.anthropic, meter.document)
    assert usage is not None and (usage.tokens.input, usage.tokens.output) == (1234, 56)


def test_openai_and_gemini_streams_report_their_final_usage() -> None:
    responses = StreamMeter(Flavor.openai_responses)
    responses.feed(sse({"type": "response.created", "response": {"usage": None}},
                       {"type": "response.completed", "response": {"model": "gpt-4.1", "usage": {
                           "input_tokens": 1234, "output_tokens": 56,
                           "input_tokens_details": {"cached_tokens": 100}}}}))  # fmt: skip
    assert usage_of(OPENAI, Flavor.openai_responses, responses.document) == used(
        "gpt-4.1", input=1134, output=56, cache_read=100
    )
    chat = StreamMeter(Flavor.openai_chat)
    chat.feed(b'data: {"model":"gpt-4.1","choices":[{"delta":{"content":"Hi"}}]}\n\n'
              b'data: {"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2}}\n\n'
              b"data: [DONE]\n\n")  # fmt: skip
    assert usage_of(OPENAI, Flavor.openai_chat, chat.document) == used("gpt-4.1", 10, 2)
    gemini = StreamMeter(Flavor.gemini)
    chunk = {
        "modelVersion": "gemini-2.5-flash",
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1},
    }
    final = {**chunk, "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4},
             "candidates": [{"finishReason": "STOP"}]}  # fmt: skip
    gemini.feed(f"data: {json.dumps(chunk)}\r\n\r\ndata: {json.dumps(final)}\r\n\r\n".encode())
    assert gemini.completed and usage_of(GEMINI, Flavor.gemini, gemini.document) == used(
        "gemini-2.5-flash", 9, 4
    )
    assert fold_json_stream(GEMINI, Flavor.gemini, json.dumps([chunk, final]).encode()) == used(
        "gemini-2.5-flash", 9, 4
    )


def test_finish_reasons_of_streams_and_answers() -> None:
    anthropic = StreamMeter(Flavor.anthropic)
    last = b'"usage": {"output_tokens": 56}'
    anthropic.feed(ANTHROPIC_STREAM.replace(last, b'"delta": {"stop_reason": "max_tokens"}, ' + last))
    assert finish_reasons_of(Flavor.anthropic, anthropic.document) == ("max_tokens",)
    chat = StreamMeter(Flavor.openai_chat)
    chat.feed(b'data: {"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
              b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n'
              b'data: {"model":"gpt-4.1","choices":[],'
              b'"usage":{"prompt_tokens":10,"completion_tokens":2}}\n\n')  # fmt: skip
    assert finish_reasons_of(Flavor.openai_chat, chat.document) == ("length",)
    assert usage_of(OPENAI, Flavor.openai_chat, chat.document) == used("gpt-4.1", 10, 2)
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    assert finish_reasons_of(Flavor.openai_responses, cut) == ("max_output_tokens",)
    assert finish_reasons_of(Flavor.openai_responses, {"status": "completed"}) == ("completed",)
    array = [{"candidates": [{}]}, {"candidates": [{"finishReason": "STOP"}, {"finishReason": "SAFETY"}]}]
    assert finish_reasons_of(Flavor.gemini, array) == ("STOP", "SAFETY")
    assert finish_reasons_of(Flavor.anthropic, {"type": "error"}) == ()
    assert finish_reasons_of(Flavor.gemini, None) == finish_reasons_of(Flavor.gemini, []) == ()


def test_no_usage_is_none_and_an_unpriced_model_still_has_its_usage() -> None:
    assert usage_of(ANTHROPIC, Flavor.anthropic, {"type": "error"}) is None
    assert usage_of(ANTHROPIC, Flavor.anthropic, "text") is None
    unknown = usage_of(OPENAI, Flavor.openai_responses, {"model": "gpt-nobody", "usage": {
        "input_tokens": 5, "output_tokens": 1}})  # fmt: skip
    assert unknown == used("gpt-nobody", 5, 1)
    assert (
        cost_of(OPENAI, unknown, NONE, NOW) is None and find_prices(OPENAI, "gpt-nobody", NONE, NOW) is None
    )


def used(
    model: str, input: int = 0, output: int = 0, cache_read: int = 0, cache_write: int = 0
) -> RequestUsage:
    """A request's usage, every count known."""
    return RequestUsage(model, Tokens(input, output, cache_read, cache_write))


def grant(
    pricing: dict[str, ModelPricing] | None = None, platform: dict[str, ModelPricing] | None = None
) -> ModelAttemptGrant:
    """An attempt's grant with a namespaced definition's prices (`pricing`) or a cluster one's."""
    return ModelAttemptGrant(
        token_sha256="0" * 64, vendor="anthropic", pricing=pricing or {}, platform_pricing=platform
    )


NONE = grant()
SONNET_OWN = {"claude-sonnet-4-5": ModelPricing(input=1, output=2, cache_read=0.1, cache_write=1.25)}
MILLIONS = used("claude-sonnet-4-5", 1_000_000, 1_000_000, 1_000_000, 1_000_000)


def test_a_cluster_definitions_prices_win_over_the_table_and_worst_cases_bound_them() -> None:
    assert cost_of(ANTHROPIC, MILLIONS, grant(platform=SONNET_OWN), NOW) == pytest.approx(4.35)
    table = cost_of(ANTHROPIC, used("claude-sonnet-4-5", 1234, 56, 100, 10), NONE, NOW)
    assert table == pytest.approx(0.0046095)  # what genai-prices prices the stub's answer at
    prices = find_prices(ANTHROPIC, "claude-sonnet-4-5", NONE, NOW)
    assert prices is not None
    assert prices.worst_input(1000) >= 1000 * prices.input and prices.output > prices.input
    assert estimate_input_tokens(b"x" * 3000) == 1000


def table_cost(usage: RequestUsage, provider: str = "anthropic") -> float:
    """genai-prices' own calculator (its input tokens include the cached ones)."""
    tokens = usage.tokens
    counted = genai_prices.Usage(
        input_tokens=(tokens.input or 0) + (tokens.cache_read or 0) + (tokens.cache_write or 0),
        output_tokens=tokens.output,
        cache_read_tokens=tokens.cache_read,
        cache_write_tokens=tokens.cache_write,
    )
    assert usage.model is not None
    calc = genai_prices.calc_price(counted, usage.model, provider_id=provider, genai_request_timestamp=NOW)
    return float(calc.total_price)


def test_a_namespaced_definitions_zero_price_meters_at_the_table_price() -> None:
    """The red team's attack: a namespaced HarnessDefinition prices Opus at zero; 60 answers cost 0."""
    free = grant({"claude-opus-4-1": ModelPricing(), "claude": ModelPricing()})
    answer = used("claude-opus-4-1-20250805", 2000, 500, 300, 40)
    assert cost_of(ANTHROPIC, answer, free, NOW) == pytest.approx(table_cost(answer))
    assert cost_of(ANTHROPIC, answer, free, NOW) > 0.05
    worst = find_prices(ANTHROPIC, "claude-opus-4-1", free, NOW)
    assert worst is not None and worst == find_prices(ANTHROPIC, "claude-opus-4-1", NONE, NOW)
    assert worst.output >= 75 / 1e6


def test_a_namespaced_definitions_price_only_raises_the_meter() -> None:
    dear = {"claude-sonnet-4-5": ModelPricing(input=100, output=0)}
    cost = cost_of(ANTHROPIC, used("claude-sonnet-4-5", 100_000, 100_000), grant(dear), NOW)
    # input at its 100, output at the table's: neither lower than the platform's
    assert cost == pytest.approx(10 + table_cost(used("claude-sonnet-4-5", 0, 100_000)))
    # a namespaced price below the table's does not lower it
    assert cost_of(ANTHROPIC, MILLIONS, grant(SONNET_OWN), NOW) == pytest.approx(table_cost(MILLIONS))


def test_a_model_only_a_namespaced_definition_prices_meters_at_least_the_vendors_dearest() -> None:
    secret = grant({"claude-secret-9": ModelPricing()})
    usage = used("claude-secret-9", 1_000_000, 0)
    cost = cost_of(ANTHROPIC, usage, secret, NOW)
    assert cost is not None and cost >= 15  # Opus's input price at least
    assert cost_of(ANTHROPIC, usage, NONE, NOW) is None  # and without it, unpriced as before
    assert find_prices(ANTHROPIC, "claude-secret-9", secret, NOW) is not None


def test_a_request_is_metered_at_its_own_tier() -> None:
    vendor = next(p for p in genai_prices.data_snapshot.get_snapshot().providers if p.id == "anthropic")
    tiered = next(m for m in vendor.models if isinstance(m.get_prices(NOW).input_mtok, TieredPrices))
    price = tiered.get_prices(NOW).input_mtok
    assert isinstance(price, TieredPrices)
    small = used(tiered.id, 1000, 100)
    large = used(tiered.id, price.tiers[0].start + 1000, 100)
    for usage in (small, large):
        assert cost_of(ANTHROPIC, usage, NONE, NOW) == pytest.approx(table_cost(usage))
    worst = find_prices(ANTHROPIC, tiered.id, NONE, NOW)
    assert worst is not None and worst.input == pytest.approx(float(max(t.price for t in price.tiers)) / 1e6)
