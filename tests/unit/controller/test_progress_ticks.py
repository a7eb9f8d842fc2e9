"""Progress ticks: a run is read while its attempt runs, at most once per pending tick, and not after."""

from __future__ import annotations

import threading

from harness_operator.controller.progress import ProgressTicks


def test_a_followed_run_is_read_on_each_tick_until_it_stops() -> None:
    reads: list[tuple[str, str]] = []
    read_twice = threading.Event()

    def read(namespace: str, name: str) -> None:
        reads.append((namespace, name))
        if len(reads) >= 2:
            read_twice.set()

    ticks = ProgressTicks(read, interval=0.01)
    ticks.follow("ns", "run", wanted=True)
    ticks.follow("ns", "run", wanted=True)  # seen again: every status write is an event
    assert len(ticks._due) == 1
    assert read_twice.wait(5)
    ticks.follow("ns", "run", wanted=False)
    assert ("ns", "run") not in ticks._due
    assert set(reads) == {("ns", "run")}


def test_a_run_never_followed_is_never_read() -> None:
    reads: list[tuple[str, str]] = []
    ticks = ProgressTicks(lambda ns, name: reads.append((ns, name)), interval=0.01)
    ticks.follow("ns", "done", wanted=False)
    assert ("ns", "done") not in ticks._due
    assert ticks._due.run_due() is None
    assert reads == []
