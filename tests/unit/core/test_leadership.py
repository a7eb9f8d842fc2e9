"""Leader election's rules: who may take the Lease, expiry judged by the local clock from when the record
last changed, what a claim, a renewal and a release write."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from harness_operator.core.leadership import (
    LEASE_DURATION_SECONDS,
    LeaseRecord,
    claim,
    holder_identity,
    lease_object,
    may_take,
    micro_time,
    next_look,
    observe,
    record_of,
    release,
)

NOW = datetime(2026, 12, 4, 7, 0, 0, 123456, tzinfo=UTC)


def lease(holder: str, renew: str = "2026-12-04T06:59:59.000000Z", version: str = "1", **spec: Any) -> dict:
    return {
        "metadata": {"name": "harness-operator", "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew, **spec},
    }


def test_a_record_reads_every_field_and_defaults_what_is_missing() -> None:
    full = lease("a", acquireTime="2026-12-04T06:00:00.000000Z", leaseTransitions=3)
    assert record_of(full) == LeaseRecord(
        "a", 15, "2026-12-04T06:00:00.000000Z", "2026-12-04T06:59:59.000000Z", 3
    )
    assert record_of({"spec": {}}) == LeaseRecord("", LEASE_DURATION_SECONDS, None, None, 0)


def test_a_free_or_own_lease_may_be_taken_at_once() -> None:
    for holder in ("", "me"):
        assert may_take(observe(None, lease(holder), 100.0), "me", 100.0)


def test_a_process_restarted_in_the_same_pod_waits_for_its_predecessors_lease_to_expire() -> None:
    before, after = (
        holder_identity("harness-operator-7c9-x2", "0a1b"),
        holder_identity("harness-operator-7c9-x2", "ffee"),
    )
    assert before.startswith("harness-operator-7c9-x2_") and before != after
    seen = observe(None, lease(before), 100.0)
    assert not may_take(seen, after, 114.9) and may_take(seen, after, 115.0)


def test_another_holders_lease_expires_by_the_local_clock_from_its_last_change() -> None:
    seen = observe(None, lease("other"), 100.0)
    assert not may_take(seen, "me", 114.9)
    again = observe(seen, lease("other", version="1"), 110.0)  # unchanged: the clock keeps running
    assert again.seen_at == 100.0 and may_take(again, "me", 115.0)


def test_a_renewal_restarts_the_clock_whatever_time_the_holder_wrote() -> None:
    seen = observe(None, lease("other"), 100.0)
    # The holder's clock may be hours off: only that the record changed counts.
    renewed = observe(seen, lease("other", renew="2020-01-01T00:00:00.000000Z", version="2"), 112.0)
    assert renewed.seen_at == 112.0 and renewed.resource_version == "2"
    assert not may_take(renewed, "me", 120.0) and may_take(renewed, "me", 127.0)


def test_a_first_claim_counts_no_transition_and_a_takeover_one() -> None:
    first = claim(None, "me", NOW)
    assert first == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-12-04T07:00:00.123456Z",
        "renewTime": "2026-12-04T07:00:00.123456Z",
        "leaseTransitions": 0,
    }
    taken = claim(record_of(lease("other", acquireTime="x", leaseTransitions=2)), "me", NOW)
    assert (taken["leaseTransitions"], taken["acquireTime"]) == (3, micro_time(NOW))


def test_a_renewal_keeps_the_acquire_time_and_the_transitions() -> None:
    mine = record_of(lease("me", acquireTime="2026-12-04T06:00:00.000000Z", leaseTransitions=2))
    renewed = claim(mine, "me", NOW, duration_seconds=30)
    assert renewed["acquireTime"] == "2026-12-04T06:00:00.000000Z"
    assert (renewed["leaseTransitions"], renewed["renewTime"], renewed["leaseDurationSeconds"]) == (
        2,
        micro_time(NOW),
        30,
    )


def test_a_release_leaves_no_holder_and_a_lease_a_standby_takes_at_its_next_look() -> None:
    released = release(record_of(lease("me", leaseTransitions=4)), NOW)
    assert (released["holderIdentity"], released["leaseDurationSeconds"], released["leaseTransitions"]) == (
        "",
        1,
        4,
    )
    after = {"metadata": {"resourceVersion": "9"}, "spec": released}
    assert may_take(observe(None, after, 0.0), "standby", 0.0)


def test_a_replace_carries_the_version_read_and_a_create_none() -> None:
    spec = claim(None, "me", NOW)
    created = lease_object("harness-system", "harness-operator", spec)
    assert "resourceVersion" not in created["metadata"]
    assert (created["apiVersion"], created["kind"], created["spec"]) == (
        "coordination.k8s.io/v1",
        "Lease",
        spec,
    )
    replaced = lease_object("harness-system", "harness-operator", spec, "42")
    assert replaced["metadata"]["resourceVersion"] == "42"
    assert replaced["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "harness-operator"}


def look(seen_holder: str | None, seen_at: float, **at: Any) -> float:
    """next_look for "me", the record of `seen_holder` first seen at `seen_at` (None: nothing read)."""
    seen = None if seen_holder is None else observe(None, lease(seen_holder), seen_at)
    when = {"leading": False, "watching": True, "now": 110.0, "looked_at": 100.0, **at}
    return next_look(seen, "me", when["leading"], when["watching"], when["now"], when["looked_at"], 2.0)


def test_a_leader_renews_every_retry_period_and_looks_at_once_when_the_watch_shows_another_holder() -> None:
    assert look("me", 99.0, leading=True, now=101.5) == 0.5
    assert look("other", 101.0, leading=True, now=101.5) == 0.0  # taken since its last look
    assert look("other", 99.0, leading=True, now=101.5) == 0.5  # seen by the look that lost it


def test_a_standby_without_a_watch_looks_every_retry_period() -> None:
    assert look(None, 0.0, now=100.5) == 1.5
    assert look("other", 90.0, watching=False, now=100.5) == 1.5
    assert look("", 100.2, watching=False, now=100.5) == 1.5


def test_a_watching_standby_looks_when_the_record_it_saw_expires_and_every_half_duration() -> None:
    assert look("other", 104.0, now=115.0) == 4.0  # expires at 119: 15 s after the renewal it watched
    assert look("other", 109.0, now=110.0) == 7.5  # a quiet watch is checked every half duration
    assert look("other", 90.0, now=110.0, looked_at=106.0) == 0.0  # expired at 105, not looked since
    assert look("other", 90.0, now=110.0, looked_at=105.5) == 0.0


def test_a_watching_standby_takes_a_released_lease_at_once_but_never_retries_in_a_loop() -> None:
    assert look("", 105.0, now=105.1) == 0.0  # released after its last look
    assert look("", 99.0, now=100.5) == 1.5  # its last look saw the release and failed: a retry period
    assert look("other", 80.0, now=100.5, looked_at=99.0) == 0.5  # expired before its failed look
