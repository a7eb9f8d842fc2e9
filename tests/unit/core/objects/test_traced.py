"""Whether a run is traced, and its attempts' traceparents (core/objects/traced.py)."""

from harness_operator.contract.tracing import (
    compute_attempt_span_id,
    compute_trace_id,
    is_sampled,
    parse_traceparent,
)
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.traced import build_attempt_traceparent, compute_run_trace_id

ON = OperatorConfig(tracing_endpoint="http://collector:4318")


def test_traced_only_with_a_collector_and_a_uid():
    assert compute_run_trace_id("u", ON) == compute_trace_id("u")
    assert compute_run_trace_id("u", OperatorConfig()) is None
    assert compute_run_trace_id("", ON) is None
    assert build_attempt_traceparent("u", 1, OperatorConfig()) is None


def test_the_sampled_share_decides_by_the_trace_id():
    half = OperatorConfig(tracing_endpoint="http://collector:4318", tracing_sampling=0.5)
    uids = [f"uid-{n}" for n in range(200)]
    traced = [u for u in uids if compute_run_trace_id(u, half) is not None]
    assert traced == [u for u in uids if is_sampled(compute_trace_id(u), 0.5)]
    assert 60 < len(traced) < 140


def test_an_attempts_traceparent_names_its_span_in_the_runs_trace():
    parsed = parse_traceparent(build_attempt_traceparent("u", 2, ON))
    assert parsed is not None and parsed.sampled
    assert (parsed.trace_id, parsed.span_id) == (compute_trace_id("u"), compute_attempt_span_id("u", 2))
