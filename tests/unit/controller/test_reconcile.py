"""The reconciler reading Jobs and Pods from the watch caches: a cache that lags a create or a pod
never makes an attempt lost or run twice; the queue is first come, first served."""

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from tests.unit.controller.fake_kube import ApiServer, Queue, wire

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.reconcile import Reconciler
from harness_operator.controller.run_cache import RUN_KIND, RunStore
from harness_operator.controller.workers import Workers
from harness_operator.core.config import OperatorConfig
from harness_operator.core.queue.fairqueue import QueueEntry

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
CONFIG = OperatorConfig(max_runs_per_namespace=2)
LABELS = {"app.kubernetes.io/managed-by": "harness-operator", "agentharness.dev/run": "r"}


def job(conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "kind": "Job",
        "metadata": {
            "name": "r-a1",
            "namespace": "ns",
            "uid": "job-uid",
            "labels": {**LABELS, "agentharness.dev/attempt": "1"},
            "annotations": {"agentharness.dev/run-name": "r"},
            "ownerReferences": [{"uid": "run-uid", "controller": True}],
        },
        "spec": {"suspend": False},
        "status": {"startTime": "2026-12-01T07:59:00Z", "conditions": conditions or []},
    }


AGENT_EXITED_0 = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def pod(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": "r-a1-x",
            "namespace": "ns",
            "uid": "pod-uid",
            "labels": {**LABELS, "agentharness.dev/attempt": "1"},
            "ownerReferences": [{"uid": "job-uid", "controller": True}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "runner", "state": state},
                {"name": "agent", "state": AGENT_EXITED_0 if "terminated" in state else state},
            ],
        },
    }


def started_run(**spec: Any) -> HarnessRun:
    """A run whose status records attempt 1 as started (its Job created), not ended."""
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "uid": "run-uid", "creationTimestamp": "t"},
            "spec": {"provider": "claude", "prompt": "p", "fallback": [{"provider": "codex"}], **spec},
            "status": {
                "attempts": [{"index": 1, "provider": "claude", "jobName": "r-a1"}],
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}],
            },
        }
    )


def reconciler(
    api: ApiServer,
    cached_jobs: list[dict[str, Any]],
    cached_pods: list[dict[str, Any]],
    queue: Queue | None = None,
    clock: Callable[[], datetime] = lambda: NOW,
    kueue: KueueStore | None = None,
    workers: Workers | None = None,
    config: OperatorConfig = CONFIG,
) -> Reconciler:
    store = ChildStore()
    store.replace("Job", None, cached_jobs)
    store.replace("Pod", None, cached_pods)
    return wire(api, config, clock, store, queue, workers, kueue)


RUNNING_POD = pod({"running": {}})


def first_attempt(api: ApiServer) -> dict[str, Any]:
    attempts: list[dict[str, Any]] = api.status("r")["attempts"]
    return attempts[0]


def test_a_job_the_cache_has_not_shown_yet_is_not_lost() -> None:
    api = ApiServer([job()], [RUNNING_POD], started_run())
    reconciler(api, [], []).reconcile("ns", "r")
    assert "reason" not in first_attempt(api) and len(api.status("r")["attempts"]) == 1
    assert api.reads == ["job r-a1", "pods"]
    assert api.created == []  # attempt 1 is not started again, and no fallback starts


def test_a_runs_first_resolution_reads_its_namespaced_definition_and_later_ones_do_not() -> None:
    """The definitions' caches are separate watches: a namespaced one made just before the run may not be
    cached yet while the cluster's is, so the first resolution asks the API server; once an attempt is
    recorded its definition is settled."""
    fresh = HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "uid": "run-uid", "creationTimestamp": "t"},
            "spec": {"provider": "claude", "prompt": "p"},
        }
    )
    api = ApiServer([], [], fresh)
    reconciler(api, [], []).reconcile("ns", "r")
    assert api.reads[0] == "harnessdefinitions ns/claude" and "Job r-a1" in api.created
    api.reads.clear()
    reconciler(api, [job()], [RUNNING_POD]).reconcile("ns", "r")
    assert api.reads == []


