"""observe_attempt and compute_status: a table over Job and Pod states, fallback and cancel decisions."""

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import AttemptOutcome, HarnessRun, RetryPolicy, Usage
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.result import ResultDocument, build_result_doc, render_termination_message
from harness_operator.core.queue.kueue import slim_workload
from harness_operator.core.status.decide import decide, decide_deletions
from harness_operator.core.status.observed import (
    FINISHED,
    PENDING,
    RUNNING,
    SUSPENDED,
    Observed,
    ObservedAttempt,
    build_result_from_attempt,
    is_job_finished,
    merge_attempts,
    observe_attempt,
    recorded_attempts,
)
from harness_operator.core.status.status import (
    build_attempt,
    compute_definition_status,
    compute_next_attempt,
    compute_status,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
LATER = datetime(2026, 11, 29, 12, 5, 0, tzinfo=UTC)


def run(status: dict[str, Any] | None = None, **spec: Any) -> HarnessRun:
    body: dict[str, Any] = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"provider": "claude", "prompt": "p", **spec},
    }
    if status:
        body["status"] = status
    return HarnessRun.model_validate(body)


def job(conditions: list[dict[str, str]] | None = None, suspend: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "r-a1"},
        "spec": {"suspend": suspend},
        "status": {"startTime": "2026-11-29T11:59:00Z", "conditions": conditions or []},
    }


