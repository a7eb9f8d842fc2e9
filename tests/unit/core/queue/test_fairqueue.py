"""The per-namespace queue: first come, first served, positions, and whom a freed slot wakes."""

from typing import Any

import pytest

from harness_operator.core.queue.fairqueue import (
    QUEUED,
    WAITING,
    QueueEntry,
    build_queue_entry,
    build_queued_message,
    compute_queue_position,
    compute_runs_to_wake,
    is_slot_free,
)

A = QueueEntry("2026-12-01T07:00:00Z", "zeta")
B = QueueEntry("2026-12-01T07:00:01Z", "alpha")
C = QueueEntry("2026-12-01T07:00:01Z", "beta")  # same second as B: the name decides
W = QueueEntry("2026-12-01T06:00:00Z", "needs-output", WAITING)


def body(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "r", "creationTimestamp": "2026-12-01T07:00:00Z"}, "status": status or {}}


def succeeded(status: str, reason: str) -> dict[str, Any]:
    return {"conditions": [{"type": "Succeeded", "status": status, "reason": reason}]}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, QUEUED),  # not reconciled yet: it may take a slot, so it holds its place
        (succeeded("Unknown", "Queued"), QUEUED),
        (succeeded("Unknown", "WaitingForRunOutput"), WAITING),
        (succeeded("Unknown", "BudgetExhausted"), WAITING),
        (succeeded("True", "Succeeded"), None),
        (succeeded("False", "UnknownProvider"), None),
        ({"attempts": [{"index": 1, "provider": "p"}]}, None),  # started
    ],
)
def test_queue_entry_by_status(status: dict[str, Any] | None, expected: str | None) -> None:
    entry = build_queue_entry(body(status))
    assert (entry.state if entry else None) == expected
    if entry:
        assert (entry.created, entry.name) == ("2026-12-01T07:00:00Z", "r")


@pytest.mark.parametrize(
    ("entries", "run", "expected"),
    [
        ([], A, (1, 1)),  # the run itself, not in the index yet
        ([A, B, C], A, (1, 3)),
        ([C, B, A], B, (2, 3)),  # creation time first, then the name
        ([A, B, C], C, (3, 3)),
        ([A, B, C, W], C, (3, 3)),  # runs waiting for an output or budget hold no place
        ([B, C], A, (1, 3)),
    ],
)
def test_position_is_first_come_first_served(
    entries: list[QueueEntry], run: QueueEntry, expected: tuple[int, int]
) -> None:
    assert compute_queue_position(entries, run) == expected


@pytest.mark.parametrize(
    ("position", "in_flight", "limit", "free"),
    [
        (1, 0, 1, True),
        (1, 1, 1, False),
        (2, 0, 2, True),
        (3, 0, 2, False),
        (2, 1, 2, False),
        (1, 9, 10, True),
    ],
)
def test_a_run_never_takes_the_slot_of_an_earlier_one(
    position: int, in_flight: int, limit: int, free: bool
) -> None:
    assert is_slot_free(position, in_flight, limit) is free


@pytest.mark.parametrize(
    ("in_flight", "limit", "expected"),
    [
        (2, 2, ["needs-output"]),  # no slot: only the runs waiting on another run
        (1, 2, ["zeta", "needs-output"]),  # one slot: the earliest queued run, not all of them
        (0, 2, ["zeta", "alpha", "needs-output"]),
        (5, 2, ["needs-output"]),
    ],
)
def test_a_freed_slot_wakes_the_earliest(in_flight: int, limit: int, expected: list[str]) -> None:
    assert compute_runs_to_wake([C, W, B, A], in_flight, limit) == expected


def test_queued_message_gives_the_position() -> None:
    assert build_queued_message("team-a", 3, 12, 10, 10) == (
        "position 3 of 12 in the queue of namespace team-a (10 runs in flight, limit 10)"
    )


def test_a_run_kueue_queues_holds_no_place_in_the_namespaces_queue() -> None:
    run = body(None)
    run["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    assert build_queue_entry(run) is None
