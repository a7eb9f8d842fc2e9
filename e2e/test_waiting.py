"""Issue 57 on the cluster, with the shipped images: a pending run says why (the scheduler's reason in its
status and in `harnessctl logs -f`). A budget that says what bound: e2e/test_readme_path.py, from the
README's block."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .conftest import Runs, wait_until

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")


@contextmanager
def following(runs: Runs, name: str) -> Iterator[list[str]]:
    """`harnessctl logs -f NAME` as a subprocess; the lines it printed so far."""
    process = subprocess.Popen(
        [HARNESSCTL, "logs", name, "-f", "-n", runs.ns],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        lines.extend(line.rstrip("\n") for line in process.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
        process.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_pending_run_says_why(runs: Runs) -> None:
    sandbox = {"resources": {"requests": {"cpu": "512"}}}  # more than any node of the cluster has
    runs.create("greedy", {"provider": "claude", "prompt": "Say hello.", "sandbox": sandbox})

    def said() -> str | None:
        message = (runs.condition("greedy", "Succeeded") or {}).get("message") or ""
        return message if "Insufficient cpu" in message else None

    message = wait_until(said, 90, "the scheduler's reason in the run's status")
    assert "the scheduler cannot place pod greedy-a1-" in message and "(Unschedulable)" in message, message
    with following(runs, "greedy") as lines:
        waiting = wait_until(
            lambda: next((line for line in lines if line.startswith("… waiting: Pending: ")), None),
            60,
            "harnessctl logs -f to say why the run waits",
        )
        assert "Insufficient cpu" in waiting, lines
        runs.patch("greedy", {"cancel": True})
    assert any(line.startswith("Cancelled (Cancelled") for line in lines), lines
    print("\nharnessctl logs -f of a run no node can hold:\n" + "\n".join(lines))