AGENT_EXITED_0 = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def pod(
    phase: str, terminated: dict[str, Any] | None = None, agent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod whose runner container is `terminated` (else running in phase Running); its agent
    container is `agent`, by default ended with exit 0 once the runner ended, else running."""
    state = {"terminated": terminated} if terminated else ({"running": {}} if phase == "Running" else {})
    if agent is None:
        agent = AGENT_EXITED_0 if terminated else state
    statuses = [{"name": "runner", "state": state}, {"name": "agent", "state": agent}]
    return {
        "metadata": {"name": "r-a1-xyz", "creationTimestamp": "2026-11-29T11:59:00Z"},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def message(exit_code: int, reason: str | None = None, usage: dict[str, Any] | None = None) -> str:
    doc = build_result_doc(
        attempt=1,
        provider="claude",
        exit_code=exit_code,
        reason=reason,
        message="m",
        usage=usage or {},
        model="claude-x",
        session_id="s1",
        output=b"out",
        output_bytes=3,
        truncated=False,
    )
    return render_termination_message(doc)


COMPLETE = [{"type": "Complete", "status": "True"}]
FAILED = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
DEADLINE = [
    {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer"}
]


@pytest.mark.parametrize(
    ("job_body", "pods", "state", "exit_code", "reason"),
    [
        (job(), [], PENDING, None, None),
        (job(), [pod("Pending")], PENDING, None, None),
        (job(), [pod("Running")], RUNNING, None, None),
        (job(suspend=True), [], SUSPENDED, None, None),
        (job(COMPLETE), [pod("Succeeded", {"exitCode": 0, "message": message(0)})], FINISHED, 0, None),
        (
            job(FAILED),
            [pod("Failed", {"exitCode": 2, "message": message(2, "ProviderFailed")})],
            FINISHED,
            2,
            "ProviderFailed",
        ),
        (
            job(FAILED),
            [pod("Failed", {"exitCode": 124, "message": message(124, "Timeout")})],
            FINISHED,
            124,
            "Timeout",
        ),
        (job(FAILED), [pod("Failed", {"exitCode": 137, "reason": "OOMKilled"})], FINISHED, 137, "OOMKilled"),
        (
            job(FAILED),
            [pod("Failed", {"exitCode": 1, "reason": "Error", "message": "not json"})],
            FINISHED,
            1,
            "ProviderFailed",
        ),
        (job(DEADLINE), [], FINISHED, 124, "Timeout"),
        (job(FAILED), [], FINISHED, 1, "JobLost"),
        (job(COMPLETE), [], FINISHED, 0, None),
    ],
    ids=[
        "job without pod",
        "pod pending",
        "pod running",
        "suspended by kueue",
        "succeeded with result",
        "provider failed",
        "runner timeout",
        "oom killed",
        "crash without result",
        "job deadline",
        "job failed, pod gone: lost",
        "complete, pod gone",
    ],
)
def test_observe_attempt(
    job_body: dict[str, Any],
    pods: list[dict[str, Any]],
    state: str,
    exit_code: int | None,
    reason: str | None,
) -> None:
    seen = observe_attempt(1, "claude", job_body, pods)
    assert seen.state == state
    assert (seen.result.exit_code if seen.result else None) == exit_code
    assert (seen.result.reason if seen.result else None) == reason


def finished(
    index: int, provider: str, exit_code: int, reason: str | None = None, **extra: Any
) -> ObservedAttempt:
    result = {
        "attempt": index,
        "provider": provider,
        "exitCode": exit_code,
        "message": "agent said no",
        **extra,
    }
    if reason:
        result["reason"] = reason
    return ObservedAttempt(
        index,
        provider,
        f"r-a{index}",
        f"r-a{index}-p",
        FINISHED,
        "2026-11-29T11:59:00Z",
        ResultDocument.model_validate(result),
    )


PROVIDERS = ["claude", "codex", "gemini"]


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        ([], 1),
        ([ObservedAttempt(1, "claude", "r-a1", state=RUNNING)], None),
        ([finished(1, "claude", 0)], None),
        ([finished(1, "claude", 1, "ProviderFailed")], 2),
        ([finished(1, "claude", 1, "AuthFailed")], 2),
        ([finished(1, "claude", 124, "Timeout")], None),
        ([finished(1, "claude", 124, "Cancelled")], None),
        ([finished(1, "claude", 1, "CostLimitExceeded")], None),
        ([finished(1, "claude", 1), finished(2, "codex", 1), finished(3, "gemini", 1)], None),
    ],
    ids=[
        "first attempt",
        "running",
        "succeeded",
        "failed -> fallback",
        "auth failure -> fallback",
        "timeout: no fallback",
        "cancel: no fallback",
        "cost stop: no fallback",
        "all failed",
    ],
)
def test_next_attempt(attempts: list[ObservedAttempt], expected: int | None) -> None:
    assert compute_next_attempt(Observed(PROVIDERS, attempts), None) == expected


def conditions(status: Any) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_rejected_run() -> None:
    status = compute_status(run(), Observed([], rejected=("UnknownProvider", 'unknown provider "x"')), NOW)
    assert conditions(status) == {
        "Accepted": ("False", "UnknownProvider"),
        "Succeeded": ("False", "UnknownProvider"),
        "Ready": ("False", "UnknownProvider"),
        "Stalled": ("True", "UnknownProvider"),
    }
    assert status.phase == "Failed"
    assert status.exit_code == 1
    assert status.message == 'unknown provider "x"'


def test_pending_then_running() -> None:
    pending = compute_status(run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1")]), NOW)
    assert pending.phase == "Pending"
    assert conditions(pending)["Succeeded"] == ("Unknown", "Pending")
    running = compute_status(
        run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)]), NOW
    )
    assert running.phase == "Running"
    assert running.attempts[0].job_name == "r-a1"


def test_queued_and_waiting_for_output() -> None:
    queued = compute_status(run(), Observed(PROVIDERS, waiting=("Queued", "2 runs in flight")), NOW)
    assert (queued.phase, conditions(queued)["Succeeded"]) == ("Pending", ("Unknown", "Queued"))


def test_fallback_in_progress_message_is_daguss_line() -> None:
    status = compute_status(run(), Observed(PROVIDERS, [finished(1, "claude", 1, "ProviderFailed")]), NOW)
    assert status.message == "harness: attempt 1/3 with claude failed; trying fallback 2/3 with codex"
    assert conditions(status)["Succeeded"] == ("Unknown", "FallingBack")


RETRIED = ["claude", "claude", "codex", "codex"]  # spec.retry.limit 1: two attempt numbers each


def test_a_transient_failure_is_retried_and_its_message_says_which_retry() -> None:
    observed = Observed(RETRIED, [finished(1, "claude", 1, "RateLimited")], positions=[1, 1, 2, 2])
    assert compute_next_attempt(observed, RetryPolicy(limit=1)) == 2
    status = compute_status(run(fallback=[{"provider": "codex"}], retry={"limit": 1}), observed, NOW)
    assert (
        status.message == "attempt 1/4 with claude failed (RateLimited); retry 1/1 with claude as attempt 2/4"
    )
    assert conditions(status)["Succeeded"] == ("Unknown", "Retrying")


def test_a_failure_no_retry_cures_skips_to_the_fallbacks_number() -> None:
    observed = Observed(RETRIED, [finished(1, "claude", 1, "AuthFailed")], positions=[1, 1, 2, 2])
    assert compute_next_attempt(observed, RetryPolicy(limit=1)) == 3
    status = compute_status(run(fallback=[{"provider": "codex"}], retry={"limit": 1}), observed, NOW)
    assert status.message == "harness: attempt 1/4 with claude failed; trying fallback 3/4 with codex"


def test_on_any_every_failure_a_fallback_may_follow_is_retried() -> None:
    retried = run(fallback=[{"provider": "codex"}], retry={"limit": 1, "retryOn": "Any"})
    observed = Observed(RETRIED, [finished(1, "claude", 1, "AuthFailed")], positions=[1, 1, 2, 2])
    assert compute_next_attempt(observed, retried.spec.retry) == 2
    status = compute_status(retried, observed, NOW)
    line = "attempt 1/4 with claude failed (AuthFailed); retry 1/1 with claude as attempt 2/4"
    assert status.message == line
    assert conditions(status)["Succeeded"] == ("Unknown", "Retrying")
    timed_out = Observed(RETRIED, [finished(1, "claude", 124, "Timeout")], positions=[1, 1, 2, 2])
    assert compute_next_attempt(timed_out, retried.spec.retry) is None
    assert compute_status(retried, timed_out, NOW).reason == "Timeout"


def test_an_end_is_recorded_once_when_the_result_has_none() -> None:
    lost = finished(1, "claude", 1, "PodFailed")
    first = compute_status(run(), Observed(["claude"], [lost]), NOW)
    assert first.attempts[0].completion_time == "2026-11-29T12:00:00Z"
    again = compute_status(run(status=first.to_api()), Observed(["claude"], [lost]), LATER)
    assert again.attempts[0].completion_time == "2026-11-29T12:00:00Z"


def test_spend_the_gateway_metered_beyond_the_attempts_counts_in_the_runs_usage() -> None:
    """Red team 49, item 5: spend through a token no attempt's meter shows is the run's all the same."""
    usage1 = {"inputTokens": 10, "outputTokens": 1, "costUSD": 0.02, "costSource": "metered"}
    attempts = [
        finished(1, "claude", 1, "ProviderFailed", usage=usage1),
        finished(2, "codex", 1, "ProviderFailed"),
    ]
    rest = Usage(input_tokens=7, output_tokens=2, cost_usd=0.03, cost_source="metered")
    alone = compute_status(run(), Observed(PROVIDERS, attempts), NOW)
    counted = compute_status(run(), Observed(PROVIDERS, attempts, unattributed=rest), NOW)
    assert alone.usage is not None and (alone.usage.input_tokens, alone.usage.cost_usd) == (10, 0.02)
    assert counted.usage is not None
    assert (counted.usage.input_tokens, counted.usage.output_tokens) == (17, 3)
    assert (counted.usage.cost_usd, counted.usage.cost_source) == (0.05, "metered")
    assert [a.usage for a in counted.attempts] == [a.usage for a in alone.attempts]  # the attempts' own
    nothing = compute_status(
        run(), Observed(PROVIDERS, [finished(1, "claude", 1, "AuthFailed")], unattributed=rest), NOW
    )
    assert nothing.usage == rest


def test_success_after_fallback_with_usage_summed() -> None:
    usage1 = {"inputTokens": 10, "outputTokens": 1, "costUSD": 0.5, "costSource": "reported"}
    usage2 = {"inputTokens": 5, "outputTokens": 2, "costUSD": 0.25, "costSource": "reported"}
    attempts = [
        finished(1, "claude", 1, "ProviderFailed", usage=usage1),
        finished(2, "codex", 0, usage=usage2),
    ]
    status = compute_status(
        run(), Observed(PROVIDERS, attempts, output=b"hello", output_config_map="r-output"), NOW
    )
    assert status.phase == "Succeeded"
    assert conditions(status)["Succeeded"] == ("True", "Succeeded")
    assert status.exit_code == 0
    assert status.usage is not None
    assert (status.usage.input_tokens, status.usage.output_tokens, status.usage.cost_usd) == (15, 3, 0.75)
    assert status.output is not None
    assert (status.output.excerpt, status.output.bytes, status.output.config_map_name) == (
        "hello",
        5,
        "r-output",
    )
    assert [a.provider for a in status.attempts] == ["claude", "codex"]


def test_an_output_that_does_not_match_its_schema_fails_the_run_and_keeps_the_output() -> None:
    message = "spec.outputSchema: the output does not match at $: missing required 'verdict'"
    observed = Observed(
        PROVIDERS,
        [finished(1, "claude", 0)],
        output=b"{}",
        output_config_map="r-output",
        output_invalid=("OutputInvalid", message),
    )
    status = compute_status(run(), observed, NOW)
    assert (status.phase, status.reason, status.message, status.exit_code) == (
        "Failed",
        "OutputInvalid",
        message,
        1,
    )
    assert conditions(status)["Succeeded"] == ("False", "OutputInvalid")
    assert status.output is not None and status.output.config_map_name == "r-output"  # to see what it said
    assert status.attempts[0].exit_code == 0  # the agent's own exit, as it was
    assert compute_next_attempt(observed, None) is None  # no fallback: the agent succeeded, not its answer


def test_all_providers_failed_keeps_last_exit_code() -> None:
    attempts = [finished(1, "claude", 1), finished(2, "codex", 3), finished(3, "gemini", 7, "ProviderFailed")]
    status = compute_status(run(), Observed(PROVIDERS, attempts), NOW)
    assert (status.phase, status.exit_code, status.reason) == ("Failed", 7, "ProviderFailed")


def test_timeout_ends_the_run() -> None:
    status = compute_status(run(), Observed(PROVIDERS, [finished(1, "claude", 124, "Timeout")]), NOW)
    assert (status.phase, status.exit_code, conditions(status)["Succeeded"]) == (
        "Failed",
        124,
        ("False", "Timeout"),
    )


def test_cancel() -> None:
    status = compute_status(
        run(cancel=True),
        Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)], cancelled=True),
        NOW,
    )
    assert (status.phase, status.exit_code, status.reason) == ("Cancelled", 124, "Cancelled")


def test_transition_time_kept_until_status_flips() -> None:
    first = compute_status(run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1")]), NOW)
    again = compute_status(
        run(first.to_api()), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)]), LATER
    )
    succeeded = {c.type: c for c in again.conditions}["Succeeded"]
    assert succeeded.last_transition_time == "2026-11-29T12:00:00Z"
    done = compute_status(run(again.to_api()), Observed(PROVIDERS, [finished(1, "claude", 0)]), LATER)
    assert {c.type: c for c in done.conditions}["Succeeded"].last_transition_time == "2026-11-29T12:05:00Z"


def test_observed_generation_on_status_and_conditions() -> None:
    status = compute_status(run(), Observed(PROVIDERS, []), NOW)
    assert status.observed_generation == 1
    assert all(c.observed_generation == 1 for c in status.conditions)


def test_job_start_time_is_normalized_to_kubernetes_form() -> None:
    body = job()
    body["status"]["startTime"] = "2026-11-29T11:59:00+00:00"
    assert observe_attempt(1, "claude", body, [pod("Running")]).start_time == "2026-11-29T11:59:00Z"


def test_a_pod_on_its_way_to_start_is_recorded_with_running_in_one_write() -> None:
    """Its name and start wait for Running (one status write less); a pod that cannot start is named at once."""
    pending = observe_attempt(1, "claude", job(), [pod("Pending")])
    assert (pending.state, pending.pod_name, pending.start_time, pending.waiting) == (
        "Pending",
        None,
        None,
        None,
    )
    stuck = pod("Pending")
    stuck["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ImagePullBackOff"}}
    seen = observe_attempt(1, "claude", job(), [stuck])
    assert seen.pod_name == "r-a1-xyz" and seen.waiting is not None and "ImagePullBackOff" in seen.waiting


def test_total_cost_is_unknown_when_one_attempts_cost_is() -> None:
    attempts = [
        finished(1, "claude", 3, "ProviderFailed", usage={"inputTokens": 1}),
        finished(2, "codex", 0, usage={"inputTokens": 5, "costUSD": 0.1, "costSource": "reported"}),
    ]
    status = compute_status(run(), Observed(PROVIDERS, attempts, output=b"out"), NOW)
    assert status.usage is not None
    assert (status.usage.input_tokens, status.usage.cost_usd, status.usage.cost_source) == (
        6,
        None,
        "unknown",
    )


def test_a_cancelled_attempt_ends_the_run_cancelled() -> None:
    status = compute_status(run(), Observed(PROVIDERS, [finished(1, "claude", 124, "Cancelled")]), NOW)
    assert (status.phase, status.reason, status.exit_code) == ("Cancelled", "Cancelled", 124)


@pytest.mark.parametrize(
    ("body", "finished"),
    [
        (job(), False),
        (job(suspend=True), False),
        (job(COMPLETE), True),
        (job(FAILED), True),
        (job(DEADLINE), True),
    ],
)
def test_is_job_finished(body: dict[str, Any], finished: bool) -> None:
    assert is_job_finished(body) is finished


CANCELLED_RESULT = {"exitCode": 124, "message": message(124, "Cancelled")}


@pytest.mark.parametrize(
    ("conditions_", "cancelled", "exit_code", "reason"),
    [
        (FAILED, True, 124, "Cancelled"),
        (FAILED, False, 1, "JobLost"),
        (DEADLINE, False, 124, "Timeout"),
    ],
    ids=["spec.cancel stopped it", "pod deleted: lost", "Job deadline stopped it"],
)
def test_a_runner_stopped_by_sigterm_is_explained(
    conditions_: list[dict[str, str]], cancelled: bool, exit_code: int, reason: str
) -> None:
    """The runner says Cancelled on any SIGTERM; only spec.cancel makes it a cancel."""
    seen = observe_attempt(1, "claude", job(conditions_), [pod("Failed", CANCELLED_RESULT)], cancelled)
    assert seen.result is not None
    assert (seen.result.exit_code, seen.result.reason) == (exit_code, reason)
    if reason == "JobLost":
        assert "not run again" in (seen.result.message or "")
        assert seen.result.model == "claude-x"  # what the runner reported is kept


def recorded(index: int, provider: str = "claude", **fields: Any) -> dict[str, Any]:
    return {"index": index, "provider": provider, "jobName": f"r-a{index}", **fields}


def status_with(*attempts: dict[str, Any]) -> Any:
    return run({"attempts": list(attempts)}).status


@pytest.mark.parametrize(
    ("record", "seen", "cancelled", "expected"),
    [
        ([], {}, False, []),
        ([recorded(1)], {1: ObservedAttempt(1, "claude", "r-a1", state=RUNNING)}, False, [(RUNNING, None)]),
        ([recorded(1)], {}, False, [(FINISHED, "JobLost")]),
        ([recorded(1)], {}, True, [(FINISHED, "Cancelled")]),
        ([recorded(1, exitCode=3, reason="ProviderFailed")], {}, False, [(FINISHED, "ProviderFailed")]),
        ([recorded(1, exitCode=0)], {}, False, [(FINISHED, None)]),
        (
            [recorded(1, exitCode=3, reason="ProviderFailed"), recorded(2, "codex")],
            {2: ObservedAttempt(2, "codex", "r-a2", state=RUNNING)},
            False,
            [(FINISHED, "ProviderFailed"), (RUNNING, None)],
        ),
        ([], {1: finished(1, "claude", 1, "ProviderFailed")}, False, [(FINISHED, "ProviderFailed")]),
        (
            [recorded(1, exitCode=0)],
            {1: ObservedAttempt(1, "claude", "r-a1", state=RUNNING)},
            False,
            [(RUNNING, None)],
        ),
    ],
    ids=[
        "nothing yet",
        "job exists: the job is the truth",
        "started, job gone: lost",
        "started, job gone after spec.cancel: cancelled",
        "ended, job gone: keeps its end",
        "succeeded, job gone: keeps its end",
        "first ended, second running",
        "job not yet recorded (operator restarted)",
        "status written by hand: the job corrects it",
    ],
)
def test_merge_attempts(
    record: list[dict[str, Any]],
    seen: dict[int, ObservedAttempt],
    cancelled: bool,
    expected: list[tuple[str, str | None]],
) -> None:
    merged = merge_attempts(recorded_attempts(status_with(*record)), seen, cancelled, NOW)
    assert [(a.state, a.result.reason if a.result else None) for a in merged] == expected


def test_a_lost_attempt_is_never_created_again_and_falls_back() -> None:
    merged = merge_attempts(recorded_attempts(status_with(recorded(1, startTime="x"))), {}, False, NOW)
    assert merged[0].result == ResultDocument.model_validate(
        {
            "attempt": 1,
            "provider": "claude",
            "exitCode": 1,
            "reason": "JobLost",
            "message": "Job r-a1 vanished before attempt 1 finished; the attempt is not run again",
            "completionTime": "2026-11-29T12:00:00Z",
        }
    )
    assert merged[0].start_time == "x"
    assert compute_next_attempt(Observed(PROVIDERS, merged), None) == 2  # a non-zero exit: fallback follows
    assert compute_next_attempt(Observed(PROVIDERS[:1], merged), None) is None  # never attempt 1 again
    status = compute_status(run(), Observed(PROVIDERS[:1], merged), NOW)
    assert (status.phase, status.reason, status.exit_code) == ("Failed", "JobLost", 1)


def test_recorded_attempt_round_trips_through_its_result() -> None:
    fields = {
        "exitCode": 2,
        "reason": "ProviderFailed",
        "message": "m",
        "model": "x",
        "sessionID": "s",
        "usage": {"inputTokens": 3, "costSource": "unknown"},
        "startTime": "2026-11-29T11:59:00Z",
        "completionTime": "2026-11-29T12:00:00Z",
    }
    status = status_with(recorded(1, **fields))
    doc = build_result_from_attempt(status.attempts[0])
    assert doc == ResultDocument.model_validate({"attempt": 1, "provider": "claude", **fields})
    again = compute_status(run(), Observed(["claude"], recorded_attempts(status)), NOW)
    assert again.attempts[0].to_api() == status.attempts[0].to_api()


def test_failed_run_keeps_its_attempts_and_stays_accepted() -> None:
    attempts = [finished(1, "claude", 1, "ProviderFailed")]
    status = compute_status(
        run(), Observed(PROVIDERS, attempts, failed=("ChildConflict", "NetworkPolicy r-a2 exists")), NOW
    )
    assert conditions(status) == {
        "Accepted": ("True", "ProviderResolved"),
        "Succeeded": ("False", "ChildConflict"),
        "Ready": ("False", "ChildConflict"),
        "Stalled": ("True", "ChildConflict"),
    }
    assert (status.phase, status.exit_code, status.message) == ("Failed", 1, "NetworkPolicy r-a2 exists")
    assert [a.reason for a in status.attempts] == ["ProviderFailed"]
    assert compute_next_attempt(Observed(PROVIDERS, attempts, failed=("ChildConflict", "x")), None) is None


# Every phase and reason compute_status reaches, with the kstatus conditions it must write: Ready follows
# Succeeded; Reconciling while the run waits or runs; Stalled once it failed for good.
KSTATUS_CASES = {
    "rejected": (Observed([], rejected=("UnknownProvider", "x")), {}, "Failed", "Stalled"),
    "pending": (Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1")]), {}, "Pending", "Reconciling"),
    "queued": (Observed(PROVIDERS, waiting=("Queued", "2 in flight")), {}, "Pending", "Reconciling"),
    "waiting for output": (
        Observed(PROVIDERS, waiting=("WaitingForRunOutput", "x")),
        {},
        "Pending",
        "Reconciling",
    ),
    "suspended": (
        Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=SUSPENDED, waiting="no quota")]),
        {},
        "Pending",
        "Reconciling",
    ),
    "running": (
        Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)]),
        {},
        "Running",
        "Reconciling",
    ),
    "falling back": (
        Observed(PROVIDERS, [finished(1, "claude", 1, "ProviderFailed")]),
        {},
        "Pending",
        "Reconciling",
    ),
    "succeeded": (Observed(PROVIDERS, [finished(1, "claude", 0)]), {}, "Succeeded", "Ready"),
    "all failed": (
        Observed(["claude"], [finished(1, "claude", 1, "ProviderFailed")]),
        {},
        "Failed",
        "Stalled",
    ),
    "timeout": (
        Observed(PROVIDERS, [finished(1, "claude", 124, "Timeout")]),
        {},
        "Failed",
        "Stalled",
    ),
    "cancelled": (
        Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)], cancelled=True),
        {"cancel": True},
        "Cancelled",
        "Stalled",
    ),
    "child conflict": (
        Observed(PROVIDERS, failed=("ChildConflict", "x")),
        {},
        "Failed",
        "Stalled",
    ),
}


@pytest.mark.parametrize(
    ("observed", "spec", "phase", "outcome"), KSTATUS_CASES.values(), ids=KSTATUS_CASES.keys()
)
def test_kstatus_conditions_follow_succeeded(
    observed: Observed, spec: dict[str, Any], phase: str, outcome: str
) -> None:
    status = compute_status(run(**spec), observed, NOW)
    conds = {c.type: c for c in status.conditions}
    succeeded = conds["Succeeded"]
    assert status.phase == phase
    assert (conds["Ready"].reason, conds["Ready"].message) == (succeeded.reason, succeeded.message)
    assert all(c.observed_generation == 1 for c in status.conditions)
    if outcome == "Reconciling":  # waits or runs
        assert (succeeded.status, conds["Ready"].status, conds["Reconciling"].status) == (
            "Unknown",
            "False",
            "True",
        )
        assert conds["Reconciling"].reason == succeeded.reason
        assert "Stalled" not in conds
    elif outcome == "Ready":  # succeeded
        assert (succeeded.status, conds["Ready"].status) == ("True", "True")
        assert "Reconciling" not in conds and "Stalled" not in conds
    else:  # failed for good
        assert (succeeded.status, conds["Ready"].status, conds["Stalled"].status) == (
            "False",
            "False",
            "True",
        )
        assert (conds["Stalled"].reason, conds["Stalled"].message) == (succeeded.reason, succeeded.message)
        assert "Reconciling" not in conds


def test_reconciling_gives_way_to_ready_when_the_run_ends() -> None:
    running = compute_status(
        run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)]), NOW
    )
    done = compute_status(run(running.to_api()), Observed(PROVIDERS, [finished(1, "claude", 0)]), LATER)
    assert [c.type for c in running.conditions] == ["Accepted", "Succeeded", "Ready", "Reconciling"]
    assert [c.type for c in done.conditions] == ["Accepted", "Succeeded", "Ready"]
    assert {c.type: c for c in done.conditions}["Ready"].last_transition_time == "2026-11-29T12:05:00Z"


DEFINITION_CASES = {
    "valid": ({"binary": "claude"}, ("True", "Valid"), None),
    "acp": ({"binary": "x", "protocol": "acp"}, ("True", "Valid"), None),
    "does not parse": ({"binary": ""}, ("False", "InvalidDefinition"), "spec.binary: "),
    "unknown field": ({"binary": "x", "bogus": 1}, ("False", "InvalidDefinition"), "spec.bogus: "),
}


@pytest.mark.parametrize(("spec", "ready", "message"), DEFINITION_CASES.values(), ids=DEFINITION_CASES.keys())
def test_definition_ready(spec: dict[str, Any], ready: tuple[str, str], message: str | None) -> None:
    body = {"metadata": {"name": "d", "generation": 3}, "spec": spec}
    status = compute_definition_status(body, NOW)
    conds = {c.type: c for c in status.conditions}
    assert (conds["Ready"].status, conds["Ready"].reason) == ready
    assert status.observed_generation == 3 and conds["Ready"].observed_generation == 3
    if message is None:
        assert set(conds) == {"Ready"}
    else:  # broken for good until edited: kstatus reads Failed, not InProgress forever
        assert message in conds["Ready"].message
        assert (conds["Stalled"].status, conds["Stalled"].reason) == ("True", ready[1])


def test_a_fixed_definition_drops_stalled_and_keeps_ready_time_until_it_flips() -> None:
    broken = {"metadata": {"generation": 1}, "spec": {"binary": ""}}
    status = compute_definition_status(broken, NOW)
    fixed = {"metadata": {"generation": 2}, "spec": {"binary": "x"}, "status": status.to_api()}
    again = compute_definition_status(fixed, LATER)
    assert [(c.type, c.status, c.last_transition_time) for c in again.conditions] == [
        ("Ready", "True", "2026-11-29T12:05:00Z")
    ]
    same = compute_definition_status({**fixed, "status": again.to_api()}, LATER.replace(hour=13))
    assert same.conditions[0].last_transition_time == "2026-11-29T12:05:00Z"


def acp_message(agent_exit_code: int) -> str:
    doc = build_result_doc(
        attempt=1,
        provider="claude-acp",
        exit_code=0,
        reason=None,
        message="",
        usage={},
        model=None,
        session_id="s",
        output=b"out",
        output_bytes=3,
        truncated=False,
        agent_exit_code=agent_exit_code,
    )
    return render_termination_message(doc)


def left_running_message() -> str:
    doc = build_result_doc(
        attempt=1,
        provider="claude",
        exit_code=124,
        reason="Timeout",
        message="timed out",
        usage={},
        model=None,
        session_id=None,
        output=b"",
        output_bytes=0,
        truncated=False,
        agent_left_running=True,
    )
    return render_termination_message(doc)


AGENT_RUNNING = {"running": {}}


@pytest.mark.parametrize(
    ("runner", "agent", "state", "exit_code", "reason", "agent_running"),
    [
        # The agent wrote a success document to its own termination message: only the runner's counts.
        (
            {"exitCode": 1, "message": message(1, "ProviderFailed")},
            {"terminated": {"exitCode": 0, "message": message(0)}},
            FINISHED,
            1,
            "ProviderFailed",
            False,
        ),
        (
            {"exitCode": 0, "message": message(0)},
            {"terminated": {"exitCode": 1}},
            FINISHED,
            1,
            "ResultContradicted",
            False,
        ),
        ({"exitCode": 1, "message": message(0)}, AGENT_EXITED_0, FINISHED, 1, "ResultContradicted", False),
        ({"exitCode": 0, "message": message(0)}, {"waiting": {}}, FINISHED, 1, "ResultContradicted", False),
        ({"exitCode": 0, "message": message(0)}, AGENT_RUNNING, RUNNING, None, None, False),
        # An ACP adapter is killed at the session's end: the runner saw 137, so did the kubelet.
        (
            {"exitCode": 0, "message": acp_message(137)},
            {"terminated": {"exitCode": 137}},
            FINISHED,
            0,
            None,
            False,
        ),
        (
            {"exitCode": 0, "message": acp_message(137)},
            AGENT_EXITED_0,
            FINISHED,
            1,
            "ResultContradicted",
            False,
        ),
        ({"exitCode": 124, "message": left_running_message()}, AGENT_RUNNING, FINISHED, 124, "Timeout", True),
        ({"exitCode": 1, "reason": "Error"}, AGENT_RUNNING, FINISHED, 1, "ProviderFailed", True),
        (
            {"exitCode": 137, "message": message(137, "ProviderFailed")},
            {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            FINISHED,
            137,
            "OOMKilled",
            False,
        ),
    ],
    ids=[
        "agent's own termination message is ignored",
        "success, agent container exited 1",
        "success, runner container exited 1",
        "success, agent container never started",
        "success, agent container not yet recorded: wait",
        "success, the adapter killed as the runner saw",
        "success, the kubelet saw another exit than the runner",
        "runner gave up on the agent: ended, pod to delete",
        "runner died, agent runs: ended, pod to delete",
        "agent container out of memory",
    ],
)
def test_the_report_is_checked_against_the_kubelet(
    runner: dict[str, Any],
    agent: dict[str, Any],
    state: str,
    exit_code: int | None,
    reason: str | None,
    agent_running: bool,
) -> None:
    seen = observe_attempt(1, "claude", job(), [pod("Running", runner, agent)])
    assert seen.state == state
    assert (seen.result.exit_code if seen.result else None) == exit_code
    assert (seen.result.reason if seen.result else None) == reason
    assert seen.agent_running == agent_running
    assert decide_deletions([seen], cancelled=False) == (["r-a1"] if agent_running else [])


@pytest.mark.parametrize(
    ("clone", "reason", "says"),
    [
        (
            {"exitCode": 86, "message": "harness: the network policy was not enforced after 30 s: ...\n"},
            "NetworkNotConfined",
            "harness: the network policy was not enforced after 30 s: ...",
        ),
        (
            {"exitCode": 128, "message": "Cloning into '/workspace/repo'...\nfatal: repository not found\n"},
            "SetupFailed",
            "the workspace's clone (init container git-clone) exited 128: fatal: repository not found",
        ),
    ],
    ids=["its wait for the policy failed", "git failed"],
)
def test_a_failed_clone_names_its_cause(clone: dict[str, Any], reason: str, says: str) -> None:
    failed_pod = pod("Failed", agent={"waiting": {"reason": "PodInitializing"}})
    failed_pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    failed_pod["status"]["initContainerStatuses"] = [{"name": "git-clone", "state": {"terminated": clone}}]
    seen = observe_attempt(1, "claude", job(FAILED), [failed_pod])
    assert seen.state == FINISHED and seen.result is not None
    assert (seen.result.exit_code, seen.result.reason, seen.result.message) == (1, reason, says)
    assert (
        not seen.result.fallback_allowed if reason == "NetworkNotConfined" else seen.result.fallback_allowed
    )


def test_status_attempts_take_every_outcome_field_of_the_result_document() -> None:
    doc = ResultDocument.model_validate(
        {
            "attempt": 2,
            "provider": "codex",
            "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:01:00Z",
            "exitCode": 1,
            "reason": "ProviderFailed",
            "message": "boom",
            "model": "gpt-x",
            "sessionID": "s-1",
            "usage": {"inputTokens": 5, "costSource": "metered", "costUSD": 0.5},
            "cliVersion": "0.1.0",
            "reportedUsage": {"inputTokens": 1, "costSource": "reported", "costUSD": 0.0},
            "agentExitCode": 1,
            "output": {"bytes": 3},
            "deniedTools": ["Bash"],
        }
    )
    entry = build_attempt(doc).to_api()
    shared = {
        k: v for k, v in doc.to_doc().items() if k not in {"version", "attempt", "agentExitCode", "output"}
    }
    assert entry == {"index": 2, **shared}
    assert set(AttemptOutcome.model_fields) - {"index"} <= set(doc.model_fields_set)


def test_a_builtin_no_image_ships_is_not_ready_and_says_how_to_run_it() -> None:
    """The catalog's recipes for CLIs without an image (cursor, goose, ...) are not Ready: their runs
    would end BinaryNotFound in the operator's default sandbox."""
    for entry in load_builtin_catalog():
        body = {"metadata": {**entry.metadata, "generation": 1}, "spec": entry.spec.to_api()}
        ready = {c.type: c for c in compute_definition_status(body, NOW).conditions}["Ready"]
        starts_a_cli = entry.spec.transport in (None, "stdio")
        if entry.spec.image is None and starts_a_cli:
            assert (ready.status, ready.reason) == ("False", "NoImage"), entry.metadata["name"]
            assert "spec.sandbox.image" in (ready.message or "")
        else:
            assert (ready.status, ready.reason) == ("True", "Valid"), entry.metadata["name"]
    # The same spec without the catalog's label is a user's own: Ready (its image is theirs to choose).
    custom = {"metadata": {"name": "mine", "generation": 1}, "spec": {"binary": "cursor-agent"}}
    assert compute_definition_status(custom, NOW).conditions[0].status == "True"


def test_reconciling_keeps_its_transition_time_from_pending_to_running() -> None:
    pending = compute_status(
        run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=PENDING)]), NOW
    )
    running = compute_status(
        run(pending.to_api()),
        Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1", state=RUNNING)]),
        LATER,
    )
    before = {c.type: c for c in pending.conditions}["Reconciling"]
    after = {c.type: c for c in running.conditions}["Reconciling"]
    assert (before.reason, after.reason) == ("Pending", "Running")
    assert after.last_transition_time == before.last_transition_time  # still True: no transition


