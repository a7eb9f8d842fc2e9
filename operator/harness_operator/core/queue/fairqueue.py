"""The per-namespace queue of runs waiting for a slot: first come, first served (pure).

Order is creationTimestamp, then name. A run takes a free slot only when no earlier queued run of its
namespace waits, so a burst cannot starve the runs created first; when slots free, only the earliest
queued runs (one per free slot) are woken, not every waiting run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.core.queue.budget import BUDGET_EXHAUSTED
from harness_operator.core.queue.kueue import is_kueue_managed

QUEUED = "queued"  # waits for a slot of the namespace (or has not been reconciled yet)
WAITING = "waiting"  # waits for another run's output or for budget room: woken when a run ends
WAITING_REASONS = (Reason.WaitingForRunOutput, BUDGET_EXHAUSTED)


@dataclass(frozen=True, order=True)
class QueueEntry:
    """One run that has not started, as the run cache holds it; ordered first come, first served."""

    created: str
    name: str
    state: str = QUEUED


def build_queue_entry(run: Mapping[str, Any]) -> QueueEntry | None:
    """The run's place in its namespace's queue; None once it started an attempt or finished, and for a
    run Kueue queues instead (it takes none of the namespace's slots)."""
    meta = run.get("metadata") or {}
    status = run.get("status") or {}
    if status.get("attempts") or is_kueue_managed(meta.get("labels")):
        return None
    conditions = status.get("conditions") or []
    succeeded: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Succeeded"), {})
    if succeeded.get("status") in ("True", "False"):
        return None
    state = WAITING if succeeded.get("reason") in WAITING_REASONS else QUEUED
    return QueueEntry(str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""), state)


def compute_queue_position(entries: Iterable[QueueEntry], run: QueueEntry) -> tuple[int, int]:
    """The run's 1-based position among the queued runs, and how many are queued (the run counted)."""
    queued = sorted({e for e in entries if e.state == QUEUED and e.name != run.name} | {run})
    return queued.index(run) + 1, len(queued)


def is_slot_free(position: int, in_flight: int, limit: int) -> bool:
    """The run may start: the runs in flight and every run queued before it leave a slot for it."""
    return in_flight + position <= limit


def compute_runs_to_wake(entries: Iterable[QueueEntry], in_flight: int, limit: int) -> list[str]:
    """A slot freed: the earliest queued runs, one per free slot, and every run waiting for another
    run's output or for budget room (a run ending may be what they wait for)."""
    entries = list(entries)
    queued = sorted(e for e in entries if e.state == QUEUED)
    free = max(0, limit - in_flight)
    waiting = sorted(e for e in entries if e.state == WAITING)
    return [e.name for e in queued[:free]] + [e.name for e in waiting]


def build_queued_message(namespace: str, position: int, total: int, in_flight: int, limit: int) -> str:
    return (
        f"position {position} of {total} in the queue of namespace {namespace} "
        f"({in_flight} runs in flight, limit {limit})"
    )
