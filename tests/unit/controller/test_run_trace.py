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
from harness_operator.contract.runner_spans import RunnerSpan, encode_spans_line
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


class LoggingApiServer(ApiServer):
    """Also serves the runner's log tail of pod r-a1-x: `log`."""

    def __init__(self, log: str, *args: Any) -> None:
        super().__init__(*args)
        self.log, self.tails = log, 0

    def fetch_pod_log_tail(self, namespace: str, pod: str, tail_lines: int, limit_bytes: int) -> str | None:
        self.tails += 1
        assert (namespace, pod) == ("ns", "r-a1-x") and limit_bytes >= 48 * 1024
        return self.log


RUNNER_RAN = {"startedAt": "2026-12-01T07:59:10Z", "finishedAt": "2026-12-01T07:59:40Z"}


def ended_attempt() -> tuple[dict[str, Any], dict[str, Any]]:
    """Attempt 1's Job and its pod, whose runner ended with exit code 3 and no report (ProviderFailed)."""
    meta = {"namespace": "ns", "labels": {"agentharness.dev/run": "r", "agentharness.dev/attempt": "1"}}
    job = {
        "kind": "Job",
        "metadata": {
            **meta,
            "name": "r-a1",
            "uid": "job-uid",
            "ownerReferences": [{"uid": "run-uid", "controller": True}],
        },
        "spec": {"suspend": False},
        "status": {"startTime": "2026-12-01T07:59:00Z"},
    }
    ended = {"terminated": {"exitCode": 3, "reason": "Error", **RUNNER_RAN}}
    pod = {
        "kind": "Pod",
        "metadata": {
            **meta,
            "name": "r-a1-x",
            "uid": "pod-uid",
            "creationTimestamp": "2026-12-01T07:59:01Z",
            "ownerReferences": [{"uid": "job-uid", "controller": True}],
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "runner", "state": ended}, {"name": "agent", "state": ended}],
        },
    }
    return job, pod


def test_the_runners_spans_at_the_end_of_its_log_join_the_attempt_clamped_to_its_container():
    started = int(datetime(2026, 12, 1, 7, 59, 10, tzinfo=UTC).timestamp()) * 10**9
    line = encode_spans_line(
        [
            RunnerSpan("setup", started - 5 * 10**9, started + 10**9),  # began before the container: clamped
            RunnerSpan(
                "agent", started + 10**9, started + 20 * 10**9, attributes={"harness.provider": "claude"}
            ),
            RunnerSpan("turn 1", started + 2 * 10**9, started + 3 * 10**9, parent=1),
        ]
    )
    job, pod = ended_attempt()
    api = LoggingApiServer("agent output\n" + line, [job], [pod], lost_run())
    store = ChildStore()
    store.replace("Job", None, [job])
    store.replace("Pod", None, [pod])
    memory = InMemorySpanExporter()
    traces = Traces("harness-operator", 1.0, SimpleSpanProcessor(memory))
    wire(api, TRACED, lambda: NOW, store, traces=traces).reconcile("ns", "r")
    assert api.status("r")["reason"] == "ProviderFailed" and api.tails == 1
    spans = {s.name: s for s in memory.get_finished_spans()}
    attempt = spans["attempt 1 claude"]
    assert {"setup", "agent", "turn 1", "runner", "run ns/r"} <= set(spans)
    assert spans["setup"].parent.span_id == attempt.context.span_id
    assert spans["turn 1"].parent.span_id == spans["agent"].context.span_id
    assert spans["setup"].start_time == started  # within when the runner's container ran
    assert spans["agent"].attributes["harness.source"] == "sandbox"
    assert spans["runner"].attributes["harness.attempt"] == 1  # the kubelet's step, not the sandbox's
    assert "harness.source" not in spans["runner"].attributes