def test_an_attempt_starts_with_its_pod_and_its_start_does_not_move_in_flight() -> None:
    unstarted = {**job(), "status": {"conditions": []}}  # the Job controller has not written startTime yet
    seen = observe_attempt(1, "claude", unstarted, [pod("Running")])
    assert (seen.pod_name, seen.start_time) == ("r-a1-xyz", "2026-11-29T11:59:00Z")  # one write for both
    assert observe_attempt(1, "claude", unstarted, []).start_time is None
    # The Job controller records its start before the operator sees the pod: no start yet either, nor
    # while the pod is on its way to start (written with Running).
    assert observe_attempt(1, "claude", job(), []).start_time is None
    assert observe_attempt(1, "claude", job(), [pod("Pending")]).start_time is None
    assert observe_attempt(1, "claude", job(), [pod("Running")]).start_time == "2026-11-29T11:59:00Z"
    ended = job([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}])
    assert observe_attempt(1, "claude", ended, []).start_time == "2026-11-29T11:59:00Z"
    first = compute_status(run(), Observed(PROVIDERS, [seen]), NOW)
    later = ObservedAttempt(1, "claude", "r-a1", "r-a1-xyz", RUNNING, "2026-11-29T11:59:01Z")
    again = compute_status(run(first.to_api()), Observed(PROVIDERS, [later]), LATER)
    assert again.attempts[0].start_time == "2026-11-29T11:59:00Z"


