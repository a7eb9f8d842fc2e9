"""Calls due later: one heap ordered by due time, one thread that sleeps until the earliest is due."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger()

# A call returns None when it is done, or the seconds after which it is to be called again.
DueCall = Callable[[], float | None]


@dataclass(frozen=True, order=True)
class _Entry:
    due: float
    order: int
    key: Hashable = field(compare=False)
    call: DueCall = field(compare=False)
    tag: Hashable = field(compare=False, default=None)


class DueQueue:
    """A pending call costs one small heap entry, not a thread or a timer of its own, and nothing is
    polled. One call per key: scheduling a key again replaces its call (the old entry is skipped when it
    surfaces), `forget` drops it. A call that raises is logged and dropped: callers retry by returning a
    delay."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._clock = clock
        self._heap: list[_Entry] = []
        self._current: dict[Hashable, _Entry] = {}  # the live entry per key; others in the heap are stale
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        with self._wake:
            return len(self._current)

    def __contains__(self, key: Hashable) -> bool:
        with self._wake:
            return key in self._current

    def schedule(self, key: Hashable, delay: float, call: DueCall, tag: Hashable = None) -> None:
        """Call `call` `delay` seconds from now, instead of what was scheduled for `key`; the same `tag`
        again within a second of the due time is the same call seen again and changes nothing."""
        entry = _Entry(self._clock() + max(0.0, delay), next(self._order), key, call, tag)
        with self._wake:
            current = self._current.get(key)
            seen_again = (
                tag is not None
                and current is not None
                and current.tag == tag
                and abs(current.due - entry.due) < 1
            )
            if seen_again:
                return
            self._current[key] = entry
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._wake.notify()

    def forget(self, key: Hashable) -> None:
        with self._wake:
            self._current.pop(key, None)

    def start(self) -> None:
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    def run_due(self) -> float | None:
        """Make every call due now; returns the seconds until the next is due (None: none scheduled)."""
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
                again = entry.call()
            except Exception:  # the thread must survive; a call that wants another try returns a delay
                log.exception("A scheduled call failed", queue=self._name, key=str(entry.key))
                again = None
            with self._wake:
                if self._current.get(entry.key) is not entry:
                    continue  # replaced or forgotten meanwhile
                del self._current[entry.key]
                if again is not None:
                    self.schedule(entry.key, again, entry.call, entry.tag)

    def _pop_live(self) -> _Entry | None:
        while self._heap:
            entry = heapq.heappop(self._heap)
            if self._current.get(entry.key) is entry:
                return entry
        return None

    def _serve(self) -> None:
        while True:
            self.run_due()
            with self._wake:  # measured under the lock, so an earlier entry pushed meanwhile is not missed
                wait = self._heap[0].due - self._clock() if self._heap else None
                if wait is None or wait > 0:
                    self._wake.wait(timeout=wait)
