"""The watch caches of Jobs and Pods: slim copies, per-run lookup, in-flight counts, relists, workers."""

import threading
from collections.abc import Iterator
from typing import Any

from harness_operator.controller.cache import Change, ChildStore, KeyedQueue, Watcher, slim_job, slim_pod
from harness_operator.core.status.observed import observe_attempt

RUN_ANNOTATION = "agentharness.dev/run-name"


def meta(name: str, run: str = "r", uid: str = "job-uid") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "uid": uid,
        "resourceVersion": "7",
        "creationTimestamp": "2026-12-01T07:00:00Z",
        "labels": {
            "app.kubernetes.io/managed-by": "harness-operator",
            "agentharness.dev/run": run,
            "agentharness.dev/attempt": "1",
        },
        "annotations": {RUN_ANNOTATION: run, "kubectl.kubernetes.io/last-applied-configuration": "x" * 5000},
        "ownerReferences": [{"uid": "run-uid", "controller": True, "kind": "HarnessRun", "name": run}],
        "managedFields": [{"manager": "harness-operator", "fieldsV1": {"f:spec": {}}}],
    }


def job(name: str = "r-a1", run: str = "r", conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, run),
        "spec": {
            "suspend": False,
            "template": {
                "spec": {"containers": [{"name": "agent", "env": [{"name": "X", "value": "y" * 4000}]}]}
            },
        },
        "status": {"startTime": "2026-12-01T07:00:01Z", "active": 1, "conditions": conditions or []},
    }


COMPLETE = [{"type": "Complete", "status": "True", "lastProbeTime": "t", "reason": "Done"}]


def pod(name: str = "r-a1-x", terminated: dict[str, Any] | None = None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {"startedAt": "t"}}
    return {
        "kind": "Pod",
        "metadata": {**meta(name), "ownerReferences": [{"uid": "job-uid", "controller": True}]},
        "spec": {"containers": [{"name": "agent", "image": "i"}], "volumes": [{"name": "v"}] * 20},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "agent", "state": state, "image": "i", "imageID": "sha"},
                {"name": "sidecar", "state": {}},
            ],
        },
    }


def test_slim_copies_drop_what_the_reconciler_does_not_read() -> None:
    slim = slim_job(job())
    assert "managedFields" not in slim["metadata"]
    assert slim["metadata"]["annotations"] == {RUN_ANNOTATION: "r"}
    assert slim["spec"] == {"suspend": False}
    assert len(str(slim)) < len(str(job())) / 10
    slim_p = slim_pod(pod())
    assert [s["name"] for s in slim_p["status"]["containerStatuses"]] == ["agent"]
    assert slim_p["spec"] == {"initContainers": []}  # their names only: whether the pod publishes


def test_an_attempt_reads_the_same_from_slim_copies() -> None:
    """observe_attempt on the slim Job and Pod gives what it gives on the objects as stored."""
    terminated = {"exitCode": 3, "reason": "Error", "message": ""}
    for j, p in ((job(), pod()), (job(conditions=COMPLETE), pod(terminated=terminated))):
        full = observe_attempt(1, "claude", j, [p])
        assert observe_attempt(1, "claude", slim_job(j), [slim_pod(p)]) == full
    # A finished attempt's steps for its trace: the scheduling's time survives the slimming.
    ended = pod(
        terminated={**terminated, "startedAt": "2026-12-01T07:00:05Z", "finishedAt": "2026-12-01T07:01:00Z"}
    )
    ended["metadata"]["creationTimestamp"] = "2026-12-01T07:00:02Z"
    ended["status"]["conditions"] = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-01T07:00:04Z"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T07:00:03Z"},
    ]
    full = observe_attempt(1, "claude", job(conditions=COMPLETE), [ended])
    assert [s.name for s in full.steps] == ["schedule", "agent"]
    assert observe_attempt(1, "claude", slim_job(job(conditions=COMPLETE)), [slim_pod(ended)]) == full


def synced() -> ChildStore:
    store = ChildStore()
    store.replace("Job", None, [])
    store.replace("Pod", None, [])
    return store


def test_children_are_found_by_run_and_in_flight_counts_follow_job_events() -> None:
    store = synced()
    assert store.apply("Job", "ADDED", job()) == Change("ns", "r", False)
    store.apply("Job", "ADDED", job("other-a1", run="other"))
    store.apply("Pod", "ADDED", pod())
    assert [j["metadata"]["name"] for j in store.children("Job", "ns", "r")] == ["r-a1"]
    assert [p["metadata"]["name"] for p in store.children("Pod", "ns", "r")] == ["r-a1-x"]
    assert store.in_flight("ns") == {"r", "other"}
    assert store.apply("Job", "MODIFIED", job(conditions=COMPLETE)) == Change("ns", "r", True)
    assert store.apply("Job", "MODIFIED", job(conditions=COMPLETE)).slot_freed is False  # freed once
    assert store.in_flight("ns") == {"other"}
    assert store.apply("Job", "DELETED", job(conditions=COMPLETE)).slot_freed is False
    # a Job deleted in flight (cancel, or by hand) frees its slot too
    assert store.apply("Job", "DELETED", job("other-a1", run="other")) == Change("ns", "other", True)
    assert store.in_flight("ns") == set()
    assert store.children("Job", "ns", "other") == []
    assert store.in_flight("elsewhere") == set()