def kueue_job(suspend: bool = True) -> dict[str, Any]:
    body = job(suspend=suspend)
    body["metadata"] |= {"uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}
    return body


def kueue_workload(*conditions: dict[str, str], evictions: int = 0) -> dict[str, Any]:
    stats = {"evictions": [{"reason": "Preempted", "count": evictions}]} if evictions else {}
    return slim_workload(
        {
            "metadata": {
                "name": "job-r-a1-x",
                "namespace": "ns",
                "ownerReferences": [{"kind": "Job", "name": "r-a1", "uid": "u1", "controller": True}],
            },
            "status": {"conditions": list(conditions), "schedulingStats": stats},
        }
    )


QUOTA_SHORT = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "insufficient quota",
}
PREEMPTED = {
    "type": "Evicted",
    "status": "True",
    "reason": "Preempted",
    "message": "Preempted to accommodate",
}
LOCAL_QUEUE = {"kind": "LocalQueue", "spec": {"clusterQueue": "cq-a"}}


def test_a_job_kueue_holds_waits_with_kueues_reason_in_the_runs_message() -> None:
    seen = observe_attempt(1, "claude", kueue_job(), [], False, kueue_workload(QUOTA_SHORT), LOCAL_QUEUE)
    assert (seen.state, seen.result, seen.withdrawn) == (SUSPENDED, None, False)
    assert seen.waiting == 'LocalQueue "team-a" (ClusterQueue "cq-a"): insufficient quota'
    status = compute_status(run(), Observed(PROVIDERS, [seen]), NOW)
    assert (status.phase, status.reason) == ("Pending", "Suspended")
    assert status.message == (
        'attempt 1/3 waits for its queue to admit it: LocalQueue "team-a" (ClusterQueue "cq-a"): '
        "insufficient quota"
    )
    assert decide_deletions([seen], False) == []