def test_a_run_is_read_afresh_only_when_the_watch_shows_a_version_this_process_has_not_been_answered() -> (
    None
):
    """A new run's first answer is the watch's delivery; the status patch's answer is the run as stored:
    while the watch shows that version and no newer, an event of its Job or pod reads nothing; a write by
    anyone else is read before it is acted on."""
    api = ApiServer([], [], started_run())
    runs = RunStore()

    def deliver(type_: str) -> None:
        runs.apply(RUN_KIND, type_, copy.deepcopy(api.runs["r"]))

    store = ChildStore()
    store.replace("Job", None, [job()])
    store.replace("Pod", None, [])
    reconcile = wire(api, CONFIG, lambda: NOW, store, runs=runs).reconcile
    deliver("ADDED")
    reconcile("ns", "r")
    assert api.run_reads == 0  # new: the watch's delivery is the API server's answer
    written = api.runs["r"]["metadata"]["resourceVersion"]
    assert written != "1" and api.status("r")["reason"] == "Pending"  # its status patched
    reconcile("ns", "r")
    assert api.run_reads == 1  # the watch has not shown the patched version yet: read
    deliver("MODIFIED")
    reconcile("ns", "r")
    reconcile("ns", "r")
    assert api.run_reads == 1  # the watch shows what the API server last answered: no read
    api.write_run("r", lambda run: run["spec"].update(cancel=True))
    deliver("MODIFIED")
    store.replace("Pod", None, [RUNNING_POD])
    reconcile("ns", "r")
    assert api.run_reads == 2  # someone else wrote: read, and acted on (the cancel)
    assert api.status("r")["reason"] == "Cancelled"


def test_a_new_run_is_acted_on_as_the_watch_last_delivered_it() -> None:
    """A write before the first reconcile (a cancel): the watch's newer delivery is the one acted on."""
    api = ApiServer([], [], started_run())
    runs = RunStore()
    runs.apply(RUN_KIND, "ADDED", copy.deepcopy(api.runs["r"]))
    api.write_run("r", lambda run: run["spec"].update(cancel=True))
    runs.apply(RUN_KIND, "MODIFIED", copy.deepcopy(api.runs["r"]))
    store = ChildStore()
    store.replace("Job", None, [job()])
    store.replace("Pod", None, [RUNNING_POD])
    wire(api, CONFIG, lambda: NOW, store, runs=runs).reconcile("ns", "r")
    assert api.run_reads == 0 and api.status("r")["reason"] == "Cancelled"
    assert runs.take_delivered("ns", "r") is None  # handed over once


def test_a_run_is_always_read_when_the_watch_says_nothing_of_it() -> None:
    api = ApiServer([], [], started_run())
    for _ in range(3):
        reconciler(api, [job()], [RUNNING_POD]).reconcile("ns", "r")
    assert api.run_reads == 3
    del api.runs["r"]["metadata"]["resourceVersion"]  # an answer without a version matches nothing
    store = ChildStore()
    store.replace("Job", None, [job()])
    store.replace("Pod", None, [RUNNING_POD])
    unversioned = wire(api, CONFIG, lambda: NOW, store)
    for _ in range(2):
        unversioned.reconcile("ns", "r")
    assert api.run_reads == 5


def test_a_job_the_api_server_no_longer_has_is_lost_and_never_created_again() -> None:
    api = ApiServer([], [], started_run())
    reconciler(api, [], []).reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "JobLost"
    assert "Job r-a1" not in api.created and "Job r-a2" in api.created  # the fallback runs instead


def test_a_job_in_the_cache_costs_no_read() -> None:
    api = ApiServer([], [], started_run())
    reconciler(api, [job()], [RUNNING_POD]).reconcile("ns", "r")
    assert "reason" not in first_attempt(api)
    assert api.reads == [] and api.created == []


