"""`harnessctl logs`: follow a run's attempts through the API and hand their events on, in order (I/O)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.events import Event, decode_event_line
from harness_operator.controller.kube import Kube
from harness_operator.core.objects.conditions import (
    is_finished,
    is_succeeded,
)
from harness_operator.core.objects.naming import output_config_map_name
from harness_operator.core.objects.ownership import is_run_output
from harness_operator.core.resolve.retry import build_positions, retry_number
from harness_operator.core.status.watch import (
    build_attempt_events,
    build_pods_by_attempt,
    build_run_event,
    build_waiting_event,
    is_attempt_over,
    is_log_readable,
    is_unclaimed,
)

WAKE_SECONDS = 30.0  # a follower reads afresh at least this often, watches or not


class RunNotFound(LookupError):
    """The run does not exist (or went away while followed)."""


def follow_run(
    kube: Kube,
    namespace: str,
    name: str,
    follow: bool,
    write: Callable[[Event], None],
) -> int:
    """Write every attempt's events, then the run's outcome; 0 unless the run ended without success.

    An attempt whose pod is still there is read from its log (followed while it runs, with `follow`);
    one whose pod is gone is told from status.attempts[] and, for the answer, the output ConfigMap.
    Between attempts and until the run's status is final it waits for a watch of the run or its pods
    to say something changed: pods of the next attempt have no log to follow yet. Meanwhile, with
    `follow`, it says why the run waits each time the reason changes (from the run's status)."""
    shown = 0
    hinted = False
    said: Event | None = None
    changed = threading.Event()
    if follow:
        kube.watch_run_and_pods(namespace, name, changed.set)
    while True:
        changed.clear()
        raw = kube.fetch_run(namespace, name)
        if raw is None:
            raise RunNotFound(f'HarnessRun "{name}" not found in namespace "{namespace}"')
        run = HarnessRun.model_validate(raw)
        status = run.status
        positions = build_positions(run.spec)
        total = len(positions)
        pods = build_pods_by_attempt(kube.fetch_pods(namespace, name))
        recorded = {a.index: a for a in (status.attempts if status else [])}
        for index in range(shown + 1, total + 1):
            pod = pods.get(index)
            attempt = recorded.get(index)
            if pod is None and attempt is None and any(i > index for i in [*pods, *recorded]):
                pass  # a number a retry not needed left unused (core/resolve/retry.py)
            elif pod is not None and is_log_readable(pod):
                live = follow and not is_attempt_over(pod)
                for line in kube.fetch_pod_log_lines(namespace, pod["metadata"]["name"], follow=live):
                    event = decode_event_line(line.rstrip("\r"))
                    if event is not None:
                        write(event)
            elif attempt is not None and (attempt.exit_code is not None or attempt.reason):
                output = _read_output(kube, raw) if attempt.exit_code == 0 and not attempt.reason else None
                retry = retry_number(positions, index)
                for event in build_attempt_events(attempt, total, output, retry):
                    write(event)
            else:
                break
            shown = index
        finished = is_finished(status.conditions if status else [])
        unclaimed_in = namespace if is_unclaimed(raw, datetime.now(UTC)) else None
        if finished or not follow:
            write(build_run_event(status, unclaimed_in))
            return 1 if finished and status is not None and not is_succeeded(status.conditions) else 0
        waiting = build_waiting_event(status)
        if waiting is not None and waiting != said:
            write(waiting)
        said = waiting
        if unclaimed_in is not None and not hinted:
            write(build_run_event(status, unclaimed_in))  # once; following goes on, an operator may come
            hinted = True
        changed.wait(WAKE_SECONDS)


def _read_output(kube: Kube, run: dict[str, Any]) -> str | None:
    """The answer from the output ConfigMap, only when it is this run's (owner and hash checked)."""
    meta = run["metadata"]
    cm = kube.fetch_config_map(meta["namespace"], output_config_map_name(meta["name"]))
    if cm is None or not is_run_output(cm, run):
        return None
    return str(cm["data"]["output"])