@pytest.mark.parametrize(
    "workload", [None, kueue_workload()], ids=["no Workload yet", "its Workload not judged yet"]
)
def test_a_job_kueue_has_not_judged_yet_costs_no_status_write(workload: dict[str, Any] | None) -> None:
    """Every Kueue Job is created suspended: until Kueue says why it holds one, the run is Pending as it
    was written when its Job was made, and nothing is patched or posted."""
    started = compute_status(run(), Observed(PROVIDERS, [ObservedAttempt(1, "claude", "r-a1")]), NOW)
    seen = observe_attempt(1, "claude", kueue_job(), [], False, workload, LOCAL_QUEUE)
    assert (seen.state, seen.waiting) == (SUSPENDED, None)
    again = compute_status(run(started.to_api()), Observed(PROVIDERS, [seen]), LATER)
    assert (again.phase, again.reason) == ("Pending", "Pending")
    decision = decide(run(started.to_api()), again)
    assert (decision.patch, decision.events) == (None, [])
    held = observe_attempt(1, "claude", kueue_job(), [], False, kueue_workload(QUOTA_SHORT), LOCAL_QUEUE)
    judged = decide(
        run(started.to_api()), compute_status(run(started.to_api()), Observed(PROVIDERS, [held]), LATER)
    )
    assert judged.patch is not None and [e.reason for e in judged.events] == ["Suspended"]


