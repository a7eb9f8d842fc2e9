"""The operator's spans of a run, from what a status write changes (core/status/trace.py), and the pod's
steps they hold (core/status/observed.compute_pod_steps)."""

from datetime import UTC, datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.contract.tracing import compute_attempt_span_id, compute_span_id
from harness_operator.core.status.observed import PodStep, compute_pod_steps
from harness_operator.core.status.trace import build_run_spans

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
DONE = [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]
FAILED = [{"type": "Succeeded", "status": "False", "reason": "ProviderFailed"}]
RUN = HarnessRun.model_validate(
    {
        "metadata": {
            "name": "r",
            "namespace": "ns",
            "uid": "u",
            "creationTimestamp": "2026-12-01T07:50:00Z",
            "annotations": {"agentharness.dev/author": "alice"},
        },
        "spec": {"provider": "claude", "prompt": "p"},
    }
)


def ns(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()) * 10**9


def status(**fields: Any) -> HarnessRunStatus:
    return HarnessRunStatus.model_validate(fields)


A1 = {"index": 1, "provider": "claude", "startTime": "2026-12-01T07:51:00Z"}
A1_FAILED = {**A1, "completionTime": "2026-12-01T07:53:00Z", "exitCode": 1, "reason": "ProviderFailed"}
A2 = {"index": 2, "provider": "codex", "startTime": "2026-12-01T07:54:00Z"}
A2_DONE = {
    **A2,
    "completionTime": "2026-12-01T07:58:00Z",
    "exitCode": 0,
    "reason": "Succeeded",
    "model": "gpt-5",
    "usage": {"inputTokens": 120, "outputTokens": 30, "cacheReadTokens": 5, "costUSD": 0.25},
}


def test_the_first_start_closes_the_admission_with_why_it_waited():
    before = status(reason="Queued", message="2 runs ahead in the namespace's queue")
    (admission,) = build_run_spans(RUN, before, status(attempts=[A1]), {}, NOW)
    assert (admission.name, admission.span_id, admission.parent_id) == (
        "admission",
        compute_span_id("u", "admission"),
        compute_span_id("u"),
    )
    assert (admission.start_ns, admission.end_ns) == (ns("2026-12-01T07:50:00Z"), ns("2026-12-01T07:51:00Z"))
    assert admission.attributes["harness.wait.reason"] == "Queued"
    assert build_run_spans(RUN, status(attempts=[A1]), status(attempts=[A1]), {}, NOW) == []


def test_an_ended_attempt_gets_its_span_with_its_pods_steps_once():
    steps = {
        1: (
            PodStep("schedule", "2026-12-01T07:51:00Z", "2026-12-01T07:51:01Z"),
            PodStep("agent", "2026-12-01T07:51:05Z", "2026-12-01T07:52:59Z"),
        )
    }
    before, after = status(attempts=[A1]), status(attempts=[A1_FAILED, A2])
    spans = build_run_spans(RUN, before, after, steps, NOW)
    assert [s.name for s in spans] == ["attempt 1 claude", "schedule", "agent"]
    attempt = spans[0]
    assert attempt.span_id == compute_attempt_span_id("u", 1) and attempt.parent_id == compute_span_id("u")
    assert attempt.error == "ProviderFailed" and attempt.attributes["harness.exit_code"] == 1
    assert (attempt.start_ns, attempt.end_ns) == (ns("2026-12-01T07:51:00Z"), ns("2026-12-01T07:53:00Z"))
    assert all(s.parent_id == attempt.span_id for s in spans[1:])
    assert spans[2].span_id == compute_span_id("u", "attempt", 1, "agent")
    assert build_run_spans(RUN, after, after, steps, NOW) == []  # written again: nothing new


def test_the_runs_end_sends_its_own_span_with_usage_author_and_pull_request():
    before = status(attempts=[A1_FAILED, A2])
    after = status(
        attempts=[A1_FAILED, A2_DONE],
        conditions=DONE,
        phase="Succeeded",
        reason="Succeeded",
        completionTime="2026-12-01T07:58:30Z",
        usage={"inputTokens": 120, "outputTokens": 30, "costUSD": 0.25},
        changes={"branch": "agent/r", "pullRequestURL": "http://forge/o/r/pulls/1"},
    )
    spans = build_run_spans(RUN, before, after, {}, NOW)
    assert [s.name for s in spans] == ["attempt 2 codex", "run ns/r"]
    attempt, run = spans
    assert attempt.error is None and attempt.attributes["gen_ai.response.model"] == "gpt-5"
    assert attempt.attributes["gen_ai.usage.input_tokens"] == 120
    assert attempt.attributes["gen_ai.usage.cache_read.input_tokens"] == 5
    assert run.parent_id is None and run.error is None
    assert (run.start_ns, run.end_ns) == (ns("2026-12-01T07:50:00Z"), ns("2026-12-01T07:58:30Z"))
    assert run.attributes["harness.author"] == "alice"
    assert run.attributes["harness.pull_request"] == "http://forge/o/r/pulls/1"
    assert run.attributes["harness.cost_usd"] == 0.25 and run.attributes["harness.attempts"] == 2


