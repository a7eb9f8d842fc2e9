"""Whether a run is traced, and the ids its trace gives the attempts' runners and gateway requests
(pure): traced when the platform names a collector and the run's trace id falls in the sampled share."""

from __future__ import annotations

from harness_operator.contract.tracing import (
    build_traceparent,
    compute_attempt_span_id,
    compute_trace_id,
    is_sampled,
)
from harness_operator.core.config import OperatorConfig


def compute_run_trace_id(run_uid: str, config: OperatorConfig) -> str | None:
    """The run's trace id when it is traced, else None (a run without a uid is not on a cluster)."""
    if not (config.tracing_endpoint and run_uid):
        return None
    trace_id = compute_trace_id(run_uid)
    return trace_id if is_sampled(trace_id, config.tracing_sampling) else None


def build_attempt_traceparent(run_uid: str, index: int, config: OperatorConfig) -> str | None:
    """The traceparent of attempt `index`'s span when the run is traced: the parent of its runner's and
    its gateway requests' spans."""
    trace_id = compute_run_trace_id(run_uid, config)
    return None if trace_id is None else build_traceparent(trace_id, compute_attempt_span_id(run_uid, index))