@pytest.mark.parametrize(
    ("pods", "workload", "why"),
    [
        ([pod("Running")], None, "Kueue suspended Job r-a1 again after its pod r-a1-xyz started"),
        (
            [pod("Failed", {"exitCode": 130, "message": message(130, "Cancelled")})],
            None,
            "Kueue suspended Job r-a1 again after its pod r-a1-xyz started",
        ),
        (
            [],
            kueue_workload(PREEMPTED),
            "Kueue evicted Workload job-r-a1-x (Preempted): Preempted to accommodate",
        ),
        (
            [],
            kueue_workload(QUOTA_SHORT, evictions=1),
            "Kueue evicted Workload job-r-a1-x after admitting it",
        ),
    ],
    ids=["its pod runs", "its runner reported the SIGTERM", "evicted, pod gone", "evicted once, requeued"],
)
def test_an_attempt_kueue_takes_back_ends_preempted_and_its_job_goes(
    pods: list[dict[str, Any]], workload: dict[str, Any] | None, why: str
) -> None:
    seen = observe_attempt(1, "claude", kueue_job(), pods, False, workload, LOCAL_QUEUE)
    assert (seen.state, seen.withdrawn) == (FINISHED, True)
    assert seen.result is not None
    assert (seen.result.exit_code, seen.result.reason) == (1, "Preempted")
    assert seen.result.message == f"{why}; attempt 1 is not run again"
    assert decide_deletions([seen], False) == ["r-a1"]  # before Kueue admits it and starts a second pod
    assert compute_next_attempt(Observed(PROVIDERS, [seen]), None) == 2  # a retry or fallback follows
    assert compute_next_attempt(Observed(PROVIDERS[:1], [seen]), None) is None  # never attempt 1 again


