"""Retention: compute_expiry's table, the expiry heap's order and retries, and the operator's TTL setting."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.controller.retention import RETRY_SECONDS, ExpiryQueue, compute_expiry
from harness_operator.core.config import OperatorConfig

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def run(ttl: Any = None, completed: str | None = None, deleting: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"provider": "p"}}
    if ttl is not None:
        body["spec"]["ttlSecondsAfterFinished"] = ttl
    if completed is not None:
        body["status"] = {"completionTime": completed, "phase": "Succeeded"}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-12-01T11:59:00Z"
    return body


@pytest.mark.parametrize(
    ("body", "default", "expected"),
    [
        (run(ttl=60), None, None),  # still in flight: no completionTime
        (run(completed="2026-12-01T11:59:00Z"), None, None),  # finished, no TTL anywhere: kept
        (run(ttl=120, completed="2026-12-01T11:59:00Z"), None, 60.0),  # its own TTL
        (run(completed="2026-12-01T11:59:00Z"), 90, 30.0),  # the operator's default
        (run(ttl=600, completed="2026-12-01T11:59:00Z"), 0, 540.0),  # its own TTL wins over the default
        (run(ttl=0, completed="2026-12-01T11:59:00Z"), 3600, 0.0),  # 0 on the run: at once, not the default
        (run(ttl=10, completed="2026-12-01T11:00:00Z"), None, 0.0),  # long expired (operator was down): now
        (run(ttl=30, completed="2026-12-01T11:59:50+00:00"), None, 20.0),  # offset form
        (run(ttl=30, completed="2026-12-01T11:59:50Z", deleting=True), None, None),  # being deleted already
        (run(ttl=30, completed="not a time"), None, None),  # garbage in status: kept, never a crash
        (run(ttl=30, completed="2026-12-01T11:59:50"), None, None),  # no zone: not ours, kept
        (run(ttl=-5, completed="2026-12-01T11:59:00Z"), 120, 60.0),  # invalid on the run: the default
        (run(ttl=True, completed="2026-12-01T11:59:00Z"), None, None),  # a bool is not seconds
        (run(ttl="60", completed="2026-12-01T11:59:00Z"), None, None),  # nor a string
    ],
)
def test_compute_expiry(body: dict[str, Any], default: int | None, expected: float | None) -> None:
    assert compute_expiry(body, default, NOW) == expected


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({"kustomize.toolkit.fluxcd.io/name": "agents"}, {}),
        ({"helm.toolkit.fluxcd.io/name": "agents"}, {}),
        ({"argocd.argoproj.io/instance": "agents"}, {}),
        ({"app.kubernetes.io/instance": "agents"}, {}),
        ({}, {"argocd.argoproj.io/tracking-id": "agents:agentharness.dev/HarnessRun:ns/r"}),
        ({}, {"meta.helm.sh/release-name": "agents"}),
    ],
)
def test_the_default_ttl_spares_a_run_a_tool_applied(labels: dict, annotations: dict) -> None:
    body = run(completed="2026-12-01T11:59:00Z")
    body["metadata"].update(labels=labels, annotations=annotations)
    assert compute_expiry(body, 90, NOW) is None  # the tool would apply it again, and it would run again
    assert compute_expiry(body, 90, NOW, spare_applied=False) == 30.0
    body["spec"]["ttlSecondsAfterFinished"] = 120  # its own TTL: the author's choice
    assert compute_expiry(body, 90, NOW) == 60.0


def test_other_labels_do_not_spare_a_run() -> None:
    body = run(completed="2026-12-01T11:59:00Z")
    body["metadata"]["labels"] = {"team": "a", "app.kubernetes.io/name": "review"}
    assert compute_expiry(body, 90, NOW) == 30.0


def test_compute_expiry_of_a_bare_object() -> None:
    assert compute_expiry({}, 10, NOW) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_queue_deletes_in_expiry_order_only_when_due() -> None:
    clock, deleted = Clock(), []
    queue = ExpiryQueue(lambda ns, name, uid: deleted.append((ns, name, uid)), clock=clock)
    queue.schedule("ns", "late", "u1", 30)
    queue.schedule("ns", "early", "u2", 10)
    queue.schedule("other", "now", "u3", 0)
    assert queue.run_due() == 10.0
    assert deleted == [("other", "now", "u3")]
    clock.now += 30
    assert queue.run_due() is None
    assert deleted == [("other", "now", "u3"), ("ns", "early", "u2"), ("ns", "late", "u1")]
    assert len(queue) == 0


def test_queue_forget_and_reschedule_leave_one_live_entry() -> None:
    clock, deleted = Clock(), []
    queue = ExpiryQueue(lambda ns, name, uid: deleted.append((name, uid)), clock=clock)
    queue.schedule("ns", "gone", "u1", 5)
    queue.forget("ns", "gone")  # deleted by its user meanwhile
    queue.schedule("ns", "again", "old", 5)
    queue.schedule("ns", "again", "new", 50)  # re-created under the same name: only the new one counts
    queue.schedule("ns", "again", "new", 50.2)  # the same expiry seen on another event: no second entry
    assert len(queue) == 1
    clock.now += 100
    queue.run_due()
    assert deleted == [("again", "new")]


def test_queue_retries_a_failed_deletion() -> None:
    clock, calls, errors = Clock(), [], []

    def delete(ns: str, name: str, uid: str) -> None:
        calls.append(name)
        if len(calls) == 1:
            raise ConnectionError("API server away")

    queue = ExpiryQueue(delete, clock=clock, on_error=lambda ns, name, exc: errors.append(str(exc)))
    queue.schedule("ns", "r", "u", 0)
    assert queue.run_due() == RETRY_SECONDS
    assert (calls, errors, len(queue)) == (["r"], ["API server away"], 1)
    clock.now += RETRY_SECONDS
    assert queue.run_due() is None
    assert (calls, len(queue)) == (["r", "r"], 0)


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("", None), ("0", 0), ("3600", 3600)])
def test_config_reads_the_default_ttl(value: str | None, expected: int | None) -> None:
    env = {} if value is None else {"HARNESS_DEFAULT_TTL_SECONDS_AFTER_FINISHED": value}
    assert OperatorConfig.from_env(env).default_ttl_seconds_after_finished == expected


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_config_refuses_a_bad_ttl_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="HARNESS_DEFAULT_TTL_SECONDS_AFTER_FINISHED"):
        OperatorConfig.from_env({"HARNESS_DEFAULT_TTL_SECONDS_AFTER_FINISHED": value})
