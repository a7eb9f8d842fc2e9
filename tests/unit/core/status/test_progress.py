"""Progress in status (pure): the figures so far while an attempt runs, when a write is worth it, when a
run has a log to read, and the totals it ends with."""

from datetime import UTC, datetime

import pytest

from harness_operator.api.v1alpha1 import Attempt, Condition, HarnessRun, HarnessRunStatus, Progress, Usage
from harness_operator.contract.events import Event
from harness_operator.contract.result import ResultDocument
from harness_operator.core.status.observed import FINISHED, Observed, ObservedAttempt
from harness_operator.core.status.progress import (
    compute_progress,
    format_duration,
    is_progress_changed,
    is_progress_wanted,
)
from harness_operator.core.status.status import compute_status

NOW = datetime(2026, 11, 29, 12, 2, 5, tzinfo=UTC)


RUNNING = [Condition(type="Succeeded", status="Unknown", reason="Running")]


def running(**extra) -> HarnessRunStatus:
    fields = {"conditions": RUNNING, **extra}
    return HarnessRunStatus(
        phase="Running",
        start_time="2026-11-29T12:00:00Z",
        attempts=[Attempt(index=1, provider="claude", pod_name="r-1-abc")],
        **fields,
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (45.9, "45s"), (125, "2m5s"), (3780, "1h3m"), (-3, "0s")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_the_first_attempts_figures_come_from_its_latest_progress_event():
    latest = Event("progress", turns=3, tokens=1200, cost_usd=0.04, last_tool="Bash")
    assert compute_progress(running(), 1, latest, NOW) == Progress(
        attempt=1,
        turns=3,
        tokens=1200,
        cost_usd=0.04,
        last_tool="Bash",
        duration="2m5s",
        update_time="2026-11-29T12:02:05Z",
    )


def test_a_fallback_attempt_adds_to_what_the_failed_attempts_cost():
    status = running(usage=Usage(input_tokens=1000, output_tokens=100, turns=2, cost_usd=0.5))
    progress = compute_progress(status, 2, Event("progress", turns=1, tokens=300, cost_usd=0.1), NOW)
    assert (progress.attempt, progress.turns, progress.tokens, progress.cost_usd) == (2, 3, 1400, 0.6)


def test_no_event_yet_keeps_the_last_tool_and_shows_only_what_is_known():
    status = running(progress=Progress(attempt=1, last_tool="Read"))
    progress = compute_progress(status, 1, None, NOW)
    assert (progress.turns, progress.tokens, progress.cost_usd, progress.last_tool) == (
        None,
        None,
        None,
        "Read",
    )
    # A result event (the attempt just ended, status does not say so yet) still counts.
    ended = compute_progress(status, 1, Event("result", turns=4, tokens=10, cost_usd=0.2, exit_code=0), NOW)
    assert (ended.turns, ended.cost_usd, ended.last_tool) == (4, 0.2, "Read")


def test_only_moved_figures_are_worth_a_write():
    old = Progress(attempt=1, turns=2, tokens=10, cost_usd=0.1, duration="5s", update_time="a")
    assert not is_progress_changed(old, old.model_copy(update={"duration": "10s", "update_time": "b"}))
    assert is_progress_changed(old, old.model_copy(update={"turns": 3}))
    assert is_progress_changed(old, old.model_copy(update={"last_tool": "Bash"}))
    assert is_progress_changed(None, old)


@pytest.mark.parametrize(
    ("status", "wanted"),
    [
        (running(), True),
        (None, False),
        # The condition decides, not the phase (a summary of it).
        (running(conditions=[Condition(type="Succeeded", status="Unknown", reason="Pending")]), False),
        (HarnessRunStatus(phase="Running", conditions=RUNNING), False),
        (
            HarnessRunStatus(conditions=RUNNING, attempts=[Attempt(index=1, provider="c")]),
            False,
        ),  # no pod yet
        (
            HarnessRunStatus(
                conditions=RUNNING, attempts=[Attempt(index=1, provider="c", pod_name="p", exit_code=1)]
            ),
            False,
        ),
    ],
)
def test_progress_is_read_only_while_an_attempt_runs_in_a_pod(status, wanted):
    assert is_progress_wanted(status) is wanted


def test_the_final_status_carries_the_totals_and_the_duration():
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "n", "generation": 1},
            "spec": {"provider": "claude", "prompt": "p"},
            "status": running(
                progress=Progress(attempt=1, turns=2, cost_usd=0.01, last_tool="Edit")
            ).to_api(),
        }
    )
    result = {
        "attempt": 1,
        "provider": "claude",
        "exitCode": 0,
        "usage": {"inputTokens": 100, "outputTokens": 20, "cacheReadTokens": 5, "turns": 3, "costUSD": 0.02},
    }
    observed = Observed(
        ["claude"],
        [
            ObservedAttempt(
                1, "claude", "r-1", "r-1-abc", FINISHED, result=ResultDocument.model_validate(result)
            )
        ],
    )
    status = compute_status(run, observed, NOW)
    assert status.progress == Progress(
        attempt=1,
        turns=3,
        tokens=125,
        cost_usd=0.02,
        last_tool="Edit",
        duration="2m5s",
        update_time="2026-11-29T12:02:05Z",
    )
    # While the run is in flight, compute_status keeps what the progress reader wrote.
    observed_running = Observed(["claude"], [ObservedAttempt(1, "claude", "r-1", "r-1-abc", "Running")])
    assert compute_status(run, observed_running, NOW).progress == run.status.progress