def test_a_pod_the_cache_lags_is_read_before_its_attempt_is_called_lost() -> None:
    """The Job's watch showed it Failed before the pod's watch showed the pod: the pod's own exit
    decides, not 'the pod vanished'."""
    failed = job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    ended = pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    api = ApiServer([failed], [ended], started_run())
    reconciler(api, [failed], []).reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "ProviderFailed"
    api = ApiServer([failed], [], started_run())
    reconciler(api, [failed], []).reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "JobLost"


def queued_run(name: str, created: str) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": created},
            "spec": {"provider": "claude", "prompt": "p"},
        }
    )


QUEUED = [QueueEntry("07:00", "first"), QueueEntry("07:01", "second"), QueueEntry("07:02", "third")]


def test_a_run_waits_behind_earlier_queued_runs_and_a_freed_slot_wakes_the_first() -> None:
    runs = [queued_run(entry.name, entry.created) for entry in QUEUED]
    api = ApiServer([], [], *runs)
    r = reconciler(api, [], [], Queue(list(QUEUED)))
    r.children.note_started("ns", "running")  # one of the two slots is taken
    r.reconcile("ns", "second")
    assert (api.status("second")["reason"], api.status("second")["message"]) == (
        "Queued",
        "position 2 of 3 in the queue of namespace ns (1 runs in flight, limit 2)",
    )
    assert api.created == []
    assert r.runs_waiting("ns") == [("ns", "first")]
    r.reconcile("ns", "first")
    assert "Job first-a1" in api.created


class RefusingApiServer(ApiServer):
    """Refuses every create, as an API server that is restarting does."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self.reads.append(f"create {obj['kind']}")
        raise ApiException(status=503, reason="Service Unavailable")


def test_a_slot_taken_for_a_job_that_was_not_created_is_free_again() -> None:
    api = RefusingApiServer([], [], queued_run("first", "07:00"), queued_run("second", "07:01"))
    r = reconciler(api, [], [])
    r.children.note_started("ns", "running")  # one of the two slots is taken: a leaked one fills both
    with pytest.raises(ApiException):
        r.reconcile("ns", "first")
    # The plan Secret was refused; its NetworkPolicy went in parallel, and no Job follows either.
    creates = [read for read in api.reads if read.startswith("create ")]
    assert sorted(creates) == ["create NetworkPolicy", "create Secret"]
    assert r.children.in_flight("ns") == {"running"}
    with pytest.raises(ApiException):  # not Queued: the slot "first" took is free again
        r.reconcile("ns", "second")
    creates = [read for read in api.reads if read.startswith("create ")]
    assert sorted(creates) == ["create NetworkPolicy"] * 2 + ["create Secret"] * 2


def gauge(name: str, namespace: str = "ns") -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": namespace})


def test_a_deleted_run_leaves_the_gauges() -> None:
    """Deleting a running and a queued run leaves nothing in flight or queued, and no oldest run in
    flight that keeps growing (HarnessRunStuck would fire)."""
    api = ApiServer([], [], queued_run("first", "07:00"), queued_run("second", "07:01"))
    clock = [NOW]
    r = reconciler(api, [], [], Queue([QueueEntry("07:01", "second")]), lambda: clock[0])
    r.children.note_started("ns", "other")
    r.reconcile("ns", "first")
    running = pod({"running": {}})
    running["metadata"].update(
        labels={**LABELS, "agentharness.dev/run": "first", "agentharness.dev/attempt": "1"},
        ownerReferences=[{"uid": "first-a1-uid", "controller": True}],
    )
    api.pods.append(running)  # its pod started
    r.reconcile("ns", "first")
    assert api.status("first")["phase"] == "Running"
    r.reconcile("ns", "second")
    assert api.status("second")["reason"] == "Queued"
    assert (gauge("harness_runs_in_flight"), gauge("harness_runs_queued")) == (1, 1)
    clock[0] = NOW + timedelta(minutes=5)
    assert gauge("harness_run_oldest_in_flight_seconds") == 300
    del api.runs["second"]
    r.reconcile("ns", "second")  # a reconcile that finds the run gone
    r.forget("ns", "first")  # the deletion's event
    assert (gauge("harness_runs_in_flight"), gauge("harness_runs_queued")) == (0, 0)
    assert gauge("harness_run_oldest_in_flight_seconds") == 0


# --- retries (spec.retry) ----------------------------------------------------------------------------


class RecordingApiServer(ApiServer):
    """Also keeps the Events the reconciler posts: (reason, message)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.events: list[tuple[str, str]] = []

    def create_event(self, body: Any, type_: str, reason: str, message: str, *args: Any) -> None:
        self.events.append((reason, message))


