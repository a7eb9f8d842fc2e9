"""The run view: pods by attempt, when a log can be read, attempts told from status when their log is
gone, the run's outcome line; and `harnessctl run` showing the live view only on a terminal."""

import os
import pty
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from harness_operator.api.v1alpha1 import Attempt, HarnessRunStatus, Usage
from harness_operator.cli.follow import follow_run
from harness_operator.contract.events import render_events
from harness_operator.core.objects.naming import LABEL_ATTEMPT
from harness_operator.core.status.watch import (
    build_attempt_events,
    build_pods_by_attempt,
    build_run_event,
    build_waiting_event,
    is_attempt_over,
    is_log_readable,
    is_unclaimed,
)

ROOT = Path(__file__).parents[4]


def pod(name: str, attempt: str, created: str, state: dict | None = None) -> dict:
    statuses = [{"name": "runner", "state": state}] if state is not None else []
    return {
        "metadata": {"name": name, "labels": {LABEL_ATTEMPT: attempt}, "creationTimestamp": created},
        "status": {"containerStatuses": statuses},
    }


def test_pods_by_attempt_keeps_the_newest_and_ignores_foreign_labels():
    pods = [
        pod("b", "1", "2026-01-01T00:00:02Z"),
        pod("a", "1", "2026-01-01T00:00:01Z"),
        pod("c", "2", "2026-01-01T00:00:03Z"),
        pod("x", "one", "2026-01-01T00:00:04Z"),
    ]
    assert {i: p["metadata"]["name"] for i, p in build_pods_by_attempt(pods).items()} == {1: "b", 2: "c"}


def test_a_log_is_readable_once_the_runner_container_started():
    assert not is_log_readable(pod("p", "1", "t"))
    assert not is_log_readable(pod("p", "1", "t", {"waiting": {"reason": "ContainerCreating"}}))
    assert is_log_readable(pod("p", "1", "t", {"running": {}}))
    assert is_log_readable(pod("p", "1", "t", {"terminated": {"exitCode": 0}}))
    assert not is_attempt_over(pod("p", "1", "t", {"running": {}}))
    assert is_attempt_over(pod("p", "1", "t", {"terminated": {"exitCode": 0}}))


def test_an_attempt_whose_log_is_gone_is_told_from_status_and_the_output():
    failed = Attempt(
        index=1,
        provider="claude",
        exit_code=1,
        reason="ProviderFailed",
        message="the agent exited with code 1",
    )
    done = Attempt(
        index=2,
        provider="codex",
        exit_code=0,
        session_id="s-2",
        model="gpt-5",
        usage=Usage(input_tokens=1000, output_tokens=50, turns=3, cost_usd=0.02),
    )
    lines = render_events(
        [*build_attempt_events(failed, 2), *build_attempt_events(done, 2, "Fixed it.\nDetails")]
    )
    assert lines == [
        "▶ attempt 1/2 with claude",
        "■ attempt 1 failed: ProviderFailed (exit 1); usage unknown\n  the agent exited with code 1",
        "↪ fallback: attempt 2/2 with codex",
        "  session s-2, model gpt-5",
        "  Fixed it. …",
        "■ attempt 2 succeeded (exit 0); 3 turns, 1,050 tokens, $0.0200",
    ]
    # An attempt still running has no result to tell yet.
    assert [e.kind for e in build_attempt_events(Attempt(index=1, provider="claude"), 1)] == ["attempt"]


