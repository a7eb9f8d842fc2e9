"""The run's trace ids, sampling and traceparent (contract/tracing.py)."""

from __future__ import annotations

import pytest

from harness_operator.contract.tracing import (
    build_traceparent,
    compute_attempt_span_id,
    compute_span_id,
    compute_trace_id,
    is_sampled,
    parse_traceparent,
)


def test_ids_are_hex_of_w3c_length_and_stable_per_uid():
    trace_id = compute_trace_id("uid-1")
    assert len(trace_id) == 32 and int(trace_id, 16) > 0
    assert trace_id == compute_trace_id("uid-1") != compute_trace_id("uid-2")
    span = compute_span_id("uid-1")
    assert len(span) == 16 and int(span, 16) > 0
    assert span == compute_span_id("uid-1") != compute_span_id("uid-2")


def test_span_ids_differ_by_path_and_the_attempt_span_is_named_by_its_index():
    ids = {
        compute_span_id("u"),
        compute_span_id("u", "wait"),
        compute_attempt_span_id("u", 1),
        compute_attempt_span_id("u", 2),
        compute_span_id("u", "attempt", 1, "agent"),
    }
    assert len(ids) == 5
    assert compute_attempt_span_id("u", 2) == compute_span_id("u", "attempt", 2)


def test_sampling_is_the_trace_ids_low_half_against_the_ratio():
    ids = [compute_trace_id(f"uid-{n}") for n in range(2000)]
    assert all(is_sampled(t, 1.0) for t in ids)
    assert not any(is_sampled(t, 0.0) for t in ids)
    kept = sum(is_sampled(t, 0.25) for t in ids)
    assert 400 < kept < 600  # a quarter, give or take
    # Monotonic: a trace kept at a ratio is kept at every larger one.
    assert all(is_sampled(t, 0.5) for t in ids if is_sampled(t, 0.25))
    assert is_sampled("0" * 16 + "0" * 15 + "1", 0.01)
    assert not is_sampled("0" * 16 + "f" * 16, 0.99)


def test_traceparent_round_trip():
    trace_id, span_id = compute_trace_id("u"), compute_attempt_span_id("u", 1)
    value = build_traceparent(trace_id, span_id)
    assert value == f"00-{trace_id}-{span_id}-01"
    parsed = parse_traceparent(value)
    assert parsed is not None and (parsed.trace_id, parsed.span_id, parsed.sampled) == (
        trace_id,
        span_id,
        True,
    )
    unsampled = parse_traceparent(build_traceparent(trace_id, span_id, sampled=False))
    assert unsampled is not None and not unsampled.sampled


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "01-" + "a" * 32 + "-" + "b" * 16 + "-01",  # another version
        "00-" + "0" * 32 + "-" + "b" * 16 + "-01",  # invalid trace id
        "00-" + "a" * 32 + "-" + "0" * 16 + "-01",  # invalid span id
        "00-" + "A" * 32 + "-" + "b" * 16 + "-01",  # upper case
        "00-" + "a" * 31 + "-" + "b" * 16 + "-01",
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01-extra",
    ],
)
def test_not_a_traceparent(value):
    assert parse_traceparent(value) is None
