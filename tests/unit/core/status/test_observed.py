"""describe_pod_wait over the pod states a waiting attempt shows, through observe_attempt, the slim cache
copy and compute_status (a pending run says why, in the scheduler's or the kubelet's words)."""

from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.cache import slim_pod
from harness_operator.core.status.observed import (
    PENDING,
    RUNNING,
    Observed,
    describe_pod_wait,
    observe_attempt,
)
from harness_operator.core.status.status import compute_status

NOW = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available.",
}
PULL_BACKOFF = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x:1"'}}
CREATING = {"waiting": {"reason": "ContainerCreating"}}


def pod(
    conditions: list[dict[str, str]] | None = None,
    containers: dict[str, dict[str, Any]] | None = None,
    init: dict[str, dict[str, Any]] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    return {
        "metadata": {"name": "r-a1-xyz", "creationTimestamp": "2026-12-07T00:59:00Z"},
        "spec": {"initContainers": [{"name": n} for n in init or {}]},
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [{"name": n, "state": s} for n, s in (containers or {}).items()],
            "initContainerStatuses": [{"name": n, "state": s} for n, s in (init or {}).items()],
        },
    }


JOB = {"metadata": {"name": "r-a1"}, "spec": {}, "status": {"startTime": "2026-12-07T00:59:00Z"}}


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        (None, None),
        (pod(), None),
        (pod(containers={"runner": CREATING, "agent": CREATING}), None),
        (pod(init={"setup": {"waiting": {"reason": "PodInitializing"}}}), None),
        (pod([{"type": "PodScheduled", "status": "True"}]), None),
        (
            pod([UNSCHEDULABLE]),
            "the scheduler cannot place pod r-a1-xyz (Unschedulable): 0/1 nodes are available: 1 Insufficient "
            "cpu. preemption: 0/1 nodes are available.",
        ),
        (
            pod([{"type": "PodScheduled", "status": "False"}]),
            "the scheduler cannot place pod r-a1-xyz: the scheduler gave no message",
        ),
        (
            pod(containers={"runner": CREATING, "agent": PULL_BACKOFF}),
            'container agent of pod r-a1-xyz cannot start (ImagePullBackOff): Back-off pulling image "x:1"',
        ),
        (
            pod(containers={"agent": {"waiting": {"reason": "ErrImagePull"}}}),
            "container agent of pod r-a1-xyz cannot start (ErrImagePull): the kubelet gave no message",
        ),
        (  # an init container waits first, and is named first
            pod(
                init={"clone": {"waiting": {"reason": "CreateContainerConfigError", "message": "no key"}}},
                containers={"agent": PULL_BACKOFF},
            ),
            "container clone of pod r-a1-xyz cannot start (CreateContainerConfigError): no key",
        ),
        (  # the scheduler's word comes before any container's
            pod([UNSCHEDULABLE], containers={"agent": PULL_BACKOFF}),
            "the scheduler cannot place pod r-a1-xyz (Unschedulable): 0/1 nodes are available: 1 Insufficient "
            "cpu. preemption: 0/1 nodes are available.",
        ),
    ],
)
def test_describe_pod_wait(seen: dict[str, Any] | None, expected: str | None) -> None:
    assert describe_pod_wait(seen) == expected
    if seen is not None:  # the watch cache's slim copy keeps what it needs
        assert describe_pod_wait(slim_pod(seen)) == expected


def test_a_slim_pod_keeps_only_the_waits_of_other_containers() -> None:
    running = pod(containers={"runner": {"running": {}}, "sidecar": {"running": {}}, "extra": CREATING})
    slim = slim_pod(running)
    assert [s["name"] for s in slim["status"]["containerStatuses"]] == ["runner", "extra"]
    assert slim["status"]["conditions"] == []
    assert slim_pod(pod([UNSCHEDULABLE, {"type": "Ready", "status": "False"}]))["status"]["conditions"] == [
        UNSCHEDULABLE
    ]


def run() -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"provider": "claude", "prompt": "p"},
        }
    )


def test_a_pending_run_says_why_its_pod_waits_and_stops_saying_so_once_it_runs() -> None:
    waiting = observe_attempt(1, "claude", JOB, [slim_pod(pod([UNSCHEDULABLE]))])
    assert (waiting.state, waiting.pod_name) == (PENDING, "r-a1-xyz")
    status = compute_status(run(), Observed(providers=["claude"], attempts=[waiting]), NOW)
    assert (status.phase, status.reason) == ("Pending", Reason.Pending)
    assert status.message == (
        "attempt 1/1 waits: the scheduler cannot place pod r-a1-xyz (Unschedulable): 0/1 nodes are "
        "available: 1 Insufficient cpu. preemption: 0/1 nodes are available."
    )
    succeeded = next(c for c in status.conditions if c.type == "Succeeded")
    assert (succeeded.status, succeeded.reason, succeeded.message) == ("Unknown", "Pending", status.message)
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.message == status.message

    routine = observe_attempt(1, "claude", JOB, [pod(containers={"runner": CREATING})])
    assert routine.waiting is None
    status = compute_status(run(), Observed(providers=["claude"], attempts=[routine]), NOW)
    assert status.message == "waiting for the sandbox pod to start"

    started = observe_attempt(
        1, "claude", JOB, [pod(containers={"runner": {"running": {}}}, phase="Running")]
    )
    assert (started.state, started.waiting) == (RUNNING, None)
    status = compute_status(run(), Observed(providers=["claude"], attempts=[started]), NOW)
    assert (status.phase, status.reason) == ("Running", Reason.Running)
