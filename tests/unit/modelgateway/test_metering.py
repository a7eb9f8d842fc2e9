"""The model gateway's pure parts: routes and endpoints per vendor, tokens and keys, clamps and errors in
the vendor's shape, usage from answers and streams (split anywhere), prices and worst cases."""

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_operator.api.v1alpha1 import ModelPricing
from harness_operator.modelgateway.metering import (
    RequestUsage,
    StreamMeter,
    cost_of,
    estimate_input_tokens,
    find_prices,
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
    assert usage_of(ANTHROPIC, Flavor.anthropic, meter.document) == RequestUsage(
        "claude-sonnet-4-5", input_tokens=1234, output_tokens=56, cache_read_tokens=100, cache_write_tokens=10
    )


@given(st.lists(st.integers(min_value=0, max_value=2 * len(ANTHROPIC_STREAM)), max_size=12), st.booleans())
def test_a_stream_split_anywhere_meters_the_same(cuts: list[int], crlf: bool) -> None:
    stream = ANTHROPIC_STREAM.replace(b"\n", b"\r\n") if crlf else ANTHROPIC_STREAM
    meter = StreamMeter(Flavor.anthropic)
    edges = sorted({0, *(c for c in cuts if c < len(stream)), len(stream)})
    for start, end in itertools.pairwise(edges):
        meter.feed(stream[start:end])
    usage = usage_of(ANTHROPIC, Flavor.anthropic, meter.document)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (1234, 56)


def test_openai_and_gemini_streams_report_their_final_usage() -> None:
    responses = StreamMeter(Flavor.openai_responses)
    responses.feed(sse({"type": "response.created", "response": {"usage": None}},
                       {"type": "response.completed", "response": {"model": "gpt-4.1", "usage": {
                           "input_tokens": 1234, "output_tokens": 56,
                           "input_tokens_details": {"cached_tokens": 100}}}}))  # fmt: skip
    assert usage_of(OPENAI, Flavor.openai_responses, responses.document) == RequestUsage(
        "gpt-4.1", input_tokens=1134, output_tokens=56, cache_read_tokens=100
    )
    chat = StreamMeter(Flavor.openai_chat)
    chat.feed(b'data: {"model":"gpt-4.1","choices":[{"delta":{"content":"Hi"}}]}\n\n'
              b'data: {"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2}}\n\n'
              b"data: [DONE]\n\n")  # fmt: skip
    assert usage_of(OPENAI, Flavor.openai_chat, chat.document) == RequestUsage("gpt-4.1", 10, 2)
    gemini = StreamMeter(Flavor.gemini)
    chunk = {
        "modelVersion": "gemini-2.5-flash",
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1},
    }
    final = {**chunk, "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4},
             "candidates": [{"finishReason": "STOP"}]}  # fmt: skip
    gemini.feed(f"data: {json.dumps(chunk)}\r\n\r\ndata: {json.dumps(final)}\r\n\r\n".encode())
    assert gemini.completed and usage_of(GEMINI, Flavor.gemini, gemini.document) == RequestUsage(
        "gemini-2.5-flash", 9, 4
    )
    assert fold_json_stream(GEMINI, Flavor.gemini, json.dumps([chunk, final]).encode()) == RequestUsage(
        "gemini-2.5-flash", 9, 4
    )


def test_no_usage_is_none_and_an_unpriced_model_still_has_its_usage() -> None:
    assert usage_of(ANTHROPIC, Flavor.anthropic, {"type": "error"}) is None
    assert usage_of(ANTHROPIC, Flavor.anthropic, "text") is None
    unknown = usage_of(OPENAI, Flavor.openai_responses, {"model": "gpt-nobody", "usage": {
        "input_tokens": 5, "output_tokens": 1}})  # fmt: skip
    assert unknown == RequestUsage("gpt-nobody", 5, 1)
    assert cost_of(OPENAI, unknown, {}, NOW) is None and find_prices(OPENAI, "gpt-nobody", {}, NOW) is None


def test_prices_from_the_definition_win_over_the_table_and_worst_cases_bound_them() -> None:
    own = {"claude-sonnet-4-5": ModelPricing(input=1, output=2, cache_read=0.1, cache_write=1.25)}
    usage = RequestUsage("claude-sonnet-4-5", 1_000_000, 1_000_000, 1_000_000, 1_000_000)
    assert cost_of(ANTHROPIC, usage, own, NOW) == pytest.approx(4.35)
    table = cost_of(ANTHROPIC, RequestUsage("claude-sonnet-4-5", 1234, 56, 100, 10), {}, NOW)
    assert table == pytest.approx(0.0046095)  # what genai-prices prices the stub's answer at
    prices = find_prices(ANTHROPIC, "claude-sonnet-4-5", {}, NOW)
    assert prices is not None
    assert prices.worst_input(1000) >= 1000 * prices.input and prices.output > prices.input
    assert estimate_input_tokens(b"x" * 3000) == 1000