RETRY = {"limit": 2, "backoffSeconds": 10, "maxBackoffSeconds": 15}


def lost_attempts(*indexes: int) -> list[dict[str, Any]]:
    """Attempts recorded as started whose Jobs the API server no longer has: each ends JobLost."""
    return [{"index": i, "provider": "claude", "jobName": f"r-a{i}"} for i in indexes]


def retried_run(attempts: list[dict[str, Any]], **spec: Any) -> HarnessRun:
    run = started_run(retry=RETRY, **spec)
    assert run.status is not None
    run.status.attempts = [type(run.status.attempts[0]).model_validate(a) for a in attempts]
    return run


class Retrying:
    """The reconciler, keeping the backoffs its reconciles ask to be woken after (Requeue.after)."""

    def __init__(self, reconciler: Reconciler, wakes: list[float]) -> None:
        self.reconciler, self.wakes = reconciler, wakes
        self.children = reconciler.children

    def reconcile(self, namespace: str, name: str) -> None:
        after = self.reconciler.reconcile(namespace, name).after
        if after is not None:
            self.wakes.append(after)


def retrying(api: ApiServer, clock: list[datetime]) -> tuple[Retrying, list[float]]:
    wakes: list[float] = []
    return Retrying(reconciler(api, [], [], clock=lambda: clock[0]), wakes), wakes


def test_a_transient_failure_waits_out_its_backoff_holding_the_slot_then_retries_the_provider() -> None:
    api = RecordingApiServer([], [], retried_run(lost_attempts(1)))
    clock = [NOW]
    r, wakes = retrying(api, clock)
    retries = {"namespace": "ns", "provider": "claude"}
    retries_before = REGISTRY.get_sample_value("harness_retries_total", retries) or 0.0

    r.reconcile("ns", "r")

    status = api.status("r")
    assert (status["phase"], status["reason"]) == ("Pending", "Retrying")
    assert status["message"] == (
        "attempt 1/6 with claude failed (JobLost); retry 1/2 with claude as attempt 2/6 at 2026-12-01T08:00:10Z"
    )
    assert status["attempts"][0]["completionTime"] == "2026-12-01T08:00:00Z"
    assert api.created == [] and wakes == [10.0]
    assert r.children.in_flight("ns") == {"r"}  # no Job in flight, yet the slot stays the run's
    assert ("Retrying", status["message"]) in api.events

    clock[0] = NOW + timedelta(seconds=4)
    r.reconcile("ns", "r")  # another event meanwhile: the same due time, the same status
    assert api.status("r")["message"] == status["message"] and api.created == [] and wakes == [10.0, 6.0]

    clock[0] = NOW + timedelta(seconds=10)
    r.reconcile("ns", "r")
    assert "Job r-a2" in api.created
    assert api.status("r")["attempts"][1] == {"index": 2, "provider": "claude", "jobName": "r-a2"}
    line = "attempt 1/6 with claude failed (JobLost); retry 1/2 with claude as attempt 2/6"
    assert ("Retrying", line) in api.events
    assert r.children.in_flight("ns") == {"r"}  # held by the Job now (noted as started)
    assert REGISTRY.get_sample_value("harness_retries_total", retries) == retries_before + 1


