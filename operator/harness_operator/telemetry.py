"""Exporting span records with the OpenTelemetry SDK over OTLP/HTTP (I/O): the operator's and the model
gateway's one exporter. The records' ids are the run's (contract/tracing.py), handed to the SDK through
its IdGenerator, so spans written by different replicas, or at different times, join one trace.

Configured by HARNESS_TRACING_ENDPOINT (the collector's OTLP/HTTP base URL; unset: no tracing) and
HARNESS_TRACING_SAMPLING (the share of runs traced, 0 to 1; default 1)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness_operator import __version__
from harness_operator.contract.tracing import SpanRecord, is_sampled

ENDPOINT_ENV = "HARNESS_TRACING_ENDPOINT"
SAMPLING_ENV = "HARNESS_TRACING_SAMPLING"
TRACES_PATH = "/v1/traces"


class _GivenIds(IdGenerator):
    """Hands the SDK the ids the caller set for the span it starts next (per thread)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def generate_span_id(self) -> int:
        return int(self.local.span_id, 16)

    def generate_trace_id(self) -> int:
        return int(self.local.trace_id, 16)


class Traces:
    """Exports finished span records as one service (`service`), in batches, off the caller's thread."""

    def __init__(self, service: str, ratio: float, processor: SpanProcessor) -> None:
        self.ratio = ratio
        self._ids = _GivenIds()
        self.provider = TracerProvider(
            sampler=ALWAYS_ON,  # the run's sampling is decided once, by its trace id (is_sampled)
            resource=Resource.create({"service.name": service, "service.version": __version__}),
            id_generator=self._ids,
            shutdown_on_exit=False,
        )
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("harness_operator", __version__)

    def is_sampled(self, trace_id: str) -> bool:
        return is_sampled(trace_id, self.ratio)

    def export(self, trace_id: str, records: Sequence[SpanRecord]) -> None:
        """Hand the records of trace `trace_id` to the SDK (an unsampled trace: nothing)."""
        if not self.is_sampled(trace_id):
            return
        for record in records:
            self._ids.local.trace_id, self._ids.local.span_id = trace_id, record.span_id
            parent = None
            if record.parent_id is not None:
                context = SpanContext(
                    int(trace_id, 16),
                    int(record.parent_id, 16),
                    is_remote=True,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
                parent = trace.set_span_in_context(NonRecordingSpan(context))
            span = self._tracer.start_span(
                record.name,
                context=parent,
                kind=SpanKind[record.kind],
                attributes=dict(record.attributes),
                start_time=record.start_ns,
            )
            if record.error is not None:
                span.set_status(Status(StatusCode.ERROR, record.error))
            span.end(end_time=max(record.end_ns, record.start_ns))

    def flush(self, timeout_millis: int = 10_000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()


def build_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (a URL with a path is taken as it is)."""
    endpoint = endpoint.strip()
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{ENDPOINT_ENV}={endpoint!r} is not an http(s) URL, e.g. http://otel-collector:4318"
        )
    return endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + TRACES_PATH


def parse_sampling(value: str | None) -> float:
    """The share of runs traced: a number from 0 to 1 (unset: 1)."""
    if value is None or not value.strip():
        return 1.0
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{SAMPLING_ENV}={value!r} is not a number from 0 to 1, e.g. 0.25")
    return ratio


def build_traces(service: str, endpoint: str, ratio: float) -> Traces | None:
    """An exporter to the collector at `endpoint` (empty: None, tracing is off)."""
    if not endpoint.strip():
        return None
    url = build_traces_url(endpoint)
    return Traces(service, ratio, BatchSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=10)))


def traces_from_env(service: str) -> Traces | None:
    """The process's exporter as its environment says, or None when tracing is off; a bad setting
    raises ValueError naming the variable and an example."""
    endpoint = os.environ.get(ENDPOINT_ENV, "")
    return build_traces(service, endpoint, parse_sampling(os.environ.get(SAMPLING_ENV)))
