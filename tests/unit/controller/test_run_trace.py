"""A traced run's status names its trace, and its status writes send the operator's spans (reconcile.py,
run_trace.py); the SDK's in-memory exporter stands in for the collector (tests/traces: a real Jaeger)."""

from datetime import UTC, datetime
from typing import Any

import structlog
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.unit.controller.fake_kube import ApiServer, wire

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.tracing import compute_attempt_span_id, compute_span_id, compute_trace_id
from harness_operator.controller.cache import ChildStore
from harness_operator.core.config import OperatorConfig
from harness_operator.telemetry import Traces

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TRACED = OperatorConfig(tracing_endpoint="http://collector:4318")


def lost_run() -> HarnessRun:
    """A run whose only attempt's Job the API server no longer has: it ends JobLost."""
    return HarnessRun.model_validate(
        {
            "metadata": {
                "name": "r",
                "namespace": "ns",
                "uid": "run-uid",
                "creationTimestamp": "2026-12-01T07:58:00Z",
            },
            "spec": {"provider": "claude", "prompt": "p"},
            "status": {
                "attempts": [
                    {"index": 1, "provider": "claude", "jobName": "r-a1", "startTime": "2026-12-01T07:59:00Z"}
                ],
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}],
            },
        }
    )


def reconcile(config: OperatorConfig, traces: Traces | None) -> dict[str, Any]:
    api = ApiServer([], [], lost_run())
    store = ChildStore()
    store.replace("Job", None, [])
    store.replace("Pod", None, [])
    wire(api, config, lambda: NOW, store, traces=traces).reconcile("ns", "r")
    status: dict[str, Any] = api.status("r")
    return status


def test_a_traced_run_names_its_trace_and_its_end_sends_the_attempt_and_the_run():
    memory = InMemorySpanExporter()
    status = reconcile(TRACED, Traces("harness-operator", 1.0, SimpleSpanProcessor(memory)))
    assert status["reason"] == "JobLost"
    assert status["traceID"] == compute_trace_id("run-uid")
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert set(spans) == {"attempt 1 claude", "run ns/r"}
    root, attempt = spans["run ns/r"], spans["attempt 1 claude"]
    assert f"{root.context.span_id:016x}" == compute_span_id("run-uid") and root.parent is None
    assert f"{attempt.context.span_id:016x}" == compute_attempt_span_id("run-uid", 1)
    assert attempt.parent is not None and attempt.parent.span_id == root.context.span_id
    assert attempt.status.status_code == StatusCode.ERROR and attempt.status.description == "JobLost"
    assert root.attributes["harness.reason"] == "JobLost"
    assert root.start_time == int(datetime(2026, 12, 1, 7, 58, tzinfo=UTC).timestamp()) * 10**9
    assert attempt.start_time == int(datetime(2026, 12, 1, 7, 59, tzinfo=UTC).timestamp()) * 10**9
    assert attempt.end_time == root.end_time == int(NOW.timestamp()) * 10**9


def test_an_unsampled_run_or_tracing_off_names_no_trace_and_sends_nothing():
    memory = InMemorySpanExporter()
    unsampled = OperatorConfig(tracing_endpoint="http://collector:4318", tracing_sampling=0.0)
    status = reconcile(unsampled, Traces("harness-operator", 0.0, SimpleSpanProcessor(memory)))
    assert "traceID" not in status and memory.get_finished_spans() == ()
    assert "traceID" not in reconcile(OperatorConfig(), None)


def test_the_runs_end_is_an_audit_record_on_the_operators_log():
    with structlog.testing.capture_logs() as logs:
        reconcile(TRACED, None)
    audits = [entry for entry in logs if entry.get("event") == "audit"]
    assert [a["audit"] for a in audits] == ["attempt-ended", "run-finished"]
    assert audits[1]["reason"] == "JobLost" and audits[1]["runUID"] == "run-uid"
