"""The trace backend itself: spans the OpenTelemetry SDK exports over OTLP/HTTP to the real Jaeger
(tests/cluster/jaeger) come back through tests/lib/jaeger.py with their ids, parentage, times, typed
attributes, status and service; a trace never exported reads as absent."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.lib.jaeger import Jaeger, Span, wait_for_trace

SERVICE = "harness-traces-test"


class GivenIds(IdGenerator):
    """Hands out the trace id and the span ids it was given, in order."""

    def __init__(self, trace_id: int, span_ids: list[int]) -> None:
        self._trace_id = trace_id
        self._span_ids: Iterator[int] = iter(span_ids)

    def generate_trace_id(self) -> int:
        return self._trace_id

    def generate_span_id(self) -> int:
        return next(self._span_ids)


def test_exported_spans_come_back_as_sent(jaeger: Jaeger) -> None:
    # Fresh random ids: Jaeger keeps running between sessions and merges the spans of one trace id.
    trace_id, parent_id, child_id = secrets.randbits(128), secrets.randbits(64), secrets.randbits(64)
    provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE}),
        id_generator=GivenIds(trace_id, [parent_id, child_id]),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{jaeger.otlp_url}/v1/traces")))
    tracer = provider.get_tracer("tests.traces")
    t0 = time.time_ns() // 10**9 * 10**9 + 123_456_789  # nanoseconds survive the round trip
    usage: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.usage.input_tokens": 1234,
        "gen_ai.usage.output_tokens": 56,
        "harness.cost.nano_usd": 2**53 + 1,  # past a float's exact integers: OTLP's JSON sends it as a string
        "gen_ai.request.temperature": 0.25,
        "harness.cached": True,
        "gen_ai.response.finish_reasons": ("stop", "length"),
    }
    try:
        parent = tracer.start_span("harness.attempt", start_time=t0, attributes={"harness.attempt": 2})
        parent.set_status(Status(StatusCode.OK))
        child = tracer.start_span(
            "chat claude-sonnet-4-5",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            start_time=t0 + 1_000,
            attributes=usage,
        )
        child.set_status(Status(StatusCode.ERROR, "rate limited"))
        child.end(end_time=t0 + 2_500_000_001)
        parent.end(end_time=t0 + 3_000_000_000)
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()

    spans = wait_for_trace(jaeger.query_url, f"{trace_id:032x}", min_spans=2, timeout=30)

    common = {"trace_id": f"{trace_id:032x}", "service": SERVICE}
    assert spans == [
        Span(
            name="harness.attempt",
            span_id=f"{parent_id:016x}",
            parent_span_id=None,
            start_ns=t0,
            end_ns=t0 + 3_000_000_000,
            kind="INTERNAL",
            status_code="OK",
            status_message="",
            attributes={"harness.attempt": 2},
            **common,
        ),
        Span(
            name="chat claude-sonnet-4-5",
            span_id=f"{child_id:016x}",
            parent_span_id=f"{parent_id:016x}",
            start_ns=t0 + 1_000,
            end_ns=t0 + 2_500_000_001,
            kind="CLIENT",
            status_code="ERROR",
            status_message="rate limited",
            attributes={**usage, "gen_ai.response.finish_reasons": ["stop", "length"]},
            **common,
        ),
    ]


def test_a_trace_never_exported_is_absent(jaeger: Jaeger) -> None:
    started = time.monotonic()
    assert wait_for_trace(jaeger.query_url, f"{secrets.randbits(128):032x}", min_spans=1, timeout=2) == []
    assert time.monotonic() - started < 10