def test_a_job_just_created_counts_in_flight_before_its_event_arrives() -> None:
    """A burst admits runs faster than the watch shows their Jobs: the slot is taken at create."""
    store = synced()
    store.note_started("ns", "r")
    assert store.in_flight("ns") == {"r"}
    store.apply("Job", "ADDED", job(conditions=COMPLETE))
    assert store.in_flight("ns") == set()


def test_a_relist_reports_what_changed_while_the_watch_was_down() -> None:
    store = synced()
    store.apply("Job", "ADDED", job())
    store.apply("Job", "ADDED", job("kept-a1", run="kept"))
    changes = store.replace("Job", "ns", [job("kept-a1", run="kept"), job("new-a1", run="new")])
    assert sorted(changes, key=lambda c: str(c.run)) == [Change("ns", "new", False), Change("ns", "r", True)]
    assert store.children("Job", "ns", "r") == []  # deleted meanwhile: the reconcile finds it gone


class ScriptedKube:
    """The two calls a Watcher makes, answering from a script: a 410 after the first list."""

    def __init__(self) -> None:
        self.lists = 0
        self.listed = threading.Event()

    def list_objects(
        self, kind: str, namespace: str | None, selector: str
    ) -> tuple[list[dict[str, Any]], str]:
        assert selector == "app.kubernetes.io/managed-by=harness-operator"  # filtered by the server
        self.lists += 1
        if self.lists == 2:
            self.listed.set()
            return [job("later-a1", run="later")], "20"
        return ([job()] if self.lists == 1 else []), str(self.lists * 10)

    def watch_objects(
        self, kind: str, namespace: str | None, selector: str, version: str, timeout: int
    ) -> Iterator[dict[str, Any]]:
        if version == "10":
            yield {"type": "MODIFIED", "object": job(conditions=COMPLETE)}
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
        else:
            threading.Event().wait(timeout=0.05)  # a quiet watch that the server ends
            yield from ()


def test_a_watcher_relists_after_410_and_reports_the_changes() -> None:
    store = ChildStore()
    store.replace("Pod", None, [])
    seen: list[Change] = []
    done = threading.Event()

    def on_change(change: Change) -> None:
        seen.append(change)
        if change.run == "later":
            done.set()

    kube = ScriptedKube()
    watcher = Watcher(kube, store, "Job", None, on_change)  # type: ignore[arg-type]
    watcher.start()
    assert done.wait(10)
    watcher.stopped.set()
    # the first list is not reported (kopf's resume handlers reconcile every run at startup); the
    # watch's event is, and so is what the relist after 410 found changed (r-a1 gone, later-a1 new)
    assert seen[0] == Change("ns", "r", True)
    assert Change("ns", "later", False) in seen
    assert Change("ns", "r", False) in seen  # finished before the relist found it gone: no slot freed
    assert store.children("Job", "ns", "later") != []
    assert store.children("Job", "ns", "r") == []


def test_a_keyed_queue_does_not_queue_a_waiting_key_twice() -> None:
    calls: list[tuple[str, str]] = []
    gate, finished = threading.Event(), threading.Event()

    def work(key: tuple[str, str]) -> None:
        calls.append(key)
        if key == ("ns", "first"):
            gate.wait(10)
        if key == ("ns", "last"):
            finished.set()

    queue = KeyedQueue(work, 1)
    queue.put(("ns", "first"))  # the worker takes it and blocks
    for _ in range(3):
        queue.put(("ns", "burst"))
    queue.put(("ns", "last"))
    gate.set()
    assert finished.wait(10)
    assert calls == [("ns", "first"), ("ns", "burst"), ("ns", "last")]


def test_a_job_kueue_manages_takes_no_slot_of_the_namespace() -> None:
    store = synced()
    queued = job()
    queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    store.apply("Job", "ADDED", queued)
    store.apply("Job", "ADDED", job("other-a1", run="other"))
    assert store.in_flight("ns") == {"other"}
    assert store.apply("Job", "MODIFIED", {**queued, "status": {"conditions": COMPLETE}}).slot_freed is False
    assert store.run_of_job("ns", "r-a1") == "r"
    assert store.run_of_job("ns", "nope") is None
