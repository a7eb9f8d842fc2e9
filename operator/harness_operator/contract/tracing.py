"""A run's trace as every component names it (pure): its ids, derived from the run's uid, so operator
replicas, the model gateway and the runner name the same spans without asking each other; the sampling
decision, a function of the trace id alone; the W3C traceparent the attempt's plan carries; and the span
records the operator and the gateway hand to the OpenTelemetry SDK (harness_operator/telemetry.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

AttributeValue = str | bool | int | float | Sequence[str]

_SALT = b"agentharness.dev/trace\x00"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# Span kinds by the SDK's names (opentelemetry.trace.SpanKind members).
INTERNAL, CLIENT, SERVER = "INTERNAL", "CLIENT", "SERVER"


def compute_trace_id(run_uid: str) -> str:
    """The run's trace id: 32 hex digits, never all zeros (W3C's invalid id)."""
    digest = hashlib.sha256(_SALT + run_uid.encode()).hexdigest()[:32]
    return digest if digest.strip("0") else "1".rjust(32, "0")


def compute_span_id(run_uid: str, *path: str | int) -> str:
    """The id of the run's span named by `path` (() the run's own span, ("attempt", 2) its second
    attempt's, ("attempt", 2, "agent") a step of it): 16 hex digits, never all zeros."""
    key = "/".join(str(part) for part in path)
    digest = hashlib.sha256(_SALT + run_uid.encode() + b"\x00span\x00" + key.encode()).hexdigest()[:16]
    return digest if digest.strip("0") else "1".rjust(16, "0")


def compute_attempt_span_id(run_uid: str, index: int) -> str:
    """The span of attempt `index` (1-based): the parent of its steps, the runner's and the gateway's."""
    return compute_span_id(run_uid, "attempt", index)


def is_sampled(trace_id: str, ratio: float) -> bool:
    """Whether the run's trace is kept: its id's low 64 bits below `ratio` of their range, as
    OpenTelemetry's TraceIdRatioBased sampler decides, so every component agrees."""
    if ratio >= 1.0:
        return True
    if ratio <= 0.0:
        return False
    return int(trace_id[16:], 16) < int(ratio * (1 << 64))


def build_traceparent(trace_id: str, span_id: str, sampled: bool = True) -> str:
    """The W3C traceparent header's value."""
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


@dataclass(frozen=True)
class TraceParent:
    trace_id: str
    span_id: str
    sampled: bool


def parse_traceparent(value: str | None) -> TraceParent | None:
    """A traceparent's ids, or None when it is not one (version 00, lower-case hex, non-zero ids)."""
    match = _TRACEPARENT.fullmatch(value or "")
    if match is None or not match[1].strip("0") or not match[2].strip("0"):
        return None
    return TraceParent(match[1], match[2], bool(int(match[3], 16) & 1))


@dataclass(frozen=True)
class SpanRecord:
    """One finished span as the exporter takes it: times in nanoseconds since the epoch; `parent_id`
    None for the trace's root; `error` the status description of a span that failed."""

    name: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    error: str | None = None
    kind: str = INTERNAL
