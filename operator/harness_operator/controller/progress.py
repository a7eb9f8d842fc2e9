"""status.progress of a running attempt, read from the tail of its pod's log."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.events import decode_events, latest_progress
from harness_operator.controller import metrics
from harness_operator.controller.cache import KeyedQueue
from harness_operator.controller.due import DueQueue
from harness_operator.controller.kube import Kube
from harness_operator.controller.workers import Workers
from harness_operator.core.status.progress import (
    compute_progress,
    is_progress_changed,
    is_progress_wanted,
)

PROGRESS_TAIL_LINES = 40
PROGRESS_TAIL_BYTES = 32 * 1024
PROGRESS_WORKERS = 2


class ProgressReader:
    """One bounded log GET per tick of a running run; `run_lock` is the run reconciler's lock of the run."""

    def __init__(
        self,
        kube: Kube,
        run_lock: Callable[[str, str], threading.Lock],
        clock: Callable[[], datetime],
        workers: Workers | None = None,
    ) -> None:
        self.kube, self.run_lock, self.clock = kube, run_lock, clock
        self.workers = workers or Workers()  # an attempt MultiKueue dispatched is read on its worker

    def refresh(self, namespace: str, name: str) -> None:
        """Write status.progress when the figures moved. Under the run's lock, so that a reconcile's final
        status is never overwritten by figures read before it."""
        with self.run_lock(namespace, name):
            raw = self.kube.fetch_run(namespace, name)
            if raw is None:
                return
            status = HarnessRun.model_validate(raw).status
            if status is None or not is_progress_wanted(status):
                return
            attempt = status.attempts[-1]
            assert attempt.pod_name is not None
            log = self.workers.kube_of(attempt.cluster, self.kube).fetch_pod_log_tail(
                namespace, attempt.pod_name, PROGRESS_TAIL_LINES, PROGRESS_TAIL_BYTES
            )
            metrics.PROGRESS_READS.inc()
            metrics.PROGRESS_BYTES.inc(len((log or "").encode("utf-8")))
            latest = latest_progress(decode_events((log or "").splitlines()))
            progress = compute_progress(status, attempt.index, latest, self.clock())
            if is_progress_changed(status.progress, progress):
                self.kube.patch_run_status(namespace, name, {"progress": progress.to_api()})
                metrics.PROGRESS_WRITES.inc()


class ProgressTicks:
    """The runs whose attempt runs, each read every `interval` seconds: one due heap (no kopf timer, which
    would put a finalizer on every running run and so two more writes), its reads on a few workers (a
    run whose read is pending already is not queued twice)."""

    def __init__(self, read: Callable[[str, str], None], interval: float) -> None:
        self.interval = interval
        self._due = DueQueue("run-progress")
        self._reads = KeyedQueue(lambda key: read(*key), PROGRESS_WORKERS)

    def follow(self, namespace: str, name: str, wanted: bool) -> None:
        """Tick the run while `wanted` (its attempt runs, as its latest status says); stop when not."""
        key = (namespace, name)
        if not wanted:
            self._due.forget(key)
        elif key not in self._due:
            self._due.start()
            self._due.schedule(key, self.interval, partial(self._tick, key))

    def _tick(self, key: tuple[str, str]) -> float:
        self._reads.put(key)
        return self.interval
