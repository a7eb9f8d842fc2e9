"""HarnessSchedules (pure): cron times in a zone, the due time and what it creates, Forbid and Replace,
the deadline, history limits, names fixed by the scheduled time."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness_operator.api.crd import build_crds
from harness_operator.api.v1alpha1 import HarnessPipeline, HarnessRun, HarnessSchedule
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR
from harness_operator.core.schedule import (
    ANNOTATION_SCHEDULED_TIME,
    LABEL_SCHEDULE,
    InvalidSchedule,
    ScheduledRun,
    build_name_taken_event,
    decide_schedule,
    is_owned_by,
    parse_cron,
    schedule_owner,
    scheduled_run_name,
)

CREATED = "2026-12-01T07:00:00Z"
NOW = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
OPERATOR = "system:serviceaccount:harness-system:harness-operator"


def schedule(status: dict[str, Any] | None = None, **spec: Any) -> HarnessSchedule:
    body: dict[str, Any] = {
        "metadata": {
            "name": "nightly",
            "namespace": "team-a",
            "uid": "s-uid",
            "generation": 2,
            "creationTimestamp": CREATED,
        },
        "spec": {
            "schedule": "0 * * * *",
            "runTemplate": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"provider": "claude", "prompt": "Review main."},
            },
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return HarnessSchedule.model_validate(body)


def run(name: str, finished: bool = False, succeeded: bool = False, done: str | None = None) -> ScheduledRun:
    return ScheduledRun(name, f"{name}-uid", None, finished, succeeded, done)


def test_the_due_time_creates_its_run_named_by_the_minute_with_the_template_and_the_owner() -> None:
    decision = decide_schedule(schedule(), [], NOW, OPERATOR)
    assert decision.scheduled == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert decision.create is not None
    meta = decision.create["metadata"]
    assert meta["name"] == scheduled_run_name("nightly", decision.scheduled) == "nightly-29935200"
    assert meta["labels"] == {
        "team": "a",
        LABEL_SCHEDULE: "nightly",
        "app.kubernetes.io/managed-by": "harness-operator",
    }
    assert meta["annotations"] == {
        ANNOTATION_SCHEDULED_TIME: "2026-12-01T08:00:00Z",
        ANNOTATION_AUTHOR: OPERATOR,
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessSchedule",
            "name": "nightly",
            "uid": "s-uid",
            "controller": True,
        }
    ]
    HarnessRun.model_validate(decision.create)  # a run the API takes
    assert decision.create["spec"] == {"provider": "claude", "prompt": "Review main."}
    status = decision.status
    assert status.last_schedule_time == "2026-12-01T08:00:00Z"
    assert status.next_schedule_time == "2026-12-01T09:00:00Z"
    assert [a.name for a in status.active] == ["nightly-29935200"]
    assert decision.wake_in == pytest.approx(3600 - 30)
    assert decision.events == []  # the RunCreated event waits for the create to succeed
    assert decision.created is not None
    assert (decision.created.reason, decision.created.message) == (
        "RunCreated",
        "created run nightly-29935200 for 2026-12-01T08:00:00Z",
    )


def test_a_pipeline_template_creates_a_pipeline_owned_by_the_schedule() -> None:
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "serviceAccountName": "runner",
            "steps": [
                {"name": "review", "run": {"spec": {"provider": "claude", "prompt": "Review main."}}},
                {
                    "name": "summary",
                    "after": ["review"],
                    "run": {"spec": {"provider": "codex", "prompt": "Summarize $(steps.review.output)"}},
                },
            ],
        },
    }
    decision = decide_schedule(schedule(runTemplate=None, pipelineTemplate=template), [], NOW, OPERATOR)
    assert decision.create is not None
    pipeline = HarnessPipeline.model_validate(decision.create)  # a pipeline the API takes
    assert decision.create["kind"] == "HarnessPipeline"
    assert decision.create["metadata"]["name"] == "nightly-29935200"
    assert decision.create["metadata"]["labels"][LABEL_SCHEDULE] == "nightly"
    assert decision.create["metadata"]["ownerReferences"][0]["kind"] == "HarnessSchedule"
    assert [s.name for s in pipeline.spec.steps] == ["review", "summary"]
    assert decision.created is not None
    assert decision.created.message == "created pipeline nightly-29935200 for 2026-12-01T08:00:00Z"


def test_a_schedule_takes_exactly_one_template() -> None:
    crd = next(c for c in build_crds().values() if c["spec"]["names"]["kind"] == "HarnessSchedule")
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ]
    assert {
        "rule": "has(self.runTemplate) != has(self.pipelineTemplate)",
        "message": "set exactly one of spec.runTemplate and spec.pipelineTemplate",
    } in rules


def test_a_scheduled_run_records_the_operator_as_its_author_and_never_a_templates_approval() -> None:
    """The operator creates the run, so admission (policy <release>-approvals) takes only its username as
    the author, and refuses a decision written at creation."""
    template = {
        "annotations": {
            ANNOTATION_AUTHOR: "alice",
            "approval.agentharness.dev/decision": "Approved",
            "approval.agentharness.dev/user": "alice",
            "ticket": "T-1",
        }
    }
    spec = {"provider": "claude", "prompt": "Review main."}
    created = decide_schedule(
        schedule(runTemplate={"metadata": template, "spec": spec}), [], NOW, OPERATOR
    ).create
    assert created is not None
    assert created["metadata"]["annotations"] == {
        "ticket": "T-1",
        ANNOTATION_SCHEDULED_TIME: "2026-12-01T08:00:00Z",
        ANNOTATION_AUTHOR: OPERATOR,
    }


def test_a_time_already_handled_creates_nothing_and_waits_for_the_next() -> None:
    decision = decide_schedule(schedule({"lastScheduleTime": "2026-12-01T08:00:00Z"}), [], NOW, OPERATOR)
    assert decision.create is None and decision.wake_in == pytest.approx(3570)


def test_times_missed_while_down_collapse_into_the_latest_one() -> None:
    later = NOW + timedelta(hours=5)  # 08:00 was the last handled; 09:00 .. 13:00 were missed
    decision = decide_schedule(schedule({"lastScheduleTime": "2026-12-01T08:00:00Z"}), [], later, OPERATOR)
    assert decision.scheduled == datetime(2026, 12, 1, 13, 0, tzinfo=UTC)


def test_a_run_created_before_a_restart_is_not_created_again() -> None:
    existing = run("nightly-29935200")
    decision = decide_schedule(schedule(), [existing], NOW, OPERATOR)
    assert decision.create is None
    assert decision.status.last_schedule_time == "2026-12-01T08:00:00Z"


def test_a_time_past_the_starting_deadline_is_skipped_once_with_a_named_event() -> None:
    decision = decide_schedule(schedule(startingDeadlineSeconds=10), [], NOW, OPERATOR)
    assert decision.create is None
    [event] = decision.events
    assert (event.type, event.reason) == ("Warning", "MissedSchedule")
    assert "30s late, past spec.startingDeadlineSeconds 10" in event.message and event.name


def test_forbid_waits_while_a_run_is_unfinished_and_starts_once_it_ended() -> None:
    active = run("nightly-29935140")
    decision = decide_schedule(schedule(concurrencyPolicy="Forbid"), [active], NOW, OPERATOR)
    assert decision.create is None and [e.reason for e in decision.events] == ["RunAlreadyActive"]
    ended = run("nightly-29935140", finished=True, succeeded=True, done="2026-12-01T08:00:20Z")
    assert decide_schedule(schedule(concurrencyPolicy="Forbid"), [ended], NOW, OPERATOR).create is not None


def test_replace_deletes_the_unfinished_runs_then_creates() -> None:
    active = run("nightly-29935140")
    decision = decide_schedule(schedule(concurrencyPolicy="Replace"), [active], NOW, OPERATOR)
    assert decision.create is not None and [r.name for r in decision.delete] == ["nightly-29935140"]
    assert [a.name for a in decision.status.active] == ["nightly-29935200"]


def test_allow_lets_runs_overlap() -> None:
    decision = decide_schedule(schedule(), [run("nightly-29935140")], NOW, OPERATOR)
    assert decision.create is not None and decision.delete == []
    assert [a.name for a in decision.status.active] == ["nightly-29935140", "nightly-29935200"]


def test_history_limits_delete_the_oldest_finished_runs_of_each_kind() -> None:
    runs = [
        run("s1", True, True, "2026-12-01T01:00:00Z"),
        run("s2", True, True, "2026-12-01T02:00:00Z"),
        run("s3", True, True, "2026-12-01T03:00:00Z"),
        run("f1", True, False, "2026-12-01T01:30:00Z"),
        run("f2", True, False, "2026-12-01T02:30:00Z"),
    ]
    status = {"lastScheduleTime": "2026-12-01T08:00:00Z"}
    decision = decide_schedule(
        schedule(status, successfulRunsHistoryLimit=2, failedRunsHistoryLimit=0), runs, NOW, OPERATOR
    )
    assert [r.name for r in decision.delete] == ["s1", "f1", "f2"]
    assert decision.status.last_successful_time == "2026-12-01T03:00:00Z"


def test_a_suspended_schedule_creates_nothing_and_sets_no_wake() -> None:
    decision = decide_schedule(schedule(suspend=True), [], NOW, OPERATOR)
    assert decision.create is None and decision.wake_in is None
    assert decision.status.next_schedule_time is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedule": "every hour"}, "spec.schedule"),
        ({"schedule": "61 * * * *"}, "spec.schedule"),
        ({"schedule": "0 * * * * *"}, "spec.schedule"),
        ({"timeZone": "Mars/Olympus"}, "spec.timeZone"),
    ],
)
def test_an_invalid_schedule_is_not_ready_and_names_the_field(spec: dict[str, Any], field: str) -> None:
    decision = decide_schedule(schedule(**spec), [], NOW, OPERATOR)
    [ready] = decision.status.conditions
    assert (ready.type, ready.status, ready.reason) == ("Ready", "False", "InvalidSchedule")
    assert ready.message.startswith(field + ":")
    assert decision.create is None and decision.wake_in is None


def test_descriptors_and_time_zones_follow_the_wall_clock() -> None:
    assert parse_cron("@daily", None).following(NOW) == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    berlin = parse_cron("30 2 * * *", "Europe/Berlin")
    assert berlin.following(NOW) == datetime(2026, 12, 2, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert berlin.latest(NOW) == datetime(2026, 12, 1, 1, 30, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert berlin.following(summer) == datetime(2026, 7, 2, 0, 30, tzinfo=UTC)  # 02:30 CEST
    with pytest.raises(InvalidSchedule):
        parse_cron("@every 5m", None)


def test_the_latest_time_includes_a_time_equal_to_now() -> None:
    cron = parse_cron("*/15 * * * *", None)
    exact = datetime(2026, 12, 1, 8, 15, tzinfo=UTC)
    assert cron.latest(exact) == exact
    assert cron.latest(exact - timedelta(milliseconds=500)) == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_ownership_is_the_controller_reference_to_the_schedule_uid() -> None:
    created = decide_schedule(schedule(), [], NOW, OPERATOR).create
    assert created is not None
    assert schedule_owner(created) == ("nightly", "s-uid")
    assert is_owned_by(created, "s-uid") and not is_owned_by(created, "other-uid")
    squatter = {"metadata": {"name": "nightly-29935200", "ownerReferences": []}}
    assert schedule_owner(squatter) is None and not is_owned_by(squatter, "s-uid")
    not_controller = {"metadata": {"ownerReferences": [{**created["metadata"]["ownerReferences"][0]}]}}
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert schedule_owner(not_controller) is None


def test_a_taken_name_is_a_named_warning_that_says_what_to_do() -> None:
    when = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    event = build_name_taken_event(schedule(), "nightly-29935200", when)
    assert (event.type, event.reason) == ("Warning", "RunNameTaken")
    assert "run nightly-29935200 exists and is not this schedule's; delete or rename it" in event.message
    assert event.name and event.name == build_name_taken_event(schedule(), "x", when).name
