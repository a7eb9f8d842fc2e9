"""Run retention: when a finished run expires (pure), and one heap of the expiries due (a thread, no I/O)."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness_operator.core.times import parse_time

RETRY_SECONDS = 30.0  # a failed deletion is tried again this much later, until it succeeds or the run is gone


def compute_expiry(run: Mapping[str, Any], default: int | None, now: datetime) -> float | None:
    """Seconds from `now` until a finished run is to be deleted (0: due already), or None to keep it:
    not finished, no TTL (its own spec.ttlSecondsAfterFinished, else `default`), or already deleting."""
    meta = run.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    own = (run.get("spec") or {}).get("ttlSecondsAfterFinished")
    ttl: int | None = own if _is_seconds(own) else default
    if ttl is None or not _is_seconds(ttl):
        return None
    finished = parse_time((run.get("status") or {}).get("completionTime"))
    if finished is None:
        return None
    return max(0.0, ttl - (now - finished).total_seconds())


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, order=True)
class _Entry:
    due: float
    namespace: str
    name: str
    uid: str


class ExpiryQueue:
    """Finished runs with a TTL, in one heap ordered by expiry, served by one thread that sleeps until the
    earliest is due. A run costs one small entry, not a task or a timer of its own, and nothing is polled.
    `delete(namespace, name, uid)` deletes the run only if it still has that uid (a run re-created under
    the same name is a new run); an exception retries the deletion RETRY_SECONDS later."""

    def __init__(
        self,
        delete: Callable[[str, str, str], None],
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, str, Exception], None] | None = None,
    ) -> None:
        self._delete = delete
        self._clock = clock
        self._on_error = on_error
        self._heap: list[_Entry] = []
        self._current: dict[
            tuple[str, str], _Entry
        ] = {}  # the live entry per run; others in the heap are stale
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._wake:
            return len(self._current)

    def schedule(self, namespace: str, name: str, uid: str, delay: float) -> None:
        """Delete the run `delay` seconds from now (replacing what was scheduled for it)."""
        entry = _Entry(self._clock() + max(0.0, delay), namespace, name, uid)
        with self._wake:
            current = self._current.get((namespace, name))
            if current is not None and current.uid == uid and abs(current.due - entry.due) < 1:
                return  # the same expiry seen again (another event of a finished run): no stale entry
            self._current[(namespace, name)] = entry
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._wake.notify()

    def forget(self, namespace: str, name: str) -> None:
        """The run is gone or keeps no TTL: nothing to delete (its heap entry is skipped when it surfaces)."""
        with self._wake:
            self._current.pop((namespace, name), None)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="run-retention", daemon=True)
            self._thread.start()

    def run_due(self) -> float | None:
        """Delete every run due now; returns the seconds until the next is due (None: none scheduled)."""
        while True:
            with self._wake:
                entry = self._pop_live()
                if entry is None:
                    return None
                wait = entry.due - self._clock()
                if wait > 0:
                    heapq.heappush(self._heap, entry)
                    return wait
            try:
                self._delete(entry.namespace, entry.name, entry.uid)
            except Exception as exc:  # the API server is away: try again later, never drop the expiry
                if self._on_error is not None:
                    self._on_error(entry.namespace, entry.name, exc)
                with self._wake:
                    if self._current.get((entry.namespace, entry.name)) == entry:
                        self.schedule(entry.namespace, entry.name, entry.uid, RETRY_SECONDS)
                continue
            with self._wake:
                if self._current.get((entry.namespace, entry.name)) == entry:
                    del self._current[(entry.namespace, entry.name)]

    def _pop_live(self) -> _Entry | None:
        while self._heap:
            entry = heapq.heappop(self._heap)
            if self._current.get((entry.namespace, entry.name)) == entry:
                return entry
        return None

    def _serve(self) -> None:
        while True:
            self.run_due()
            with self._wake:  # measured under the lock, so an earlier entry pushed meanwhile is not missed
                wait = self._heap[0].due - self._clock() if self._heap else None
                if wait is None or wait > 0:
                    self._wake.wait(timeout=wait)
