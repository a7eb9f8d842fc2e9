"""Waiting runs say why, on the real cluster with the operator as a process: a run a spent budget holds
is said to wait on it by `harnessctl logs -f` (a real subprocess), then followed as it runs. The pending
pod the scheduler cannot place is e2e's (e2e/test_waiting.py), with the chart as installed."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import Api, wait_until
from .operator_env import run_body
from .test_budgets import BUDGETS, budget_status, crds, create_budget  # noqa: F401  (the CRDs fixture)

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")
LOG_TIMEOUT = 60.0


class Follower:
    """`harnessctl logs -f` as a subprocess, its output read line by line as it comes."""

    def __init__(self, api: Api, name: str, kubeconfig: str) -> None:
        self.process = subprocess.Popen(
            [HARNESSCTL, "logs", name, "-f", "-n", api.ns, "--kubeconfig", kubeconfig],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, wanted: Callable[[str], bool], timeout: float = LOG_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if wanted(line):
                return line
        raise AssertionError(f"harnessctl logs -f printed no such line in {timeout} s: {self.seen}")

    def finish(self, timeout: float = LOG_TIMEOUT) -> int:
        code = self.process.wait(timeout=timeout)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code


@contextmanager
def follow(api: Api, name: str, kubeconfig: str) -> Iterator[Follower]:
    follower = Follower(api, name, kubeconfig)
    try:
        yield follower
    finally:
        if follower.process.poll() is None:
            follower.process.kill()
            follower.process.wait()


def test_a_run_a_spent_budget_holds_is_said_to_wait_on_it_then_followed_as_it_runs(
    api: Api, fake: Callable[..., None], kubeconfig_path: str
) -> None:
    fake("fake", "ok")
    create_budget(api, "one-run", {"period": "daily", "limits": {"maxRuns": 1}})
    wait_until(lambda: budget_status(api, "one-run").get("periodEnd"), timeout=30, what="budget status")
    api.create(run_body("first", {"provider": "fake", "prompt": "p"}))
    assert api.wait_finished("first")["phase"] == "Succeeded"
    api.create(run_body("held", {"provider": "fake", "prompt": "p"}))
    with follow(api, "held", kubeconfig_path) as follower:
        line = follower.wait_for(lambda text: text.startswith("… waiting: BudgetExhausted: "))
        assert "HarnessBudget one-run: 1 of maxRuns 1 runs started" in line, follower.seen
        api.custom.delete_namespaced_custom_object(GROUP, VERSION, api.ns, BUDGETS, "one-run")
        assert follower.finish(timeout=120) == 0, follower.seen
        assert any(text.startswith("▶ attempt 1/1 with fake") for text in follower.seen), follower.seen
        assert follower.seen[-1].startswith("Succeeded (Succeeded, exit 0)"), follower.seen
