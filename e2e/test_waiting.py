"""Issue 57 on the cluster, with the shipped images: a pending run says why (the scheduler's reason in its
status and in `harnessctl logs -f`), and a budget says what bound (a 0.03 USD budget whose reservation is
below one request's worst case: the run's status names the budget, what it left, and its charge)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import Runs, wait_until
from .test_model_gateway import vendors  # noqa: F401  (the release with the gateway holding the keys)

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


def test_a_budget_says_what_bound(vendors: dict[str, Any], runs: Runs) -> None:  # noqa: F811
    """The issue's trial: a 0.03 USD budget stopped a run with nothing spent, and nothing said why."""
    budget = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessBudget",
        "metadata": {"name": "tight"},
        "spec": {"period": "daily", "limits": {"maxCostUSD": 0.03}},
    }
    runs.custom.create_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessbudgets", budget)
    runs.create("capped", {"provider": "claude", "prompt": "Say hello.", "limits": {"timeoutSeconds": 180}})
    status = runs.wait_finished("capped")
    assert (status["phase"], status["reason"]) == ("Failed", "CostLimitExceeded"), runs.describe("capped")
    message = status["message"]
    assert (
        "at the 0.03 USD the run reserved from HarnessBudget tight (status.budget.reservedUSD)" in message
    ), message
    assert "below one request's worst case in USD" in message, message
    assert "raise HarnessBudget tight's limits.maxCostUSD" in message, message
    charge = status["budget"]["charge"]
    assert charge["basis"] == "Metered" and charge["amountUSD"] == status["usage"]["costUSD"], status
    assert charge["amountUSD"] < 0.03, charge

    def settled() -> dict[str, Any] | None:
        """The budget's status once the run is counted and its reservation given back (its spend may be 0:
        a falsy figure is no answer to wait on)."""
        got = runs.custom.get_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessbudgets", "tight")
        budget_status = got.get("status") or {}
        return budget_status if budget_status.get("runs") and not budget_status.get("reservedUSD") else None

    spent = wait_until(settled, 60, "the budget to settle the run").get("spentUSD", 0.0)
    assert spent == pytest.approx(charge["amountUSD"])
    print(f"\nthe run's message: {message}\nits charge: {charge}")