def test_a_suspended_job_under_spec_cancel_is_cancelled_not_preempted() -> None:
    seen = observe_attempt(1, "claude", kueue_job(), [pod("Running")], True, kueue_workload(PREEMPTED))
    assert (seen.state, seen.withdrawn) == (SUSPENDED, False)
    assert decide_deletions([seen], True) == ["r-a1"]


def test_a_job_suspended_again_after_its_recorded_pod_ran_is_preempted() -> None:
    """The pod went before the operator saw it: the durable record says it had one."""
    record = recorded_attempts(status_with(recorded(1, podName="r-a1-xyz")))
    again = observe_attempt(1, "claude", kueue_job(), [], False, kueue_workload(QUOTA_SHORT), LOCAL_QUEUE)
    merged = merge_attempts(record, {1: again}, False, NOW)
    assert (merged[0].state, merged[0].withdrawn) == (FINISHED, True)
    assert merged[0].result is not None and merged[0].result.reason == "Preempted"
    assert merged[0].result.message == (
        "Kueue suspended Job r-a1 again after its pod r-a1-xyz ran; attempt 1 is not run again"
    )
    never_ran = merge_attempts(recorded_attempts(status_with(recorded(1))), {1: again}, False, NOW)
    assert never_ran[0].state == SUSPENDED  # still waiting for its first admission


