"""A watch cache of HarnessRuns kept as the three slim entries the controller reads of every run: its
charge in budgets, its place in its namespace's queue, and, for a schedule's run, what its schedule
needs.

These were kopf indexes. kopf gives every object of an indexed resource a toggle of its own that all
workers wait on at startup, and each toggle wakes every waiting worker: a restart beside 10,000 runs
took 895 s before a new run got its Job (bench/RESULTS.md). Here the runs are listed before kopf starts
(handlers wait until they are) and watched by their own thread, as `cache.py` does for Jobs and Pods;
kopf's run events feed the same store, so a handler never sees a run older than the event it handles.
Of two copies of a run the one of the higher resourceVersion wins, and a deletion leaves a tombstone
until the next full list, so a late copy from the other source never brings a deleted run back.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness_operator.controller.cache import SYNC_WAIT_SECONDS, Change
from harness_operator.core.budget import RunCharge, build_run_charge
from harness_operator.core.fairqueue import QueueEntry, build_queue_entry
from harness_operator.core.schedule import ScheduledRun, build_scheduled_run_entry

RUN_KIND = "HarnessRun"
NO_CHANGE = Change("", None, False)  # runs' reconciles are kopf's: the watch notifies nothing


@dataclass(frozen=True)
class RunEntry:
    """What the store keeps of one run."""

    version: int
    charge: RunCharge
    queued: QueueEntry | None
    scheduled: tuple[str, ScheduledRun] | None  # (the schedule's UID, the run)


def version_of(run: Mapping[str, Any]) -> int:
    """The run's resourceVersion as a number (the API server's are etcd revisions); 0 when not one."""
    value = str((run.get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else 0


def build_run_entry(run: Mapping[str, Any]) -> RunEntry:
    return RunEntry(
        version_of(run), build_run_charge(run), build_queue_entry(run), build_scheduled_run_entry(run)
    )


class RunStore:
    """The runs' entries by namespace; thread-safe. The reads wait for the first full list."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, RunEntry]] = defaultdict(dict)
        self._gone: dict[tuple[str, str], int] = {}  # deleted at this version, until the next list
        self._synced = threading.Event()

    # --- reads ---------------------------------------------------------------------------------------

    def wait_synced(self, timeout: float = SYNC_WAIT_SECONDS) -> None:
        if not self._synced.wait(timeout):
            raise TimeoutError("the watch cache of HarnessRuns has not synced yet")

    def charges(self, namespace: str) -> list[RunCharge]:
        """Every run's charge in budgets."""
        return [entry.charge for entry in self._entries(namespace)]

    def queue(self, namespace: str) -> list[QueueEntry]:
        """Every run that has not started (queued, or waiting for an output or budget room)."""
        return [entry.queued for entry in self._entries(namespace) if entry.queued is not None]

    def scheduled(self, namespace: str, schedule_uid: str) -> list[ScheduledRun]:
        """The runs the schedule of `schedule_uid` controls."""
        return [
            entry.scheduled[1]
            for entry in self._entries(namespace)
            if entry.scheduled is not None and entry.scheduled[0] == schedule_uid
        ]

    def _entries(self, namespace: str) -> list[RunEntry]:
        self.wait_synced()
        with self._lock:
            return list(self._runs.get(namespace, {}).values())

    # --- writes (the watch thread, and kopf's run events) --------------------------------------------

    def apply(self, kind: str, type_: str, obj: Mapping[str, Any]) -> Change:
        """One copy of a run (ADDED, MODIFIED, DELETED), kept unless the store holds a newer one."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        version = version_of(obj)
        with self._lock:
            held = self._runs.get(namespace, {}).get(name)
            newest = max(held.version if held else 0, self._gone.get((namespace, name), 0))
            if version and version <= newest:
                return NO_CHANGE
            if type_ == "DELETED":
                self._forget(namespace, name)
                self._gone[(namespace, name)] = version
            else:
                self._runs[namespace][name] = build_run_entry(obj)
        return NO_CHANGE

    def replace(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> list[Change]:
        """A full list of the runs in `namespace` (None: all): it replaces what was held there."""
        listed: dict[str, dict[str, RunEntry]] = defaultdict(dict)
        for item in items:
            meta = item.get("metadata") or {}
            listed[str(meta.get("namespace") or "")][str(meta.get("name") or "")] = build_run_entry(item)
        with self._lock:
            for held in [ns for ns in self._runs if namespace is None or ns == namespace]:
                for name, entry in self._runs.pop(held).items():  # a newer copy kopf gave meanwhile
                    if name in listed[held] and entry.version > listed[held][name].version:
                        listed[held][name] = entry
            self._runs.update({ns: runs for ns, runs in listed.items() if runs})
            self._gone = {k: v for k, v in self._gone.items() if namespace is not None and k[0] != namespace}
            self._synced.set()
        return []

    def _forget(self, namespace: str, name: str) -> None:
        runs = self._runs.get(namespace)
        if runs is not None:
            runs.pop(name, None)
            if not runs:
                del self._runs[namespace]