def test_the_backoff_doubles_up_to_its_maximum() -> None:
    recorded = lost_attempts(1, 2)
    recorded[0].update(exitCode=1, reason="RateLimited", completionTime="2026-12-01T07:59:00Z")
    api = RecordingApiServer([], [], retried_run(recorded))
    r, wakes = retrying(api, [NOW])
    r.reconcile("ns", "r")  # attempt 2 is lost now: its retry waits 2 x 10 s, cut to 15 s
    assert api.status("r")["message"].endswith("retry 2/2 with claude as attempt 3/6 at 2026-12-01T08:00:15Z")
    assert wakes == [15.0]


def test_a_provider_out_of_retries_falls_back_to_the_next_providers_first_attempt() -> None:
    recorded = lost_attempts(1, 2, 3)
    for a in recorded[:2]:
        a.update(exitCode=1, reason="JobLost", completionTime="2026-12-01T07:00:00Z")
    api = RecordingApiServer([], [], retried_run(recorded))
    r, wakes = retrying(api, [NOW])
    r.reconcile("ns", "r")
    assert "Job r-a4" in api.created and wakes == []  # no backoff before a fallback
    assert api.status("r")["attempts"][-1]["provider"] == "codex"
    assert (
        "FallingBack",
        "harness: attempt 3/6 with claude failed; trying fallback 4/6 with codex",
    ) in api.events


def test_a_failure_a_retry_cannot_cure_falls_back_at_once() -> None:
    failed = job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    ended = pod({"terminated": {"exitCode": 3, "reason": "Error", "message": ""}})
    api = RecordingApiServer([failed], [ended], retried_run(lost_attempts(1)))
    r, wakes = retrying(api, [NOW])
    r.reconcile("ns", "r")
    assert first_attempt(api)["reason"] == "ProviderFailed"
    assert "Job r-a2" not in api.created and "Job r-a4" in api.created and wakes == []


def test_a_cancel_during_the_backoff_ends_the_run_and_frees_its_slot() -> None:
    api = RecordingApiServer([], [], retried_run(lost_attempts(1)))
    r, _ = retrying(api, [NOW])
    r.reconcile("ns", "r")
    assert r.children.in_flight("ns") == {"r"}
    api.runs["r"]["spec"]["cancel"] = True
    r.reconcile("ns", "r")
    assert (api.status("r")["phase"], api.status("r")["reason"]) == ("Cancelled", "Cancelled")
    assert api.created == [] and r.children.in_flight("ns") == set()


def test_without_retry_a_lost_attempt_falls_back_as_before() -> None:
    api = RecordingApiServer([], [], started_run())
    r, wakes = retrying(api, [NOW])
    r.reconcile("ns", "r")
    assert "Job r-a2" in api.created and wakes == []
    assert (
        "FallingBack",
        "harness: attempt 1/2 with claude failed; trying fallback 2/2 with codex",
    ) in api.events


def publishing_run(name: str) -> HarnessRun:
    """The README's publish example: an ordinary git URL and a pull request, no hand-written egress."""
    workspace = {
        "git": {"url": "https://git.example.com/git/acme/payments.git", "ref": "main"},
        "publish": {"pullRequest": {"forge": "gitea"}},
    }
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": "07:00"},
            "spec": {"provider": "claude", "prompt": "p", "workspace": workspace},
        }
    )


def test_without_an_egress_gateway_a_run_whose_git_host_is_closed_is_refused_naming_the_rule() -> None:
    api = ApiServer([], [], publishing_run("pub"))
    reconciler(api, [], [], config=OperatorConfig(fqdn_policy="none")).reconcile("ns", "pub")
    status = api.status("pub")
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec"), status
    assert status["message"].startswith(
        "spec.workspace.git.url: the clone and the publisher must reach git.example.com:443"
    )
    assert "add {host: git.example.com, ports: [443]} to spec.sandbox.egress" in status["message"]
    assert not [c for c in api.created if c.startswith("Job")]
