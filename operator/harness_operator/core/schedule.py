"""HarnessSchedules: which run a scheduled time creates, which runs go, and the schedule's status (pure).

CronJob's semantics where it has them: the most recent scheduled time since the last one is due (times
missed while the operator was down collapse into that one), within `startingDeadlineSeconds`; Forbid
leaves a due time waiting while a run of the schedule is unfinished (it starts once that run ends, if
still within the deadline); Replace deletes the unfinished runs first. A run's name is fixed by its
scheduled time, so a restart never creates one twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    API_VERSION,
    GROUP,
    ConcurrencyPolicy,
    HarnessSchedule,
    HarnessScheduleStatus,
    ScheduledRunRef,
)
from harness_operator.contract.times import parse_time, timestamp
from harness_operator.core.objects.conditions import FALSE, READY, SUCCEEDED, TRUE, set_condition
from harness_operator.core.objects.events import PlannedEvent
from harness_operator.core.objects.naming import (
    ANNOTATION_AUTHOR,
    APPROVAL_PREFIX,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    fit_name,
    label_value,
)

LABEL_SCHEDULE = f"{GROUP}/schedule"
ANNOTATION_SCHEDULED_TIME = f"{GROUP}/scheduled-time"
# The cron descriptors CronJob accepts, as the five fields they stand for.
DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class InvalidSchedule(ValueError):
    """The schedule or its time zone cannot be read; the message names the field and the fix."""


@dataclass(frozen=True)
class Cron:
    expression: str
    zone: ZoneInfo

    def latest(self, now: datetime) -> datetime:
        """The last scheduled time at or before `now` (cronsim's reverse walk starts before its start)."""
        start = now.astimezone(self.zone).replace(microsecond=0) + timedelta(seconds=1)
        return next(CronSim(self.expression, start, reverse=True)).astimezone(UTC)

    def following(self, now: datetime) -> datetime:
        """The first scheduled time after `now`."""
        return next(CronSim(self.expression, now.astimezone(self.zone))).astimezone(UTC)


def parse_cron(schedule: str, time_zone: str | None) -> Cron:
    """The schedule as cron fields in its zone; InvalidSchedule naming the field otherwise."""
    expression = DESCRIPTORS.get(schedule.strip(), schedule.strip())
    if len(expression.split()) != 5:
        raise InvalidSchedule(
            f"spec.schedule: {schedule!r} is not five cron fields (minute hour day-of-month month "
            "day-of-week, e.g. '0 2 * * *') or one of " + ", ".join(DESCRIPTORS)
        )
    try:
        zone = ZoneInfo(time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(
            f"spec.timeZone: {time_zone!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York)"
        ) from exc
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=zone)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidSchedule(f"spec.schedule: {schedule!r} is not a valid cron schedule: {exc}") from exc
    return Cron(expression, zone)


@dataclass(frozen=True)
class ScheduledRun:
    """A run the schedule owns (controller owner reference), as the run cache holds it."""

    name: str
    uid: str
    scheduled_time: str | None
    finished: bool
    succeeded: bool
    completion_time: str | None


def schedule_owner(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, UID) of the HarnessSchedule that controls the run; None for any other run."""
    meta = body.get("metadata") or {}
    owner = next(
        (
            r
            for r in meta.get("ownerReferences") or []
            if r.get("controller")
            and r.get("kind") == "HarnessSchedule"
            and r.get("apiVersion") == API_VERSION
        ),
        None,
    )
    return None if owner is None else (str(owner.get("name")), str(owner.get("uid")))


def build_scheduled_run_entry(body: Mapping[str, Any]) -> tuple[str, ScheduledRun] | None:
    """(owner schedule's UID, the run) of a run a HarnessSchedule controls; None for any other run."""
    owner = schedule_owner(body)
    if owner is None:
        return None
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    succeeded = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == SUCCEEDED), None
    )
    entry = ScheduledRun(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        scheduled_time=(meta.get("annotations") or {}).get(ANNOTATION_SCHEDULED_TIME),
        finished=succeeded in (TRUE, FALSE),
        succeeded=succeeded == TRUE,
        completion_time=status.get("completionTime"),
    )
    return owner[1], entry


