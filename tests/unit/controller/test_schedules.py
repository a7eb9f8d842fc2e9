"""The schedules' reconciler against an in-memory API seam (the cluster tests run the real one): a run
created once however often a time is reconciled, a name squatted by a run it does not own never adopted,
history deleted by UID, the status written only when it changed."""

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from harness_operator.controller.schedules import WAKE_SLACK_SECONDS, ScheduleReconciler
from harness_operator.core.schedule import ScheduledRun, build_scheduled_run_entry

NOW = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
RUN = "nightly-29935200"  # the run of 08:00


class ApiServer:
    """What the reconciler calls on Kube, kept in dicts: one schedule, its runs, Events, status writes."""

    def __init__(self, schedule: dict[str, Any]) -> None:
        self.schedule = schedule
        self.runs: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str | None]] = []
        self.patches: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []

    def fetch_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.schedule)

    def fetch_username(self) -> str:
        return "system:serviceaccount:harness-system:harness-operator"

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        name = obj["metadata"]["name"]
        if name in self.runs:
            return copy.deepcopy(self.runs[name])
        self.runs[name] = {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "uid": f"{name}-uid"}}
        return None

    def delete_run(self, namespace: str, name: str, uid: str) -> None:
        self.deleted.append((name, uid))
        if self.runs.get(name, {}).get("metadata", {}).get("uid") == uid:
            del self.runs[name]

    def create_event(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, name: str | None
    ) -> None:
        assert obj["kind"] == "HarnessSchedule"  # the Event is on the schedule
        self.events.append((reason, message, name))

    def patch_schedule_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)
        status = {**self.schedule.get("status", {}), **patch}
        self.schedule["status"] = {k: v for k, v in status.items() if v is not None}


def schedule_body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessSchedule",
        "metadata": {
            "name": "nightly",
            "namespace": "team-a",
            "uid": "s-uid",
            "generation": 1,
            "creationTimestamp": "2026-12-01T07:30:00Z",
        },
        "spec": {
            "schedule": "0 * * * *",
            "runTemplate": {"spec": {"provider": "claude", "prompt": "Review main."}},
            **spec,
        },
    }


def reconciler(api: ApiServer, index: list[ScheduledRun] | None = None) -> ScheduleReconciler:
    """`index`: what the watch index holds (None: the API server's runs, as a caught-up watch has them)."""

    def runs(namespace: str, uid: str) -> list[ScheduledRun]:
        if index is not None:
            return index
        entries = [build_scheduled_run_entry(r) for r in api.runs.values()]
        return [e[1] for e in entries if e is not None and e[0] == uid]

    return ScheduleReconciler(api, lambda: NOW, runs)  # type: ignore[arg-type]


def test_a_due_time_creates_its_run_once_announces_it_once_and_writes_the_status() -> None:
    api = ApiServer(schedule_body())
    wake = reconciler(api).reconcile("team-a", "nightly")
    assert list(api.runs) == [RUN]
    assert [e[0] for e in api.events] == ["RunCreated"]
    status = api.schedule["status"]
    assert status["lastScheduleTime"] == "2026-12-01T08:00:00Z"
    assert status["nextScheduleTime"] == "2026-12-01T09:00:00Z"
    assert status["active"] == [{"name": RUN, "scheduledTime": "2026-12-01T08:00:00Z"}]
    assert wake == pytest.approx(3570 + WAKE_SLACK_SECONDS)
    # Again, with the status written: nothing created, announced or written.
    reconciler(api).reconcile("team-a", "nightly")
    assert (list(api.runs), len(api.events), len(api.patches)) == ([RUN], 1, 1)


def test_a_stale_status_and_a_lagging_index_create_nothing_twice() -> None:
    """The status write and the run's watch event may both lag: the run's fixed name stops a second."""
    api = ApiServer(schedule_body())
    reconciler(api).reconcile("team-a", "nightly")
    api.schedule.pop("status")  # as read before our write reached the reader
    reconciler(api, index=[]).reconcile("team-a", "nightly")
    assert list(api.runs) == [RUN]
    assert [e[0] for e in api.events] == ["RunCreated"]  # not announced again


def test_a_name_held_by_a_run_the_schedule_does_not_own_is_never_adopted() -> None:
    api = ApiServer(schedule_body())
    squatter = {"kind": "HarnessRun", "metadata": {"name": RUN, "uid": "squat-uid"}, "spec": {}}
    api.runs[RUN] = squatter
    reconciler(api, index=[]).reconcile("team-a", "nightly")
    assert api.runs[RUN] is squatter
    [(reason, message, name)] = api.events
    assert reason == "RunNameTaken" and f"run {RUN} exists and is not this schedule's" in message and name
    status = api.schedule["status"]
    assert status["active"] == [] and status["lastScheduleTime"] == "2026-12-01T08:00:00Z"  # skipped


def test_history_beyond_the_limit_is_deleted_by_uid() -> None:
    api = ApiServer(schedule_body(successfulRunsHistoryLimit=1))
    done = [
        ScheduledRun(f"nightly-{m}", f"uid-{m}", None, True, True, f"2026-12-01T0{h}:00:05Z")
        for m, h in ((29935080, 6), (29935140, 7))
    ]
    reconciler(api, index=done).reconcile("team-a", "nightly")
    assert api.deleted == [("nightly-29935080", "uid-29935080")]
    assert api.schedule["status"]["lastSuccessfulTime"] == "2026-12-01T07:00:05Z"


def test_a_suspended_schedule_creates_nothing_and_is_not_woken() -> None:
    api = ApiServer(schedule_body(suspend=True))
    assert reconciler(api).reconcile("team-a", "nightly") is None
    assert api.runs == {} and api.events == []
    assert "nextScheduleTime" not in api.schedule["status"]


def test_an_api_error_on_create_reaches_the_caller_and_nothing_is_announced() -> None:
    api = ApiServer(schedule_body())

    def refuse(obj: dict[str, Any]) -> None:
        raise ApiException(status=503)

    api.create = refuse  # type: ignore[assignment]
    with pytest.raises(ApiException):
        reconciler(api).reconcile("team-a", "nightly")
    assert api.events == [] and api.patches == []  # the time stays due: the retry creates it


def test_a_deleted_schedule_is_left_alone() -> None:
    api = ApiServer(schedule_body())
    api.schedule["metadata"]["deletionTimestamp"] = "2026-12-01T08:00:10Z"
    assert reconciler(api).reconcile("team-a", "nightly") is None
    assert api.runs == {} and api.patches == []
