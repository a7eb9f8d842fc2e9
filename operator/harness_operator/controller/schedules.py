"""Schedules' reconciler: applies what core/schedule.py decides (create a run, delete runs, post Events,
write the status) and says when to look again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

import structlog
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import HarnessSchedule
from harness_operator.controller.kube import PIPELINES, Kube
from harness_operator.core.objects.naming import label_value
from harness_operator.core.schedule import (
    LABEL_SCHEDULE,
    ScheduledRun,
    build_name_taken_event,
    build_scheduled_run_entry,
    decide_schedule,
    is_owned_by,
)

log = structlog.get_logger("harness_operator")
LOCK_STRIPES = 16
# Woken this long after a scheduled time: the cron's latest time is then the new one, whatever the
# rounding of the two clocks (the heap's monotonic one, the wall clock the decision reads).
WAKE_SLACK_SECONDS = 0.5

RunSource = Callable[[str, str], list[ScheduledRun]]  # (namespace, schedule uid) -> the runs it owns


class ScheduleReconciler:
    """One schedule at a time (striped locks): the schedule read fresh, its runs from the watch index."""

    def __init__(self, kube: Kube, clock: Callable[[], datetime], runs: RunSource | None = None) -> None:
        self.kube = kube
        self.clock = clock
        self.runs = runs
        self._author: str | None = None  # the operator's username, asked once: its runs record it
        self._locks = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Bring the schedule forward; the seconds until it is next due (None: nothing to wait for)."""
        with self._locks[hash((namespace, name)) % LOCK_STRIPES]:
            raw = self.kube.fetch_schedule(namespace, name)
            if raw is None or raw["metadata"].get("deletionTimestamp"):
                return None
            try:
                schedule = HarnessSchedule.model_validate(raw)
            except ValidationError as exc:  # the CRD's schema keeps these out; an old object is skipped
                log.warning("Schedule not readable", schedule=f"{namespace}/{name}", error=str(exc))
                return None
            uid = str(raw["metadata"].get("uid", ""))
            pipelines = schedule.spec.pipeline_template is not None
            if pipelines:  # a few per schedule, read when it is reconciled (no cache of pipelines)
                listed = self.kube.list_pipelines(namespace, f"{LABEL_SCHEDULE}={label_value(name)}")
                entries = [build_scheduled_run_entry(body) for body in listed]
                runs = [e[1] for e in entries if e is not None and e[0] == uid]
            else:
                runs = self.runs(namespace, uid) if self.runs is not None else []
            if self._author is None:
                self._author = self.kube.fetch_username()
            decision = decide_schedule(schedule, runs, self.clock(), self._author)
            for run in decision.delete:
                if pipelines:
                    self.kube.delete_run(namespace, run.name, run.uid, PIPELINES)
                else:
                    self.kube.delete_run(namespace, run.name, run.uid)
            status = decision.status.to_api()
            events = list(decision.events)
            if decision.create is not None and decision.created is not None:
                existing = self.kube.create(decision.create)
                if existing is None:
                    events.append(decision.created)
                elif not is_owned_by(existing, uid):
                    # a run of that name the schedule does not own: never adopted, and the time skipped
                    run_name = decision.create["metadata"]["name"]
                    events.append(build_name_taken_event(schedule, run_name, decision.scheduled))
                    status["active"] = [a for a in status["active"] if a["name"] != run_name]
                # else: created before (a restart, or a watch that lags): nothing to announce again
            for event in events:
                self.kube.create_event(raw, event.type, event.reason, event.message, event.name)
            old = raw.get("status") or {}
            if old != status:
                patch = {**{key: None for key in old if key not in status}, **status}
                self.kube.patch_schedule_status(namespace, name, patch)
            if decision.wake_in is None:
                return None
            return decision.wake_in + WAKE_SLACK_SECONDS
