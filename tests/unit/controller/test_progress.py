"""Progress ticks: a run is read while its attempt runs, at most once per pending tick, and not after."""

from __future__ import annotations

import threading
import time

from harness_operator.controller.progress import ProgressTicks

SETTLE_SECONDS = 0.5  # long enough for a read the last tick queued to land


def test_a_followed_run_is_read_on_each_tick_until_it_stops() -> None:
    reads: list[tuple[str, str]] = []
    read_twice = threading.Event()

    def read(namespace: str, name: str) -> None:
        reads.append((namespace, name))
        if len(reads) >= 2:
            read_twice.set()

    ticks = ProgressTicks(read, interval=0.05)
    # Seen again far more often than the interval (every status write is an event): one tick keeps its
    # pace, where a tick scheduled anew on each sighting would never come due.
    deadline = time.monotonic() + 5
    while not read_twice.is_set() and time.monotonic() < deadline:
        ticks.follow("ns", "run", wanted=True)
        time.sleep(0.005)
    assert read_twice.is_set()
    ticks.follow("ns", "run", wanted=False)
    time.sleep(SETTLE_SECONDS)
    stopped = len(reads)
    time.sleep(10 * 0.05)  # ten intervals: a run still ticked would be read again
    assert len(reads) == stopped
    assert set(reads) == {("ns", "run")}


def test_a_run_never_followed_is_never_read() -> None:
    reads: list[tuple[str, str]] = []
    ticks = ProgressTicks(lambda ns, name: reads.append((ns, name)), interval=0.01)
    ticks.follow("ns", "done", wanted=False)
    time.sleep(SETTLE_SECONDS)  # fifty intervals
    assert reads == []
