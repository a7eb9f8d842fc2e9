"""The watch cache of Kueue's Workloads and LocalQueues: by owning Job, changes mapped to our runs, relists,
and watches that start only when first needed."""

from typing import Any

import pytest
from tests.unit.controller.test_cache import job

from harness_operator.controller.cache import Change, ChildStore
from harness_operator.controller.kueue_cache import KueueStore


def workload(
    name: str = "job-r-a1-1", owner: str = "r-a1", uid: str = "job-uid", **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "ownerReferences": [{"kind": "Job", "name": owner, "uid": uid, "controller": True}],
        },
        "spec": {"queueName": "team-a"},
        "status": status,
    }


def local_queue(cluster_queue: str = "cq-a") -> dict[str, Any]:
    return {"metadata": {"name": "team-a", "namespace": "ns"}, "spec": {"clusterQueue": cluster_queue}}


@pytest.fixture
def store() -> KueueStore:
    children = ChildStore()
    children.replace("Job", None, [job()])
    children.replace("Pod", None, [])
    kueue = KueueStore(children)
    started: list[bool] = []
    kueue.on_first_use(lambda: started.append(True))
    kueue.ensure_watching()
    kueue.ensure_watching()
    assert started == [True]  # once
    kueue.replace("Workload", None, [])
    kueue.replace("LocalQueue", None, [])
    return kueue


def test_nothing_is_read_before_a_run_needs_kueue() -> None:
    kueue = KueueStore(ChildStore())
    assert not kueue.watching
    assert kueue.workload("ns", "r-a1") is None  # no wait for a watch that never started
    assert kueue.local_queue("ns", "team-a") is None


def test_a_workload_is_found_by_its_job_and_its_change_reconciles_that_run(store: KueueStore) -> None:
    assert store.apply("Workload", "ADDED", workload()) == Change("ns", "r", False)
    held = store.workload("ns", "r-a1")
    assert held is not None and held["metadata"]["jobUID"] == "job-uid"
    pending = {"conditions": [{"type": "QuotaReserved", "status": "False", "message": "short"}]}
    store.apply("Workload", "MODIFIED", workload(**pending))
    held = store.workload("ns", "r-a1")
    assert held is not None and held["status"]["conditions"][0]["message"] == "short"
    assert store.apply("Workload", "ADDED", workload("job-x-1", owner="x-a1")) == Change("ns", None, False)
    assert store.apply("Workload", "DELETED", workload()) == Change("ns", "r", False)
    assert store.workload("ns", "r-a1") is None


def test_a_local_queue_is_kept_and_reconciles_nothing(store: KueueStore) -> None:
    assert store.apply("LocalQueue", "ADDED", local_queue()) == Change("ns", None, False)
    held = store.local_queue("ns", "team-a")
    assert held is not None and held["spec"]["clusterQueue"] == "cq-a"
    store.apply("LocalQueue", "DELETED", local_queue())
    assert store.local_queue("ns", "team-a") is None


def test_a_relist_drops_what_went_and_reports_our_runs_whose_workload_changed(store: KueueStore) -> None:
    store.apply("Workload", "ADDED", workload())
    changes = store.replace("Workload", None, [workload("job-r-a1-2", uid="new")])
    assert changes == [Change("ns", "r", False)]
    held = store.workload("ns", "r-a1")
    assert held is not None and (held["metadata"]["name"], held["metadata"]["jobUID"]) == (
        "job-r-a1-2",
        "new",
    )
    assert store.replace("Workload", None, []) == [Change("ns", "r", False)]
    assert store.workload("ns", "r-a1") is None