def test_a_failed_run_is_an_error_and_an_approved_one_has_its_wait_and_publish():
    failed = status(attempts=[A1_FAILED], conditions=FAILED, reason="ProviderFailed")
    (*_, run) = build_run_spans(RUN, status(attempts=[A1]), failed, {}, NOW)
    assert run.error == "ProviderFailed"
    waiting = status(attempts=[A2_DONE])
    approved = status(
        attempts=[A2_DONE],
        conditions=DONE,
        reason="Succeeded",
        completionTime="2026-12-01T09:00:00Z",
        approval={"decision": "Approved", "user": "bob", "time": "2026-12-01T08:30:00Z"},
    )
    spans = {s.name: s for s in build_run_spans(RUN, waiting, approved, {}, NOW)}
    assert set(spans) == {"approval", "publish", "run ns/r"}
    assert (spans["approval"].start_ns, spans["approval"].end_ns) == (
        ns("2026-12-01T07:58:00Z"),
        ns("2026-12-01T08:30:00Z"),
    )
    assert spans["approval"].attributes == {
        "harness.approval.decision": "Approved",
        "harness.approval.user": "bob",
    }
    assert (spans["publish"].start_ns, spans["publish"].end_ns) == (
        ns("2026-12-01T08:30:00Z"),
        ns("2026-12-01T09:00:00Z"),
    )


def test_pod_steps_from_the_kubelets_records():
    pod = {
        "metadata": {"creationTimestamp": "2026-12-01T07:51:00Z"},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T07:51:01Z"}
            ],
            "initContainerStatuses": [
                {
                    "name": "git-clone",
                    "state": {
                        "terminated": {
                            "startedAt": "2026-12-01T07:51:02Z",
                            "finishedAt": "2026-12-01T07:51:04Z",
                        }
                    },
                },
                {"name": "publish", "state": {"running": {"startedAt": "2026-12-01T07:51:05Z"}}},
            ],
            "containerStatuses": [
                {
                    "name": "agent",
                    "state": {
                        "terminated": {
                            "startedAt": "2026-12-01T07:51:05Z",
                            "finishedAt": "2026-12-01T07:52:00Z",
                        }
                    },
                },
                {
                    "name": "runner",
                    "state": {
                        "terminated": {
                            "startedAt": "2026-12-01T07:51:05Z",
                            "finishedAt": "2026-12-01T07:52:01Z",
                        }
                    },
                },
            ],
        },
    }
    assert compute_pod_steps(pod) == (
        PodStep("schedule", "2026-12-01T07:51:00Z", "2026-12-01T07:51:01Z"),
        PodStep("clone", "2026-12-01T07:51:02Z", "2026-12-01T07:51:04Z"),
        PodStep("runner", "2026-12-01T07:51:05Z", "2026-12-01T07:52:01Z"),
        PodStep("agent", "2026-12-01T07:51:05Z", "2026-12-01T07:52:00Z"),
    )
    ended = {"terminated": {"startedAt": "2026-12-01T07:51:03Z", "finishedAt": "2026-12-01T07:52:10Z"}}
    pod["status"]["initContainerStatuses"][1]["state"] = ended  # the publisher, a sidecar since the start
    assert compute_pod_steps(pod)[-1] == PodStep("publish", "2026-12-01T07:52:00Z", "2026-12-01T07:52:10Z")
    assert compute_pod_steps(None) == ()
    assert compute_pod_steps({"metadata": {}, "status": {}}) == ()


def test_content_only_when_the_platform_records_it():
    run = RUN.model_copy(deep=True)
    before = status(attempts=[A2_DONE])
    after = status(
        attempts=[A2_DONE], conditions=DONE, reason="Succeeded", output={"excerpt": "done: [REDACTED]"}
    )
    (quiet,) = build_run_spans(run, before, after, {}, NOW)
    assert "harness.prompt" not in quiet.attributes and "harness.output" not in quiet.attributes
    (loud,) = build_run_spans(run, before, after, {}, NOW, content=True)
    assert (loud.attributes["harness.prompt"], loud.attributes["harness.output"]) == ("p", "done: [REDACTED]")


def test_an_attempt_lasts_until_its_publisher_ended():
    steps = {2: (PodStep("publish", "2026-12-01T07:58:00Z", "2026-12-01T07:58:09Z"),)}
    attempt, publish = build_run_spans(RUN, status(attempts=[A2]), status(attempts=[A2_DONE]), steps, NOW)
    assert attempt.end_ns == publish.end_ns == ns("2026-12-01T07:58:09Z")