def test_a_retry_says_so_and_a_number_a_retry_did_not_need_is_skipped():
    """Attempt 1 refused (no retry cures it), the fallback is attempt 3 of 4: `harnessctl logs` tells
    both from status, the second as a fallback, and a retry as a retry."""
    spec = {"provider": "claude", "prompt": "p", "fallback": [{"provider": "codex"}], "retry": {"limit": 1}}
    attempts = [
        {"index": 1, "provider": "claude", "exitCode": 1, "reason": "AuthFailed"},
        {"index": 3, "provider": "codex", "exitCode": 1, "reason": "RateLimited"},
        {"index": 4, "provider": "codex", "exitCode": 0},
    ]
    run = {
        "metadata": {"name": "r", "namespace": "ns", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
        "status": {
            "phase": "Succeeded",
            "reason": "Succeeded",
            "exitCode": 0,
            "attempts": attempts,
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
            "changes": {"files": 2, "insertions": 3, "deletions": 1, "branch": "harness/r"},
        },
    }

    class Kube:
        def fetch_run(self, namespace: str, name: str) -> dict:
            return run

        def fetch_pods(self, namespace: str, name: str) -> list:
            return []

        def fetch_config_map(self, namespace: str, name: str) -> None:
            return None

    events: list = []
    assert follow_run(Kube(), "ns", "r", False, events.append) == 0  # type: ignore[arg-type]
    starts = [line for line in render_events(events) if line[0] in "▶↪↻"]
    assert starts == [
        "▶ attempt 1/4 with claude",
        "↪ fallback: attempt 3/4 with codex",
        "↻ retry 1: attempt 4/4 with codex",
    ]
    assert render_events(events)[-1] == (
        "Succeeded (Succeeded, exit 0); usage unknown\n  change: 2 files changed (+3 -1), pushed to branch harness/r"
    )


def test_the_run_outcome_line():
    status = HarnessRunStatus(
        phase="Failed", reason="CostLimitExceeded", exit_code=124, message="cost crossed maxCostUSD 1"
    )
    assert render_events([build_run_event(status)]) == [
        "Failed (CostLimitExceeded, exit 124); usage unknown\n  cost crossed maxCostUSD 1"
    ]
    assert render_events([build_run_event(None)]) == ["Pending (Pending, exit None); usage unknown"]
    queued = HarnessRunStatus(phase="Pending", reason="Queued", message="2 runs of the namespace before it")
    assert render_events([build_run_event(queued)]) == [
        "Pending (Queued, exit None); usage unknown\n  2 runs of the namespace before it"
    ]


def test_a_run_no_operator_claims_says_where_to_look():
    now = datetime(2026, 1, 1, 12, 0, 31, tzinfo=UTC)
    created = {"metadata": {"creationTimestamp": "2026-01-01T12:00:00Z"}}
    assert is_unclaimed(created, now)
    assert not is_unclaimed(created, datetime(2026, 1, 1, 12, 0, 29, tzinfo=UTC))  # an operator may yet
    assert not is_unclaimed({**created, "status": {"phase": "Pending"}}, now)
    assert not is_unclaimed({"metadata": {}}, now)
    assert not is_unclaimed({"metadata": {"creationTimestamp": "not a time"}}, now)  # never a crash
    (line,) = render_events([build_run_event(None, "team-a")])
    assert line.startswith("Pending (Pending, exit None); usage unknown\n  no operator has written")
    assert 'namespace "team-a" one an operator watches' in line and "watchNamespaces" in line


def run_demo(tty: bool) -> str:
    """`harnessctl run` on the demo with stdout a terminal (a pty) or a pipe; stdout and stderr together."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [str(Path(sys.executable).parent / "harnessctl"), "run", str(ROOT / "examples/demo/demo-run.yaml")]
    if not tty:
        done = subprocess.run(argv, capture_output=True, env=env, timeout=60, check=True)
        return (done.stdout + done.stderr).decode()
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, stdout=child, stderr=child, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(main)
    return b"".join(chunks).decode()


def test_harnessctl_run_shows_the_live_view_on_a_terminal_only():
    on_tty = run_demo(tty=True)
    assert "▶ attempt 1/1 with demo" in on_tty and "● turn 1" in on_tty
    piped = run_demo(tty=False)
    assert "● turn" not in piped and "@harness-event" not in piped


def condition(status: str, reason: str, message: str = "") -> dict:
    return {"type": "Succeeded", "status": status, "reason": reason, "message": message}


def test_following_a_waiting_run_says_why_it_waits_each_time_that_changes():
    """`harnessctl logs -f` on a run held by a budget, then by the scheduler, then run and done: each
    reason once, when it changes, then the attempt and the outcome."""
    budget = condition("Unknown", "BudgetExhausted", "HarnessBudget team: 2 of maxRuns 2 runs started")
    unscheduled = condition(
        "Unknown",
        "Pending",
        "attempt 1/1 waits: the scheduler cannot place pod r-a1-x (Unschedulable): "
        "0/1 nodes are available: 1 Insufficient cpu.",
    )
    done = {
        "phase": "Succeeded",
        "reason": "Succeeded",
        "exitCode": 0,
        "attempts": [{"index": 1, "provider": "claude", "exitCode": 0}],
        "conditions": [condition("True", "Succeeded")],
    }
    statuses = [
        {"phase": "Pending", "conditions": [budget]},
        {"phase": "Pending", "conditions": [budget]},  # the same reason: said once
        {"phase": "Pending", "conditions": [unscheduled]},
        {"phase": "Running", "conditions": [condition("Unknown", "Running", "attempt 1/1 is running")]},
        done,
    ]
    woken: list = []

    class Kube:
        def watch_run_and_pods(self, namespace: str, name: str, changed) -> None:
            woken.append(changed)

        def fetch_run(self, namespace: str, name: str) -> dict:
            woken[0]()  # each read finds the next status: the follower does not wait for the timer
            return {
                "metadata": {"name": "r", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"provider": "claude", "prompt": "p"},
                "status": statuses.pop(0),
            }

        def fetch_pods(self, namespace: str, name: str) -> list:
            return []

        def fetch_config_map(self, namespace: str, name: str) -> None:
            return None

    events: list = []
    assert follow_run(Kube(), "ns", "r", True, events.append) == 0  # type: ignore[arg-type]
    assert render_events(events) == [
        "… waiting: BudgetExhausted: HarnessBudget team: 2 of maxRuns 2 runs started",
        "… waiting: Pending: attempt 1/1 waits: the scheduler cannot place pod r-a1-x (Unschedulable): 0/1 "
        "nodes are available: 1 Insufficient cpu.",
        "▶ attempt 1/1 with claude",
        "■ attempt 1 succeeded (exit 0); usage unknown",
        "Succeeded (Succeeded, exit 0); usage unknown",
    ]
    assert statuses == []


def test_a_waiting_event_only_while_the_run_waits():
    assert build_waiting_event(None) is None
    running = HarnessRunStatus.model_validate({"conditions": [condition("Unknown", "Running", "r")]})
    assert build_waiting_event(running) is None
    ended = HarnessRunStatus.model_validate({"conditions": [condition("False", "Cancelled", "c")]})
    assert build_waiting_event(ended) is None
    queued = HarnessRunStatus.model_validate({"conditions": [condition("Unknown", "Queued", "2 before it")]})
    waiting = build_waiting_event(queued)
    assert waiting is not None
    assert render_events([waiting]) == ["… waiting: Queued: 2 before it"]