def test_a_job_multikueue_dispatches_waits_here_like_any_kueue_job_until_a_worker_admits_it() -> None:
    """What runs on a worker is observed there (controller/reconcile); here the Job only waits."""
    body = kueue_job()
    body["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    seen = observe_attempt(1, "claude", body, [], False, kueue_workload(QUOTA_SHORT), LOCAL_QUEUE)
    assert (seen.state, seen.withdrawn, seen.result) == (SUSPENDED, False, None)
    assert decide_deletions([seen], False) == []


def test_the_worker_cluster_an_attempt_ran_on_is_recorded_and_read_back() -> None:
    ended = ResultDocument(attempt=1, provider="claude", exit_code=3, reason="ProviderFailed")
    seen = ObservedAttempt(1, "claude", "r-a1", "r-a1-x", FINISHED, result=ended, cluster="worker-1")
    status = compute_status(run(), Observed(PROVIDERS, [seen]), NOW)
    assert status.attempts[0].cluster == "worker-1"
    (again,) = recorded_attempts(status)
    assert again.cluster == "worker-1"
    lost = merge_attempts([replace(again, state=RUNNING, result=None)], {}, False, NOW)
    assert (lost[0].cluster, lost[0].result.reason if lost[0].result else None) == ("worker-1", "JobLost")
