"""The run cache: each run's charge, queue entry and schedule entry by namespace; which of its changes
reconcile it (first seen or a new generation, while unfinished: never its own status write); a relist's
changes against what was held; reads wait for the first list."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.api.common import API_VERSION
from harness_operator.controller.run_cache import RUN_KIND, RunStore, is_unfinished

ENDED = {
    "completionTime": "2026-12-04T07:00:00Z",
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
}
RUNNING = {
    "phase": "Running",
    "reason": "Running",
    "conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}],
    "attempts": [{"index": 0, "provider": "claude", "jobName": "j", "podName": "j-pod"}],
}


def run(
    name: str, generation: int = 1, namespace: str = "team", status: dict | None = None, **meta: Any
) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "generation": generation,
            "creationTimestamp": "2026-12-04T07:00:00Z",
            **meta,
        },
        "status": status or {},
    }


def scheduled(name: str, schedule_uid: str, status: dict | None = None) -> dict:
    owner = {"apiVersion": API_VERSION, "kind": "HarnessSchedule", "name": "nightly", "uid": schedule_uid}
    return run(name, status=status, ownerReferences=[{**owner, "controller": True}])


def listed(*runs: dict, expiry: Any = None) -> RunStore:
    store = RunStore() if expiry is None else RunStore(expiry)
    store.replace(RUN_KIND, None, list(runs))
    return store


def test_reads_wait_for_the_first_list() -> None:
    store = RunStore()
    with pytest.raises(TimeoutError, match="HarnessRuns has not synced"):
        store.wait_synced(0.01)
    store.replace(RUN_KIND, None, [])
    assert store.charges("team") == [] and store.queue("team") == [] and store.every_run() == []


def test_each_run_is_charged_queued_until_it_starts_and_found_by_its_schedule() -> None:
    store = listed(
        run("queued"),
        run("done", status=ENDED),
        scheduled("nightly-1", "sched-uid", status=ENDED),
        run("elsewhere", namespace="other"),
    )
    assert sorted((c.name, c.finished) for c in store.charges("team")) == [
        ("done", True),
        ("nightly-1", True),
        ("queued", False),
    ]
    assert [e.name for e in store.queue("team")] == ["queued"]
    assert [(r.name, r.succeeded) for r in store.scheduled("team", "sched-uid")] == [("nightly-1", True)]
    assert store.scheduled("team", "another-schedule") == []
    assert [c.name for c in store.charges("other")] == ["elsewhere"]


@pytest.mark.parametrize(
    ("conditions", "unfinished"),
    [
        ([], True),
        ([{"type": "Succeeded", "status": "Unknown", "reason": "Queued"}], True),
        ([{"type": "Succeeded", "status": "True", "reason": "Succeeded"}], False),
        ([{"type": "Succeeded", "status": "False", "reason": "Cancelled"}], False),
    ],
)
def test_only_a_run_without_a_final_succeeded_condition_is_unfinished(
    conditions: list[dict[str, str]], unfinished: bool
) -> None:
    assert is_unfinished({"status": {"conditions": conditions}}) is unfinished


def test_a_new_run_is_reconciled_its_own_status_writes_are_not_and_a_spec_change_is() -> None:
    store = listed()
    assert store.apply(RUN_KIND, "ADDED", run("a")).reconcile
    assert not store.apply(RUN_KIND, "MODIFIED", run("a", status=RUNNING)).reconcile  # our status write
    changed = store.apply(RUN_KIND, "MODIFIED", run("a", generation=2, status=RUNNING))  # spec.cancel
    assert changed.reconcile and not changed.deleted and changed.entry.progress
    assert not store.apply(RUN_KIND, "MODIFIED", run("a", generation=3, status=ENDED)).reconcile  # over
    gone = store.apply(RUN_KIND, "DELETED", run("a", generation=3, status=ENDED))
    assert gone.deleted and not gone.reconcile and store.charges("team") == []
    again = store.apply(RUN_KIND, "ADDED", {**run("a"), "metadata": {**run("a")["metadata"], "uid": "new"}})
    assert again.reconcile  # created again under the same name: a new run


def test_a_run_first_seen_by_a_modification_is_reconciled() -> None:
    """An event that the watch saw while this replica did not hold the run (a standby's cache, a relist
    in between) still reconciles a run not seen before."""
    store = listed()
    assert store.apply(RUN_KIND, "MODIFIED", run("a", status=RUNNING)).reconcile


def test_an_entry_says_if_its_progress_is_read_its_expiry_and_its_schedule() -> None:
    def expiry(body: dict, now: datetime) -> float | None:
        return 30.0 if body["metadata"]["name"] == "done" else None

    before = datetime.now(UTC).timestamp()
    store = listed(run("running", status=RUNNING), run("done", status=ENDED), expiry=expiry)
    store.apply(RUN_KIND, "ADDED", scheduled("nightly-1", "sched-uid", status=ENDED))
    entries = {c.name: c.entry for c in store.every_run()}
    assert entries["running"].progress and entries["running"].expires_at is None
    assert not entries["done"].progress and entries["done"].expires_at is not None
    assert before + 30 <= entries["done"].expires_at <= datetime.now(UTC).timestamp() + 30
    assert entries["nightly-1"].schedule == "nightly" and entries["done"].schedule is None
    assert entries["done"].uid == "uid-done"


def test_every_run_reconciles_the_unfinished_ones_as_a_new_leader_does() -> None:
    store = listed(run("queued"), run("running", status=RUNNING), run("done", status=ENDED))
    assert sorted((c.name, c.reconcile) for c in store.every_run()) == [
        ("done", False),
        ("queued", True),
        ("running", True),
    ]


def test_a_relist_reports_what_changed_while_the_watch_was_down() -> None:
    store = listed(run("same"), run("gone"), run("spec", status=RUNNING), run("b", namespace="other"))
    changes = store.replace(
        RUN_KIND, "team", [run("same"), run("spec", generation=2, status=RUNNING), run("new")]
    )
    assert sorted((c.name, c.deleted, c.reconcile) for c in changes) == [
        ("gone", True, False),
        ("new", False, True),
        ("spec", False, True),
    ]
    assert sorted(c.name for c in store.charges("team")) == ["new", "same", "spec"]
    assert [c.name for c in store.charges("other")] == ["b"]  # another namespace's watch: untouched


def test_an_approval_decision_annotated_reconciles_the_run_awaiting_it() -> None:
    """`harnessctl approve|reject` writes annotations (no new generation): the run awaiting it moves."""
    awaiting = {
        "phase": "AwaitingApproval",
        "conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "AwaitingApproval"}],
    }
    store = listed(run("a", status=awaiting))
    other = run("a", status=awaiting, annotations={"note": "x"})
    assert not store.apply(RUN_KIND, "MODIFIED", other).reconcile  # another annotation: nothing to do
    notes = {"note": "x", "approval.agentharness.dev/decision": "Approved"}
    assert store.apply(RUN_KIND, "MODIFIED", run("a", status=awaiting, annotations=notes)).reconcile
    assert not store.apply(RUN_KIND, "MODIFIED", run("a", status=awaiting, annotations=notes)).reconcile
    ended = run("a", status=ENDED, annotations={"approval.agentharness.dev/decision": "Rejected"})
    assert not store.apply(RUN_KIND, "MODIFIED", ended).reconcile  # over


def test_the_version_the_watch_last_delivered_is_kept_for_each_run() -> None:
    """The reconciler reads a run afresh unless the watch has delivered the version it was last answered."""
    store = RunStore()
    assert store.resource_version("team", "a") is None  # nothing delivered (nor listed) yet
    store.replace(RUN_KIND, None, [run("a", resourceVersion="10")])
    assert store.resource_version("team", "a") == "10"
    store.apply(RUN_KIND, "MODIFIED", run("a", status=RUNNING, resourceVersion="12"))
    assert store.resource_version("team", "a") == "12"
    store.apply(RUN_KIND, "DELETED", run("a", resourceVersion="13"))
    assert store.resource_version("team", "a") is None


def test_a_new_unfinished_runs_body_is_handed_over_once_and_only_while_it_is_unfinished() -> None:
    """The reconciler's first read of a new run is the watch's delivery: the newest one until it is taken,
    none of a finished or deleted run, and none kept of a run the store already held."""
    store = RunStore()
    store.replace(RUN_KIND, None, [run("listed", resourceVersion="5"), run("done", status=ENDED)])
    listed = store.take_delivered("team", "listed")
    assert listed is not None and listed["metadata"]["resourceVersion"] == "5"
    assert store.take_delivered("team", "listed") is None  # once
    assert store.take_delivered("team", "done") is None  # finished: never kept
    store.apply(RUN_KIND, "ADDED", run("a", resourceVersion="10"))
    store.apply(RUN_KIND, "MODIFIED", run("a", status=RUNNING, resourceVersion="11"))
    taken = store.take_delivered("team", "a")
    assert taken is not None and taken["metadata"]["resourceVersion"] == "11"  # the newest
    store.apply(RUN_KIND, "MODIFIED", run("a", status=RUNNING, resourceVersion="12"))
    assert store.take_delivered("team", "a") is None  # taken: later versions are read, not kept
    store.apply(RUN_KIND, "ADDED", run("b", resourceVersion="20"))
    store.apply(RUN_KIND, "MODIFIED", run("b", status=ENDED, resourceVersion="21"))
    assert store.take_delivered("team", "b") is None  # ended before it was taken: let go of
    store.apply(RUN_KIND, "ADDED", run("c", resourceVersion="30"))
    store.apply(RUN_KIND, "DELETED", run("c", resourceVersion="31"))
    assert store.take_delivered("team", "c") is None  # gone
    store.apply(RUN_KIND, "ADDED", run("d", resourceVersion="40"))
    store.replace(RUN_KIND, None, [])
    assert store.take_delivered("team", "d") is None  # gone while the watch was down
