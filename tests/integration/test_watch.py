"""Watching runs on the real cluster: status.progress moves while the fake agent's turns run (read from
the pod log, no credentials in the sandbox), `harnessctl logs -f` renders the run turn by turn while it
runs, and `kubectl harness logs` (the plugin) tells a finished run's story, fallback included."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import watch

from ..lib import processes
from .conftest import Api, wait_until
from .operator_env import OperatorProcess, run_body

BIN = Path(sys.executable).parent
PRICING = {"fake-model": {"input": 1000, "output": 1000}}  # USD per million: cost moves with each turn


def turns_provider(fake: Callable[..., None], name: str, turns: int, seconds: float) -> None:
    env = [
        {"name": "FAKE_MODE", "value": "turns"},
        {"name": "FAKE_TURNS", "value": str(turns)},
        {"name": "FAKE_TURN_SECONDS", "value": str(seconds)},
    ]
    fake(name, "turns", env=env, pricing=PRICING)


class Follower:
    """`harnessctl logs RUN -f` as a process; each line it prints is kept with the run's phase at the
    moment the line was read."""

    def __init__(self, api: Api, kubeconfig: str, run: str) -> None:
        self.api, self.run = api, run
        self.lines: list[tuple[str, str]] = []
        argv = [str(BIN / "harnessctl"), "logs", run, "-f", "-n", api.ns, "--kubeconfig", kubeconfig]
        self.proc = processes.start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((line.rstrip("\n"), str(self.api.status(self.run).get("phase"))))

    def phase_when(self, text: str) -> str | None:
        return next((phase for line, phase in self.lines if text in line), None)

    def wait(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=120)
        self.reader.join(timeout=10)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_progress_moves_in_status_and_logs_follow_turn_by_turn(
    api: Api, fake: Callable[..., None], operator: OperatorProcess, kubeconfig_path: str
) -> None:
    turns_provider(fake, "turns", turns=4, seconds=4)
    before = operator.metrics()
    api.create(run_body("watched", {"provider": "turns", "prompt": "work"}))
    follower = Follower(api, kubeconfig_path, "watched")
    started = time.monotonic()

    def in_flight_progress() -> dict[str, Any] | None:
        status = api.status("watched")
        progress = status.get("progress") or {}
        moved = (progress.get("turns") or 0) >= 2 and (progress.get("costUSD") or 0) > 0
        return progress if status.get("phase") == "Running" and moved else None

    seen = wait_until(
        in_flight_progress,
        timeout=90,
        what="status.progress to move while the run runs",
        diagnose=lambda: (
            json.dumps(api.status("watched"), indent=1) + "\n" + operator.log_path.read_text()[-3000:]
        ),
    )
    assert seen["lastTool"] == "Read" and seen["attempt"] == 1 and seen["tokens"] >= 320
    status = api.wait_finished("watched")
    running_seconds = time.monotonic() - started
    code, stderr = follower.wait()
    assert code == 0, stderr
    text = "\n".join(line for line, _ in follower.lines)
    print(f"\nharnessctl logs -f:\n{text}")
    assert "▶ attempt 1/1 with turns" in text
    assert [int(n) for n in re.findall(r"● turn (\d+)", text)] == [1, 2, 3, 4]
    assert "⚙ Read: /workspace/f1.py" in text and "Step 4: reading." in text
    assert "■ attempt 1 succeeded (exit 0)" in text
    assert text.splitlines()[-1].startswith("Succeeded (Succeeded, exit 0); 4 turns")
    assert "999" not in text  # the agent's imitation of a runner event stays the agent's stderr
    # Turn by turn: the first turns were on screen while the run was still running.
    assert follower.phase_when("● turn 1") == "Running"
    assert follower.phase_when("● turn 2") == "Running"
    # At the end, progress holds the run's totals.
    progress = status["progress"]
    assert progress["turns"] == status["usage"]["turns"] == 4
    assert progress["costUSD"] == status["usage"]["costUSD"] == 0.01
    assert progress["duration"].endswith("s")
    after = operator.metrics()
    reads = metric(after, "harness_progress_log_reads_total") - metric(
        before, "harness_progress_log_reads_total"
    )
    read_bytes = metric(after, "harness_progress_log_bytes_total") - metric(
        before, "harness_progress_log_bytes_total"
    )
    writes = metric(after, "harness_progress_writes_total") - metric(before, "harness_progress_writes_total")
    print(
        f"measured: one running run for {running_seconds:.0f}s: {reads:.0f} pod log reads "
        f"({read_bytes / max(reads, 1):.0f} bytes each), {writes:.0f} status.progress writes"
    )
    assert 1 <= reads <= running_seconds / 5 + 3  # about one read per 5 s tick, only while it runs


def test_the_plugin_tells_a_finished_runs_story_with_its_fallback(
    api: Api, fake: Callable[..., None], kubeconfig_path: str, cluster_bin_dir: Path
) -> None:
    fake("broken", "fail")
    turns_provider(fake, "turns", turns=2, seconds=0)
    api.create(run_body("told", {"provider": "broken", "prompt": "p", "fallback": [{"provider": "turns"}]}))
    assert api.wait_finished("told")["phase"] == "Succeeded"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "KUBECONFIG": kubeconfig_path}
    kubectl = str(cluster_bin_dir / "kubectl")
    view = subprocess.run(
        [kubectl, "harness", "logs", "told", "-n", api.ns],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert view.returncode == 0, view.stderr
    lines = view.stdout.splitlines()
    assert lines[0] == "▶ attempt 1/2 with broken"
    assert "■ attempt 1 failed: ProviderFailed (exit 3); usage unknown" in lines
    assert "↪ fallback: attempt 2/2 with turns" in lines
    assert lines[-1].startswith("Succeeded (Succeeded, exit 0)")
    raw = subprocess.run(
        [kubectl, "harness", "logs", "told", "-n", api.ns, "-o", "jsonl"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [json.loads(line) for line in raw.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds.count("attempt") == 2 and kinds.count("result") == 2 and kinds[-1] == "run"
    assert [e["turn"] for e in events if e["kind"] == "turn"] == [1, 2]
    assert events[-1]["phase"] == "Succeeded"


def printed_row(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What `kubectl get hrun -w` prints of a run, Age left out: the CRD's default printer columns."""
    status = obj.get("status") or {}
    attempts = status.get("attempts") or [{}]
    progress = status.get("progress") or {}
    return (
        obj["spec"].get("provider"),
        attempts[-1].get("provider"),
        status.get("phase"),
        status.get("reason"),
        progress.get("costUSD"),
    )


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    """The status with every time stamp dropped: what a write changes besides the clock."""
    times = {"lastTransitionTime", "startTime", "completionTime"}
    if isinstance(status, dict):
        return {k: without_times(v) for k, v in status.items() if k not in times}
    if isinstance(status, list):
        return [without_times(v) for v in status]  # type: ignore[return-value]
    return status


