"""Span records exported through the OpenTelemetry SDK with the run's ids (telemetry.py); the SDK's
in-memory exporter stands in for the collector here (tests/traces sends them to a real Jaeger)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from harness_operator.contract.tracing import (
    CLIENT,
    SpanRecord,
    compute_attempt_span_id,
    compute_span_id,
    compute_trace_id,
)
from harness_operator.telemetry import Traces, build_traces_url, parse_sampling, traces_from_env


def _traces(ratio: float = 1.0) -> tuple[Traces, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    return Traces("harness-operator", ratio, SimpleSpanProcessor(memory)), memory


def test_records_keep_their_ids_parents_times_attributes_and_errors():
    traces, memory = _traces()
    trace_id = compute_trace_id("uid")
    root, attempt = compute_span_id("uid"), compute_attempt_span_id("uid", 1)
    traces.export(
        trace_id,
        [
            SpanRecord(
                "attempt 1", attempt, root, 2_000, 5_000, {"harness.provider": "claude"}, "ProviderFailed"
            ),
            SpanRecord("chat m", compute_span_id("uid", "x"), attempt, 3_000, 4_000, {"n": 3}, kind=CLIENT),
            SpanRecord("run ns/r", root, None, 1_000, 6_000, {"harness.run": "r"}),
        ],
    )
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert set(spans) == {"attempt 1", "chat m", "run ns/r"}
    for span in spans.values():
        assert f"{span.context.trace_id:032x}" == trace_id
    assert f"{spans['run ns/r'].context.span_id:016x}" == root and spans["run ns/r"].parent is None
    assert f"{spans['attempt 1'].parent.span_id:016x}" == root
    assert f"{spans['chat m'].parent.span_id:016x}" == attempt
    assert (spans["attempt 1"].start_time, spans["attempt 1"].end_time) == (2_000, 5_000)
    assert spans["attempt 1"].status.status_code == StatusCode.ERROR
    assert spans["attempt 1"].status.description == "ProviderFailed"
    assert spans["run ns/r"].status.status_code == StatusCode.UNSET
    assert spans["chat m"].kind == SpanKind.CLIENT and spans["chat m"].attributes["n"] == 3
    assert spans["run ns/r"].resource.attributes["service.name"] == "harness-operator"


def test_an_unsampled_trace_exports_nothing():
    traces, memory = _traces(ratio=0.0)
    traces.export(compute_trace_id("uid"), [SpanRecord("run", compute_span_id("uid"), None, 1, 2)])
    assert memory.get_finished_spans() == ()


def test_an_end_before_the_start_is_the_start():
    traces, memory = _traces()
    traces.export(compute_trace_id("u"), [SpanRecord("s", compute_span_id("u"), None, 10, 5)])
    (span,) = memory.get_finished_spans()
    assert span.end_time == 10


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://c.example:443/otlp/v1/traces", "https://c.example:443/otlp/v1/traces"),
    ],
)
def test_traces_url(endpoint, url):
    assert build_traces_url(endpoint) == url


@pytest.mark.parametrize("endpoint", ["collector:4318", "grpc://c:4317", "http://"])
def test_a_bad_endpoint_is_named(endpoint):
    with pytest.raises(ValueError, match=r"HARNESS_TRACING_ENDPOINT.*e\.g\. http://otel-collector:4318"):
        build_traces_url(endpoint)


def test_sampling_setting():
    assert parse_sampling(None) == 1.0 and parse_sampling(" ") == 1.0 and parse_sampling("0.25") == 0.25
    for bad in ("1.5", "-0.1", "half"):
        with pytest.raises(ValueError, match=r"HARNESS_TRACING_SAMPLING.*from 0 to 1"):
            parse_sampling(bad)


def test_from_env_off_without_an_endpoint(monkeypatch):
    monkeypatch.delenv("HARNESS_TRACING_ENDPOINT", raising=False)
    assert traces_from_env("harness-operator") is None
    monkeypatch.setenv("HARNESS_TRACING_ENDPOINT", "http://127.0.0.1:9/")
    monkeypatch.setenv("HARNESS_TRACING_SAMPLING", "0.5")
    traces = traces_from_env("harness-operator")
    assert traces is not None and traces.ratio == 0.5
    traces.shutdown()
