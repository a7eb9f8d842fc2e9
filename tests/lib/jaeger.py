"""A small client of a real Jaeger's query API (tests/cluster/jaeger), for tests: a trace's spans, read back
as OTLP and normalized. Not pure: HTTP.

    jaeger = Jaeger.from_cluster()        # starts (and on first use builds) tests/cluster/jaeger
    # ... export spans to f"{jaeger.otlp_url}/v1/traces" ...
    spans = wait_for_trace(jaeger.query_url, "4bf92f3577b34da6a3ce929d0e0e4736", min_spans=2, timeout=30)

It reads Jaeger's API v3 (`GET /api/v3/traces/{id}`, cmd/query/app/apiv3/http_gateway.go of module
github.com/jaegertracing/jaeger v1.75.0), which answers OTLP's JSON encoding: ids in hex, 64-bit integers
as strings, enums as numbers. It asks for the raw trace (`raw_traces=true`): Jaeger's adjusters (span id
deduplication, sorting, clock skew) would otherwise rewrite what the product sent.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "cluster" / "jaeger"
POLL_SECONDS = 0.25
SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_CODES = ("UNSET", "OK", "ERROR")
AttributeValue = str | bool | int | float | bytes | list[Any] | dict[str, Any] | None


class JaegerError(Exception):
    """Jaeger answered a read with a status other than 200 or a trace's 404."""


@dataclass(frozen=True)
class Span:
    """One span as Jaeger stored it. Ids are lowercase hex; times are nanoseconds since the epoch; kind and
    status code are OTel's names (CLIENT, ERROR); attribute values keep their OTLP type (an int stays int)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    kind: str
    status_code: str
    status_message: str
    attributes: dict[str, AttributeValue]
    service: str | None


@dataclass(frozen=True)
class Jaeger:
    """Where a running Jaeger receives OTLP over HTTP (exporters add /v1/traces) and answers queries."""

    otlp_url: str
    query_url: str

    @classmethod
    def from_cluster(cls) -> Jaeger:
        """The Jaeger tests/cluster/jaeger runs (started here, and on first use built, if it is not)."""
        started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=False)
        if started.returncode != 0:
            raise RuntimeError(f"tests/cluster/jaeger start failed:\n{started.stderr[-2000:]}")
        return cls(started.stdout.strip().splitlines()[-1], script_output("query-url"))


def script_output(command: str) -> str:
    """What `tests/cluster/jaeger COMMAND` prints (url, query-url)."""
    done = subprocess.run([str(SCRIPT), command], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def fetch_trace(query_url: str, trace_id: str) -> list[Span]:
    """The spans Jaeger holds of trace `trace_id` (hex) now; none when it holds none (its 404)."""
    url = f"{query_url.rstrip('/')}/api/v3/traces/{trace_id.lower()}?raw_traces=true"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            document = json.load(answer)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise JaegerError(f"GET {url}: HTTP {exc.code}: {exc.read().decode('utf-8', 'replace')}") from None
    return build_spans(document["result"])


def wait_for_trace(query_url: str, trace_id: str, min_spans: int, timeout: float) -> list[Span]:
    """The spans of trace `trace_id` once Jaeger holds at least `min_spans` of them (they arrive in batches),
    or, after `timeout` seconds, those it holds then: an empty list for a trace it never received."""
    deadline = time.monotonic() + timeout
    while True:
        spans = fetch_trace(query_url, trace_id)
        if len(spans) >= min_spans or time.monotonic() >= deadline:
            return spans
        time.sleep(POLL_SECONDS)


def build_spans(traces_data: dict[str, Any]) -> list[Span]:
    """Every span of an OTLP TracesData document (JSON encoding), ordered by start time."""
    spans = []
    for resource_spans in traces_data.get("resourceSpans") or []:
        resource = build_attributes((resource_spans.get("resource") or {}).get("attributes"))
        service = resource.get("service.name")
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                status = span.get("status") or {}
                spans.append(
                    Span(
                        name=span.get("name", ""),
                        trace_id=hex_id(span.get("traceId")) or "",
                        span_id=hex_id(span.get("spanId")) or "",
                        parent_span_id=hex_id(span.get("parentSpanId")),
                        start_ns=int(span.get("startTimeUnixNano", 0)),
                        end_ns=int(span.get("endTimeUnixNano", 0)),
                        kind=enum_name(span.get("kind", 0), SPAN_KINDS, "SPAN_KIND_"),
                        status_code=enum_name(status.get("code", 0), STATUS_CODES, "STATUS_CODE_"),
                        status_message=status.get("message", ""),
                        attributes=build_attributes(span.get("attributes")),
                        service=service if isinstance(service, str) else None,
                    )
                )
    return sorted(spans, key=lambda s: (s.start_ns, s.span_id))


def build_attributes(key_values: list[dict[str, Any]] | None) -> dict[str, AttributeValue]:
    """OTLP KeyValues as a dict of typed values."""
    return {kv["key"]: build_value(kv.get("value") or {}) for kv in key_values or []}


def build_value(any_value: dict[str, Any]) -> AttributeValue:
    """One OTLP AnyValue (JSON encoding: intValue is a string, bytesValue base64) as a Python value."""
    if "stringValue" in any_value:
        return str(any_value["stringValue"])
    if "boolValue" in any_value:
        return bool(any_value["boolValue"])
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "doubleValue" in any_value:
        return float(any_value["doubleValue"])
    if "bytesValue" in any_value:
        return base64.b64decode(any_value["bytesValue"])
    if "arrayValue" in any_value:
        return [build_value(v) for v in (any_value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in any_value:
        return build_attributes((any_value["kvlistValue"] or {}).get("values"))
    return None


def hex_id(value: str | None) -> str | None:
    """A span or trace id as lowercase hex; None when absent or empty (a root's parent)."""
    return value.lower() if value else None


def enum_name(value: int | str, names: tuple[str, ...], prefix: str) -> str:
    """An OTLP enum (a number, or its proto name such as STATUS_CODE_ERROR) as OTel's short name (ERROR)."""
    if isinstance(value, int):
        return names[value]
    return value.removeprefix(prefix)
