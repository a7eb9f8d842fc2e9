"""Watching a live Claude Code run (the real CLI in its catalog image, a slow Anthropic stub that makes it
call a tool three times): `harnessctl logs -f` prints it turn by turn while it runs, and status.progress
moves before the run ends."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import Runs, kubectl, wait_until
from .test_agents import ROUTES, agent_run

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")


def test_logs_follow_a_live_claude_code_run_turn_by_turn(runs: Runs, stub: Callable[..., Any]) -> None:
    server = stub("anthropic", "tool_turns", delay=3.0)
    runs.create("watched", agent_run(runs, "claude", ROUTES["claude"](server.base_url), server.port))
    argv = [HARNESSCTL, "logs", "watched", "-f", "-n", runs.ns]
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[tuple[str, dict[str, Any]]] = []  # each line, with the run's status when it was read

    def read() -> None:
        assert follower.stdout is not None
        for line in follower.stdout:
            seen.append((line.rstrip("\n"), runs.get("watched").get("status") or {}))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def progress_while_running() -> dict[str, Any] | None:
        current = runs.get("watched").get("status") or {}
        progress = current.get("progress") or {}
        return progress if current.get("phase") == "Running" and progress.get("turns") else None

    try:
        live = wait_until(progress_while_running, 150, "status.progress to move while Claude Code runs")
    except AssertionError:
        operator_log = kubectl(
            "logs", "-n", "harness-system", "deploy/harness-operator", "--tail", "40", check=False
        )
        print("\n".join(line for line, _ in seen), runs.describe("watched"), operator_log.stdout, sep="\n")
        raise
    status = runs.wait_finished("watched")
    assert follower.wait(timeout=120) == 0, follower.stderr.read() if follower.stderr else ""
    reader.join(timeout=10)
    text = "\n".join(line for line, _ in seen)
    print(f"\nharnessctl logs -f (Claude Code, stub answering every 3 s):\n{text}")
    assert status["phase"] == "Succeeded", runs.describe("watched")
    assert "▶ attempt 1/1 with claude" in text
    turns = [line for line, _ in seen if line.startswith("● turn ")]
    assert turns == ["● turn 1", "● turn 2", "● turn 3", "● turn 4"]
    assert text.count("⚙ Read: /nonexistent-harness-stub/file.txt") == 3
    assert "Hello from the Anthropic stub." in text
    assert "■ attempt 1 succeeded (exit 0)" in text
    assert seen[-1][0].startswith("Succeeded (Succeeded, exit 0)")
    # Live: turn 2 was printed while the run was still running.
    when_turn_2 = next(s for line, s in seen if line == "● turn 2")
    assert when_turn_2.get("phase") == "Running"
    # Status moved too, from the pod log the operator reads; at the end it holds the run's totals.
    assert live["attempt"] == 1 and live["tokens"] > 0
    assert status["progress"]["turns"] == status["usage"]["turns"]
    assert status["progress"]["costUSD"] == status["usage"]["costUSD"]
