"""A watch cache of HarnessRuns, the one source of run events: the operator takes no run from kopf.

Each run is kept as a slim entry of what the controller reads of every run: its charge in budgets, its
place in its namespace's queue, what its schedule needs, and what decides the work its events make (is
it unfinished, its spec's generation, is its progress read, when it expires). kopf kept a diff base, a
progress annotation and a toggle per run, and its startup work beside 10,000 runs grew faster than the
square of the runs (bench/RESULTS.md); here a run costs one slim entry, and a restart one list.

A change names the run and whether it is to be reconciled: a run first seen, whose spec changed (a new
generation) or whose approval decision was annotated, while it is unfinished. Its own status writes change
no generation and reconcile nothing.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRunStatus
from harness_operator.controller.cache import SYNC_WAIT_SECONDS
from harness_operator.core.objects.naming import ANNOTATION_DECISION
from harness_operator.core.pipeline.runs import StepRun, build_step_run_entry, pipeline_owner
from harness_operator.core.queue.budget import RunCharge, build_run_charge
from harness_operator.core.queue.fairqueue import QueueEntry, build_queue_entry
from harness_operator.core.schedule import ScheduledRun, build_scheduled_run_entry, schedule_owner
from harness_operator.core.status.progress import is_progress_wanted

RUN_KIND = "HarnessRun"
Expiry = Callable[[Mapping[str, Any], datetime], float | None]  # retention.compute_expiry, bound


@dataclass(frozen=True)
class RunEntry:
    """What the store keeps of one run."""

    uid: str
    generation: int
    unfinished: bool
    progress: bool  # its attempt runs: its progress is read
    expires_at: float | None  # POSIX time its retention deletes it at
    schedule: str | None  # the name of the schedule that controls it
    charge: RunCharge
    queued: QueueEntry | None
    scheduled: tuple[str, ScheduledRun] | None  # (the schedule's UID, the run)
    pipeline: str | None = None  # the name of the pipeline that controls it
    piped: tuple[str, StepRun] | None = None  # (the pipeline's UID, the run as its pipeline reads it)
    decision: str | None = None  # the approval decision annotated on it (core/status/awaiting.py)
    resource_version: str = ""  # the version the watch last delivered


@dataclass(frozen=True)
class RunChange:
    """Run `name` changed: `entry` is what it is now, or was when `deleted`; `reconcile`: it is new or
    its spec changed, and it is unfinished."""

    namespace: str
    name: str
    entry: RunEntry
    deleted: bool
    reconcile: bool


def is_unfinished(run: Mapping[str, Any]) -> bool:
    """No Succeeded condition that is True or False."""
    conditions = (run.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Succeeded" and c.get("status") in ("True", "False") for c in conditions)


def _wants_progress(run: Mapping[str, Any]) -> bool:
    try:
        status = HarnessRunStatus.model_validate(dict(run.get("status") or {}))
    except ValueError:
        return False
    return is_progress_wanted(status)


def build_run_entry(run: Mapping[str, Any], expiry: Expiry, now: datetime) -> RunEntry:
    meta = run.get("metadata") or {}
    unfinished = is_unfinished(run)  # first: a finished run (most, at startup) costs no status parse
    delay = None if unfinished else expiry(run, now)
    owner = schedule_owner(run)
    piped = build_step_run_entry(run)
    return RunEntry(
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        unfinished=unfinished,
        progress=unfinished and _wants_progress(run),
        expires_at=None if delay is None else now.timestamp() + delay,
        schedule=owner[0] if owner else None,
        charge=build_run_charge(run),
        queued=build_queue_entry(run),
        scheduled=build_scheduled_run_entry(run),
        decision=(meta.get("annotations") or {}).get(ANNOTATION_DECISION),
        resource_version=str(meta.get("resourceVersion") or ""),
        pipeline=(pipeline_owner(run) or (None,))[0] if piped else None,
        piped=piped,
    )


def decide_change(
    namespace: str, name: str, held: RunEntry | None, entry: RunEntry, deleted: bool
) -> RunChange:
    """The change from `held` (None: not seen before) to `entry`."""
    # An approval or rejection is an annotation: no new generation, but the run awaiting it moves.
    new = (
        held is None
        or held.uid != entry.uid
        or held.generation != entry.generation
        or held.decision != entry.decision
    )
    return RunChange(namespace, name, entry, deleted, not deleted and new and entry.unfinished)


class RunStore:
    """The runs' entries by namespace; thread-safe. The reads wait for the first full list.
    `expiry(run, now)`: seconds until a finished run is to be deleted, or None to keep it."""

    def __init__(self, expiry: Expiry = lambda run, now: None) -> None:
        self._expiry = expiry
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, RunEntry]] = defaultdict(dict)
        # A new unfinished run's body as the watch delivered it, until its first reconcile takes it.
        self._delivered: dict[tuple[str, str], dict[str, Any]] = {}
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

    def piped(self, namespace: str, pipeline_uid: str) -> list[StepRun]:
        """The runs the pipeline of `pipeline_uid` controls."""
        return [
            entry.piped[1]
            for entry in self._entries(namespace)
            if entry.piped is not None and entry.piped[0] == pipeline_uid
        ]

    def resource_version(self, namespace: str, name: str) -> str | None:
        """The version of the run the watch last delivered; None when it holds none (yet)."""
        with self._lock:
            entry = self._runs.get(namespace, {}).get(name)
        return entry.resource_version if entry is not None and entry.resource_version else None

    def take_delivered(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A new unfinished run as the watch last delivered it, once (its first reconcile's read: a watch
        event is the API server's answer too); None when taken, or not new."""
        with self._lock:
            return self._delivered.pop((namespace, name), None)

    def every_run(self) -> list[RunChange]:
        """Every run held, as a change that reconciles it when it is unfinished (a new leader's start)."""
        self.wait_synced()
        with self._lock:
            held = [(ns, name, entry) for ns, runs in self._runs.items() for name, entry in runs.items()]
        return [decide_change(ns, name, None, entry, False) for ns, name, entry in held]

    def _entries(self, namespace: str) -> list[RunEntry]:
        self.wait_synced()
        with self._lock:
            return list(self._runs.get(namespace, {}).values())

    # --- writes (the watch threads) ------------------------------------------------------------------

    def _deliver(
        self, namespace: str, name: str, new: bool, entry: RunEntry | None, obj: Mapping[str, Any]
    ) -> None:
        """Under the lock: keep a new unfinished run's body (and a newer one until it is taken); let go
        of it once the run has ended or is gone."""
        key = (namespace, name)
        if entry is None or not entry.unfinished:
            self._delivered.pop(key, None)
        elif new or key in self._delivered:
            self._delivered[key] = dict(obj)

    def apply(self, kind: str, type_: str, obj: Mapping[str, Any]) -> RunChange:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        entry = build_run_entry(obj, self._expiry, datetime.now(UTC))
        deleted = type_ == "DELETED"
        with self._lock:
            runs = self._runs[namespace]
            held = runs.pop(name, None) if deleted else runs.get(name)
            if not deleted:
                runs[name] = entry
            elif not runs:
                del self._runs[namespace]
            self._deliver(namespace, name, held is None, None if deleted else entry, obj)
        return decide_change(namespace, name, held, entry, deleted)

    def replace(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> list[RunChange]:
        """A full list of the runs in `namespace` (None: all): the changes against what was held, so that
        what changed while the watch was down is acted on (a run deleted then leaves the gauges)."""
        now = datetime.now(UTC)
        listed: dict[str, dict[str, RunEntry]] = defaultdict(dict)
        bodies: dict[tuple[str, str], dict[str, Any]] = {}
        for item in items:
            meta = item.get("metadata") or {}
            ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            entry = listed[ns][name] = build_run_entry(item, self._expiry, now)
            if entry.unfinished:  # a finished run's body is never kept
                bodies[(ns, name)] = item
        with self._lock:
            held = {
                (ns, name): entry
                for ns in [ns for ns in self._runs if namespace is None or ns == namespace]
                for name, entry in self._runs.pop(ns).items()
            }
            self._runs.update(listed)
            known = held.keys() | {(ns, name) for ns, runs in listed.items() for name in runs}
            for ns, name in known:  # a run listed no more: its entry None, its body let go of
                now_listed = listed.get(ns, {}).get(name)
                self._deliver(ns, name, (ns, name) not in held, now_listed, bodies.get((ns, name), {}))
            self._synced.set()
        changes = []
        for ns, name in known:
            old, new = held.get((ns, name)), listed.get(ns, {}).get(name)
            if new is None and old is not None:
                changes.append(decide_change(ns, name, old, old, True))
            elif new is not None and new != old:
                changes.append(decide_change(ns, name, old, new, False))
        return changes
