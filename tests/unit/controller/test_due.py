"""DueQueue: calls in due order, one per key, a returned delay calls again, a raising call is dropped,
and the thread serves what is scheduled after it started."""

import threading

from tests.unit.controller.test_retention import Clock

from harness_operator.controller.due import DueQueue


def test_calls_run_in_due_order_and_only_when_due() -> None:
    clock, calls = Clock(), []
    queue = DueQueue("test", clock)
    queue.schedule("b", 20, lambda: calls.append("b"))
    queue.schedule("a", 5, lambda: calls.append("a"))
    assert queue.run_due() == 5 and calls == []
    clock.now += 20
    assert queue.run_due() is None and calls == ["a", "b"] and len(queue) == 0


def test_one_call_per_key_and_forget() -> None:
    clock, calls = Clock(), []
    queue = DueQueue("test", clock)
    queue.schedule("k", 5, lambda: calls.append("first"))
    queue.schedule("k", 1, lambda: calls.append("second"))  # replaces the first
    queue.schedule("gone", 1, lambda: calls.append("gone"))
    queue.forget("gone")
    clock.now += 10
    queue.run_due()
    assert calls == ["second"]


def test_the_same_tag_seen_again_keeps_its_due_time() -> None:
    clock, calls = Clock(), []
    queue = DueQueue("test", clock)
    queue.schedule("k", 10, lambda: calls.append(1), tag="uid")
    queue.schedule("k", 10.4, lambda: calls.append(2), tag="uid")
    clock.now += 10
    queue.run_due()
    assert calls == [1]


def test_a_returned_delay_calls_again_and_a_raising_call_is_dropped() -> None:
    clock, calls = Clock(), []

    def flaky() -> float | None:
        calls.append("flaky")
        return 3.0 if len(calls) == 1 else None

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("boom")

    queue = DueQueue("test", clock)
    queue.schedule("flaky", 0, flaky)
    queue.schedule("broken", 0, broken)
    assert queue.run_due() == 3.0 and len(queue) == 1
    clock.now += 3
    assert queue.run_due() is None
    assert sorted(calls) == ["broken", "flaky", "flaky"] and len(queue) == 0


def test_a_call_that_schedules_itself_again_is_kept() -> None:
    clock, calls = Clock(), list[int]()
    queue = DueQueue("test", clock)

    def again() -> None:
        calls.append(len(calls))
        if len(calls) < 3:
            queue.schedule("k", 0, again)

    queue.schedule("k", 0, again)
    queue.run_due()
    assert calls == [0, 1, 2] and len(queue) == 0


def test_the_thread_wakes_for_a_call_scheduled_after_it_started() -> None:
    queue, done = DueQueue("test"), threading.Event()
    queue.start()
    queue.schedule("k", 0.01, done.set)
    assert done.wait(timeout=10)