def test_kubectl_get_watch_prints_a_quick_failing_run_once_per_change(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    fake("quick-fail", "fail")
    custom = api.custom
    listed = custom.list_namespaced_custom_object("agentharness.dev", "v1alpha1", api.ns, "harnessruns")
    events: list[tuple[str, dict[str, Any]]] = []
    done = threading.Event()

    def follow() -> None:
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            "agentharness.dev",
            "v1alpha1",
            api.ns,
            "harnessruns",
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=120,
        )
        for event in stream:
            events.append((event["type"], event["object"]))
            if (event["object"].get("status") or {}).get("completionTime"):
                done.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    api.create(run_body("quick", {"provider": "quick-fail", "prompt": "p"}))
    assert done.wait(120), [e[0] for e in events]
    time.sleep(3)  # writes after the end (finalizers, annotations) would come now
    events = list(events)
    rows = [printed_row(obj) for _, obj in events]
    repeated = [rows[i] for i in range(1, len(rows)) if rows[i] == rows[i - 1]]
    print(
        f"\nmeasured: a quick-failing run: {len(events)} watch events, {len(repeated)} repeat the row before"
    )
    for kind, obj in events:
        print(f"  {kind} {printed_row(obj)} {sorted(without_times(obj.get('status') or {}))}")
    # No finalizer comes and goes (two writes each run, before progress ticks left kopf's timers).
    assert not any(obj["metadata"].get("finalizers") for _, obj in events)
    # Every write changes more than times: no condition is rewritten only to move its transition time.
    for (_, before), (_, after) in itertools.pairwise(events):
        changed = without_times(before.get("status") or {}) != without_times(after.get("status") or {})
        annotated = before["metadata"].get("annotations") != after["metadata"].get("annotations")
        assert changed or annotated, after
    # What repeats a row: kopf's annotation after its create handler, and the pod's name (and start),
    # which `-o wide` readers and `harnessctl logs` use but no default column shows.
    assert len(repeated) <= 2, events
