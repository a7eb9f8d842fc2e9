"""The run cache: each run's charge, queue entry and schedule entry by namespace; the newer of two copies
(the watch's, kopf's) wins; a deleted run stays deleted; reads wait for the first list."""

from __future__ import annotations

from typing import Any

import pytest

from harness_operator.api.common import API_VERSION
from harness_operator.controller.run_cache import RUN_KIND, RunStore

ENDED = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]}


def run(name: str, version: int, namespace: str = "team", status: dict | None = None, **meta: Any) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "creationTimestamp": f"2026-12-04T07:00:{version:02d}Z",
            **meta,
        },
        "status": status or {},
    }


def scheduled(name: str, version: int, schedule_uid: str, status: dict | None = None) -> dict:
    owner = {"apiVersion": API_VERSION, "kind": "HarnessSchedule", "name": "nightly", "uid": schedule_uid}
    return run(name, version, status=status, ownerReferences=[{**owner, "controller": True}])


def listed(*runs: dict) -> RunStore:
    store = RunStore()
    store.replace(RUN_KIND, None, list(runs))
    return store


def test_reads_wait_for_the_first_list() -> None:
    store = RunStore()
    with pytest.raises(TimeoutError, match="HarnessRuns has not synced"):
        store.wait_synced(0.01)
    store.replace(RUN_KIND, None, [])
    assert store.charges("team") == [] and store.queue("team") == []


def test_each_run_is_charged_queued_until_it_starts_and_found_by_its_schedule() -> None:
    store = listed(
        run("queued", 1),
        run("done", 2, status=ENDED),
        scheduled("nightly-1", 3, "sched-uid", status=ENDED),
        run("elsewhere", 4, namespace="other"),
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


def test_the_newer_copy_wins_whichever_source_gives_it_first() -> None:
    store = listed(run("a", 5))
    store.apply(RUN_KIND, "MODIFIED", run("a", 7, status=ENDED))  # kopf's event, before the watch's
    store.apply(RUN_KIND, "MODIFIED", run("a", 6))  # the watch's, older
    assert [c.finished for c in store.charges("team")] == [True] and store.queue("team") == []


def test_a_deleted_run_is_not_brought_back_by_a_late_copy_but_a_new_one_of_its_name_is_kept() -> None:
    store = listed(run("a", 5))
    store.apply(RUN_KIND, "DELETED", run("a", 8))
    store.apply(RUN_KIND, "MODIFIED", run("a", 7))  # the other source, late
    assert store.charges("team") == []
    store.apply(RUN_KIND, "ADDED", run("a", 9))  # created again
    assert [c.name for c in store.charges("team")] == ["a"]


def test_a_list_replaces_its_namespace_keeps_a_newer_copy_and_forgets_the_tombstones() -> None:
    store = listed(run("a", 5), run("gone", 6), run("b", 1, namespace="other"))
    store.apply(RUN_KIND, "MODIFIED", run("a", 12, status=ENDED))
    store.apply(RUN_KIND, "DELETED", run("gone", 11))
    store.replace(RUN_KIND, "team", [run("a", 10), run("gone", 3)])  # a list older than both events
    assert [c.finished for c in store.charges("team") if c.name == "a"] == [True]
    assert [c.name for c in store.charges("other")] == ["b"]  # another namespace's watch: untouched
    store.replace(RUN_KIND, "team", [run("a", 13)])
    store.apply(RUN_KIND, "MODIFIED", run("gone", 4))  # its tombstone went with the list
    assert sorted(c.name for c in store.charges("team")) == ["a", "gone"]
