"""What every fault test checks: each run ends exactly once, no Job is created twice, nothing reported is
lost; watches held for the whole test (re-opened when the API server goes away) record the evidence."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, watch

from harness_operator.api.v1alpha1 import GROUP, VERSION

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import definition_body, run_body

TERMINAL = ("Succeeded", "Failed", "Cancelled")


@dataclass
class Recorder:
    """Watches the namespace's Jobs and runs from before the burst to the end of the test."""

    api: Api
    job_uids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    run_history: dict[str, list[tuple[str, str | None]]] = field(default_factory=lambda: defaultdict(list))
    rewatches: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Recorder:
        for target in (self._watch_jobs, self._watch_runs):
            thread = threading.Thread(target=self._forever, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _forever(self, target: Any) -> None:
        """Re-open the watch until the test ends: the API server restarts under it in some tests."""
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                target()
            self.rewatches += 1
            self._stop.wait(0.5)

    def _watch_jobs(self) -> None:
        for event in watch.Watch().stream(
            self.api.batch.list_namespaced_job, self.api.ns, timeout_seconds=5, _request_timeout=10
        ):
            job = event["object"]  # a re-list replays ADDED for the same uid: count uids, not events
            self.job_uids[job.metadata.name].add(job.metadata.uid)
            if self._stop.is_set():
                return

    def _watch_runs(self) -> None:
        for event in watch.Watch().stream(
            self.api.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.api.ns,
            "harnessruns",
            timeout_seconds=5,
            _request_timeout=10,
        ):
            run = event["object"]
            status = run.get("status") or {}
            seen = (status.get("phase") or "", status.get("completionTime"))
            history = self.run_history[run["metadata"]["name"]]
            if not history or history[-1] != seen:
                history.append(seen)
            if self._stop.is_set():
                return

    def problems(self) -> list[str]:
        """Jobs created twice, runs whose status went back after they finished."""
        found = [
            f"Job {name} created {len(uids)} times" for name, uids in self.job_uids.items() if len(uids) > 1
        ]
        for name, history in self.run_history.items():
            ended = [i for i, (phase, _) in enumerate(history) if phase in TERMINAL]
            if ended and len(set(history[ended[0] :])) > 1:
                found.append(f"run {name} changed after it finished: {history[ended[0] :]}")
        return found


def terminal_events(api: Api, finals: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The reasons of the Events that announce each run's end (one expected per run); `finals` gives each
    run's final reason, else it is read from the runs that still exist."""
    events: dict[str, list[str]] = defaultdict(list)
    if finals is None:
        finals = {
            run["metadata"]["name"]: (run.get("status") or {}).get("reason")
            for run in api.custom.list_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessruns")[
                "items"
            ]
        }
    for event in api.core.list_namespaced_event(api.ns).items:
        name = event.involved_object.name
        if event.involved_object.kind == "HarnessRun" and finals.get(name) and event.reason == finals[name]:
            events[name].extend([event.reason] * (event.count or 1))
    return events


def make_fallback_providers(api: Api, image: str) -> None:
    """`broken` fails (exit 3) and `fake` answers: a run of `broken` with fallback `fake` takes two Jobs."""
    api.create(definition_body("broken", image, "fail"))
    api.create(definition_body("fake", image, "ok"))


def create_burst(api: Api, names: Iterable[str], **spec: Any) -> None:
    """Runs that fail on their first provider and succeed on the fallback, each with its own prompt."""
    for name in names:
        body = run_body(
            name,
            {"provider": "broken", "prompt": f"prompt of {name}", "fallback": [{"provider": "fake"}], **spec},
        )
        for attempt in range(60):  # the API server may be restarting under the burst
            try:
                api.create(body)
                break
            except client.ApiException as exc:
                if exc.status == 409:
                    break
                time.sleep(0.5 + attempt * 0.1)
            except Exception:
                time.sleep(0.5 + attempt * 0.1)


def burst_losses(api: Api, names: Iterable[str]) -> list[str]:
    """Each run of `create_burst` must have succeeded on its fallback with everything the fake agent
    printed: output, usage and cost in status and the full output in its ConfigMap."""
    found = []
    for name in names:
        status = api.status(name)
        want = f"answer from fake-agent: prompt of {name}"
        attempts = [(a.get("provider"), a.get("exitCode")) for a in status.get("attempts", [])]
        if status.get("phase") != "Succeeded" or attempts != [("broken", 3), ("fake", 0)]:
            found.append(f"run {name}: {status.get('phase')} {status.get('reason')} attempts {attempts}")
            continue
        # The answering attempt's own figures; the run's total has the tokens, and no cost because the
        # failed attempt's cost is unknown (an unknown part makes the sum unknown, by design).
        usage = status["attempts"][-1].get("usage") or {}
        total = status.get("usage") or {}
        if (usage.get("inputTokens"), usage.get("outputTokens"), usage.get("costUSD")) != (10, 5, 0.01):
            found.append(f"run {name}: answering attempt's usage {usage}")
        if (total.get("inputTokens"), total.get("outputTokens")) != (10, 5):
            found.append(f"run {name}: usage {total}")
        if (status.get("output") or {}).get("excerpt") != want:
            found.append(f"run {name}: output {status.get('output')}")
            continue
        cm = api.core.read_namespaced_config_map(status["output"]["configMapName"], api.ns)
        if (cm.data or {}).get("output") != want:
            found.append(f"run {name}: ConfigMap output {(cm.data or {}).get('output')!r}")
    return found


def finished(recorder: Recorder, names: list[str]) -> int:
    """How many of `names` the run watch has seen end."""
    return sum(1 for n in names if (h := recorder.run_history.get(n)) and h[-1][0] in ("Succeeded", "Failed"))


def wait_all_ended(recorder: Recorder, names: list[str]) -> None:
    wait_until(
        lambda: finished(recorder, names) == len(names),
        timeout=900,
        what=f"all {len(names)} runs to end",
        diagnose=lambda: f"{finished(recorder, names)} ended",
    )


def exactly_once(api: Api, recorder: Recorder, names: list[str], jobs_per_run: int) -> list[str]:
    """Everything the fault tests require of a finished burst, as a list of problems (empty: all good)."""
    found = recorder.problems()
    events = terminal_events(api)
    found += [
        f"run {n}: {len(events.get(n, []))} terminal Events" for n in names if len(events.get(n, [])) != 1
    ]
    for name in names:
        jobs = [j for j in recorder.job_uids if j.startswith(f"{name}-a")]
        if len(jobs) != jobs_per_run:
            found.append(f"run {name}: Jobs {sorted(jobs)}, expected {jobs_per_run}")
    return found


def log_problems(log_text: str) -> list[str]:
    """Lines of the operator's log that say something went unhandled."""
    markers = ("Traceback", "Unhandled", "unhandled exception")
    return [line for line in log_text.splitlines() if any(m in line for m in markers)]
