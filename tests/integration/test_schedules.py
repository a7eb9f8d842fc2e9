"""HarnessSchedules on the real cluster, minute by minute: exactly one run per tick, Forbid waiting while
its run is unfinished, history limits deleting old runs, and the operator killed across a tick creating
the missed run once on restart (or, past startingDeadlineSeconds, a MissedSchedule Warning), and a
deleted schedule taking its runs with it. One test, so the minutes it waits for are waited once."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR
from harness_operator.core.schedule import ANNOTATION_SCHEDULED_TIME, LABEL_SCHEDULE

from .conftest import Api, wait_until
from .operator_env import RELEASE_NAMESPACE, SERVICE_ACCOUNT, OperatorProcess

EVERY_MINUTE = "* * * * *"


def schedule_body(name: str, provider: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessSchedule",
        "metadata": {"name": name},
        "spec": {
            "schedule": EVERY_MINUTE,
            "runTemplate": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"provider": provider, "prompt": "nightly review"},
            },
            **spec,
        },
    }


class Schedules:
    def __init__(self, api: Api) -> None:
        self.api = api

    def create(self, body: dict[str, Any]) -> None:
        self.api.custom.create_namespaced_custom_object(GROUP, VERSION, self.api.ns, "harnessschedules", body)

    def get(self, name: str) -> dict[str, Any]:
        return self.api.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.api.ns, "harnessschedules", name
        )

    def runs(self, name: str) -> list[dict[str, Any]]:
        listed = self.api.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.api.ns, "harnessruns", label_selector=f"{LABEL_SCHEDULE}={name}"
        )
        return sorted(listed["items"], key=lambda r: r["metadata"]["name"])

    def times(self, name: str) -> list[str]:
        """The scheduled time of each of its runs that exists now, oldest first."""
        return [r["metadata"]["annotations"][ANNOTATION_SCHEDULED_TIME] for r in self.runs(name)]

    def events(self, name: str, reason: str) -> list[str]:
        events = self.api.core.list_namespaced_event(
            self.api.ns, field_selector=f"involvedObject.kind=HarnessSchedule,involvedObject.name={name}"
        ).items
        return [e.message for e in events if e.reason == reason]


def minute(when: datetime) -> str:
    return when.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def sleep_until(when: datetime) -> None:
    time.sleep(max(0.0, (when - datetime.now(UTC)).total_seconds()))


def test_minute_ticks_forbid_history_and_a_tick_missed_while_the_operator_was_down(
    api: Api, fake: Callable[..., None], operator: OperatorProcess
) -> None:
    fake("quick", "ok")
    fake("slow", "hang")
    schedules = Schedules(api)
    # Never created in the last seconds of a minute: each step below has most of a minute to happen in.
    if datetime.now(UTC).second > 45:
        sleep_until(datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=1))
    start = datetime.now(UTC)
    tick1 = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    tick2, tick3 = tick1 + timedelta(minutes=1), tick1 + timedelta(minutes=2)
    schedules.create(schedule_body("allow", "quick", successfulRunsHistoryLimit=1))
    schedules.create(schedule_body("forbid", "slow", concurrencyPolicy="Forbid"))
    wait_until(
        lambda: schedules.get("allow").get("status", {}).get("nextScheduleTime") == minute(tick1),
        timeout=20,
        what="the schedule's next time in its status",
    )
    assert schedules.runs("allow") == []  # nothing is due before the first tick after its creation

    # Tick 1: one run each, owned by its schedule, with the template's labels.
    wait_until(
        lambda: schedules.times("allow") == [minute(tick1)] and schedules.times("forbid") == [minute(tick1)],
        timeout=(tick1 - datetime.now(UTC)).total_seconds() + 20,
        what="one run per schedule at tick 1",
    )
    [first] = schedules.runs("allow")
    assert first["metadata"]["labels"]["team"] == "a"
    # created by the operator, as whom admission records it
    assert (
        first["metadata"]["annotations"][ANNOTATION_AUTHOR]
        == f"system:serviceaccount:{RELEASE_NAMESPACE}:{SERVICE_ACCOUNT}"
    )
    owner = first["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("HarnessSchedule", "allow", True)
    api.wait_finished(first["metadata"]["name"])

    # Tick 2: allow creates its second run, and deletes the first once the second succeeded (history 1);
    # forbid waits while its first run hangs.
    wait_until(
        lambda: (
            schedules.times("allow") == [minute(tick2)]
            and api.condition(schedules.runs("allow")[0]["metadata"]["name"], "Succeeded").get("status")
            == "True"
        ),
        timeout=(tick2 - datetime.now(UTC)).total_seconds() + 40,
        what="allow's tick-2 run to succeed and its tick-1 run to be deleted",
    )
    wait_until(
        lambda: schedules.events("forbid", "RunAlreadyActive"),
        timeout=20,
        what="forbid to say its tick-2 time waits",
    )
    assert schedules.times("forbid") == [minute(tick1)]
    status = schedules.get("forbid")["status"]
    assert [a["name"] for a in status["active"]] == [schedules.runs("forbid")[0]["metadata"]["name"]]
    assert status["lastScheduleTime"] == minute(tick1)
    assert schedules.get("allow")["status"]["lastSuccessfulTime"]

    # The operator killed before tick 3, and two schedules made while it is down; it starts again after.
    operator.kill()
    schedules.create(schedule_body("deadline-ok", "quick", startingDeadlineSeconds=120))
    schedules.create(schedule_body("deadline-short", "quick", startingDeadlineSeconds=5))
    sleep_until(tick3 + timedelta(seconds=10))
    assert schedules.runs("deadline-ok") == []
    operator.start()
    wait_until(
        lambda: (
            schedules.times("deadline-ok") == [minute(tick3)] and minute(tick3) in schedules.times("allow")
        ),
        timeout=30,
        what="the tick-3 runs missed while the operator was down",
    )
    wait_until(
        lambda: schedules.events("deadline-short", "MissedSchedule"),
        timeout=20,
        what="a MissedSchedule Warning past the short deadline",
    )
    [missed] = schedules.events("deadline-short", "MissedSchedule")
    assert f"missed the run of {minute(tick3)}" in missed and "past spec.startingDeadlineSeconds 5" in missed
    assert schedules.runs("deadline-short") == []

    # Killed again and restarted at once: the tick-3 run is neither created nor announced twice.
    operator.kill()
    operator.start()
    schedule_of = minute(tick3)
    wait_until(
        lambda: schedules.get("deadline-ok").get("status", {}).get("lastScheduleTime") == schedule_of,
        timeout=20,
        what="deadline-ok's status after the second restart",
    )
    created = [m for m in schedules.events("deadline-ok", "RunCreated") if m.endswith(f"for {schedule_of}")]
    assert len(created) == 1, created
    allow_created = schedules.events("allow", "RunCreated")
    assert len(allow_created) == len(set(allow_created)), allow_created
    # Forbid still waits; its hanging run is cancelled so the namespace's teardown is quick.
    assert schedules.times("forbid") == [minute(tick1)]
    forbid_run = schedules.runs("forbid")[0]["metadata"]["name"]
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", forbid_run, {"spec": {"cancel": True}}
    )
    # A deleted schedule takes its runs with it (they are owned by it: the garbage collector).
    kept = len(schedules.runs("allow"))
    api.custom.delete_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessschedules", "allow", propagation_policy="Foreground"
    )
    wait_until(lambda: not schedules.runs("allow"), timeout=30, what="allow's runs to go with it")
    print(
        f"\nmeasured: runs per tick per schedule 1 (allow {len(allow_created)} created over 3 ticks), "
        f"{kept} left at the end (history 1 and the newest)"
    )