@dataclass(frozen=True)
class ScheduleDecision:
    """What to do now: the run to create (for `scheduled`), the runs to delete, the Events, the status,
    and when to look again."""

    status: HarnessScheduleStatus
    create: dict[str, Any] | None = None
    scheduled: datetime | None = None
    delete: list[ScheduledRun] = field(default_factory=list)
    events: list[PlannedEvent] = field(default_factory=list)
    wake_in: float | None = None
    created: PlannedEvent | None = None  # posted only when `create` is created now (not found there)


def scheduled_run_name(schedule: str, when: datetime) -> str:
    """The run of `schedule` for time `when`: its name says the minute (CronJob's rule)."""
    return fit_name(schedule, f"-{int(when.timestamp()) // 60}", 253)


def build_scheduled_run(schedule: HarnessSchedule, when: datetime, author: str) -> dict[str, Any]:
    """The HarnessRun (or, from a pipelineTemplate, the HarnessPipeline) the schedule creates for `when`:
    the template's spec, labels and annotations (but an approval's, written only once the run awaits one),
    the schedule's label and controller owner reference, the scheduled time, and `author`: the operator's
    own username, as which it creates it."""
    meta = schedule.metadata
    template = schedule.spec.pipeline_template or schedule.spec.run_template
    assert template is not None  # the CRD holds exactly one of the two
    labels = dict(template.metadata.labels if template.metadata else {})
    annotations = {
        key: value
        for key, value in (template.metadata.annotations if template.metadata else {}).items()
        if not key.startswith(APPROVAL_PREFIX)
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "HarnessPipeline" if schedule.spec.pipeline_template else "HarnessRun",
        "metadata": {
            "name": scheduled_run_name(meta["name"], when),
            "namespace": meta["namespace"],
            "labels": {**labels, LABEL_SCHEDULE: label_value(meta["name"]), LABEL_MANAGED_BY: MANAGED_BY},
            "annotations": {
                **annotations,
                ANNOTATION_SCHEDULED_TIME: timestamp(when),
                ANNOTATION_AUTHOR: author,
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "HarnessSchedule",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": template.spec.to_api(),
    }


def _history(runs: list[ScheduledRun], keep: int) -> list[ScheduledRun]:
    """Finished runs beyond the newest `keep` (by completion, then scheduled time)."""
    ordered = sorted(runs, key=lambda r: (r.completion_time or "", r.scheduled_time or "", r.name))
    return ordered[: max(0, len(ordered) - keep)]


def _event_name(schedule: HarnessSchedule, reason: str, when: datetime) -> str:
    meta = schedule.metadata
    return fit_name(
        f"{meta['name']}.{meta.get('uid', '')}", f".{reason.lower()}.{int(when.timestamp())}", 253
    )


def decide_schedule(
    schedule: HarnessSchedule, runs: list[ScheduledRun], now: datetime, author: str
) -> ScheduleDecision:
    """The schedule's next step from its spec, its status, the runs it owns and the time; a run it creates
    records `author` (the operator's username)."""
    spec, meta = schedule.spec, schedule.metadata
    previous = schedule.status or HarnessScheduleStatus()
    generation = meta.get("generation")
    active = [r for r in runs if not r.finished]
    succeeded = [r for r in runs if r.finished and r.succeeded]
    failed = [r for r in runs if r.finished and not r.succeeded]
    delete = _history(succeeded, spec.successful_runs_history_limit)
    delete += _history(failed, spec.failed_runs_history_limit)
    last_success = max((r.completion_time for r in succeeded if r.completion_time), default=None)
    base = previous.model_copy(
        update={
            "observed_generation": generation,
            "last_successful_time": last_success or previous.last_successful_time,
            "active": [ScheduledRunRef(name=r.name, scheduled_time=r.scheduled_time) for r in active],
        }
    )
    try:
        cron = parse_cron(spec.schedule, spec.time_zone)
    except InvalidSchedule as exc:
        conditions = set_condition(
            previous.conditions, READY, FALSE, Reason.InvalidSchedule, str(exc), generation, now
        )
        status = base.model_copy(update={"conditions": conditions, "next_schedule_time": None})
        return ScheduleDecision(status, delete=delete)
    conditions = set_condition(
        previous.conditions, READY, TRUE, Reason.Scheduled, "runs are created on schedule", generation, now
    )
    status = base.model_copy(update={"conditions": conditions})
    if spec.suspend:
        return ScheduleDecision(status.model_copy(update={"next_schedule_time": None}), delete=delete)
    following = cron.following(now)
    status = status.model_copy(update={"next_schedule_time": timestamp(following)})
    wake_in = (following - now).total_seconds()
    since = parse_time(previous.last_schedule_time) or parse_time(meta.get("creationTimestamp")) or now
    due = cron.latest(now)
    if due <= since:
        return ScheduleDecision(status, delete=delete, wake_in=wake_in)
    name = scheduled_run_name(meta["name"], due)
    if any(r.name == name for r in runs):  # created before a restart; the status did not say so yet
        return ScheduleDecision(
            status.model_copy(update={"last_schedule_time": timestamp(due)}), delete=delete, wake_in=wake_in
        )
    late = (now - due).total_seconds()
    deadline = spec.starting_deadline_seconds
    if deadline is not None and late > deadline:
        message = (
            f"missed the run of {timestamp(due)}: {int(late)}s late, past spec.startingDeadlineSeconds "
            f"{deadline}"
        )
        event = PlannedEvent("Warning", Reason.MissedSchedule, message, _event_name(schedule, "missed", due))
        return ScheduleDecision(status, delete=delete, events=[event], wake_in=wake_in)
    if active and spec.concurrency_policy == ConcurrencyPolicy.Forbid:
        message = (
            f"the run of {timestamp(due)} waits: run {active[0].name} is unfinished and "
            "spec.concurrencyPolicy is Forbid"
        )
        event = PlannedEvent("Normal", Reason.RunAlreadyActive, message, _event_name(schedule, "active", due))
        return ScheduleDecision(status, delete=delete, events=[event], wake_in=wake_in)
    if active and spec.concurrency_policy == ConcurrencyPolicy.Replace:
        delete += active
        status = status.model_copy(update={"active": []})
    run = build_scheduled_run(schedule, due, author)
    created = ScheduledRunRef(name=name, scheduled_time=timestamp(due))
    status = status.model_copy(
        update={"last_schedule_time": timestamp(due), "active": [*status.active, created]}
    )
    what = "pipeline" if spec.pipeline_template else "run"
    event = PlannedEvent("Normal", Reason.RunCreated, f"created {what} {name} for {timestamp(due)}")
    return ScheduleDecision(status, run, due, delete, [], wake_in, created=event)


def is_owned_by(run: Mapping[str, Any], schedule_uid: str) -> bool:
    """The run's controller owner is the schedule with that UID."""
    owner = schedule_owner(run)
    return owner is not None and owner[1] == schedule_uid


def build_name_taken_event(schedule: HarnessSchedule, run_name: str, when: datetime | None) -> PlannedEvent:
    """A Warning: the run for a scheduled time has a name a run the schedule does not own holds."""
    message = (
        f"the run of {timestamp(when) if when else 'this time'} is not created: run {run_name} exists and "
        "is not this schedule's; delete or rename it (the next times are not affected)"
    )
    name = _event_name(schedule, "taken", when) if when else None
    return PlannedEvent("Warning", Reason.RunNameTaken, message, name)
