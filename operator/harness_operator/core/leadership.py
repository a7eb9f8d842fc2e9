"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it (pure).

A replica may take the Lease when nobody holds it, when it holds it already, or when the holder's
record has not changed for `leaseDurationSeconds` by this replica's own clock: expiry is judged from
when a replica last saw the record change, never from the holder's renewTime, so clocks that disagree
between nodes cannot hand the Lease to two replicas. Every write carries the resourceVersion it read,
so of two replicas racing for an expired Lease one wins and the other's write is refused (409).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness_operator.core.objects.naming import LABEL_MANAGED_BY, MANAGED_BY

LEASE_DURATION_SECONDS = 15  # client-go's defaults: a standby takes over 15 s after the last renewal
RENEW_DEADLINE_SECONDS = 10  # a leader that could not renew for this long stops leading
RETRY_PERIOD_SECONDS = 2  # how often a leader renews and a standby looks again


def holder_identity(pod_name: str, nonce: str) -> str:
    """The identity one process holds the Lease under: its pod and a nonce of its own, so a container
    restarted in the same pod never takes its dead predecessor's Lease for its own."""
    return f"{pod_name}_{nonce}"


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease's spec says about its holder."""

    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int


@dataclass(frozen=True)
class Observation:
    """The record last read, its resourceVersion, and when (monotonic seconds) this replica first saw it."""

    record: LeaseRecord
    resource_version: str
    seen_at: float


def record_of(lease: Mapping[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(spec.get("leaseDurationSeconds") or LEASE_DURATION_SECONDS),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def observe(previous: Observation | None, lease: Mapping[str, Any], now: float) -> Observation:
    """The Lease as read at `now`: its clock keeps running while the record stays the same."""
    record = record_of(lease)
    version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
    if previous is not None and previous.record == record:
        return Observation(record, version, previous.seen_at)
    return Observation(record, version, now)


def may_take(observation: Observation, identity: str, now: float) -> bool:
    """Free, ours, or unchanged for its whole duration as seen from here."""
    record = observation.record
    if record.holder in ("", identity):
        return True
    return now >= observation.seen_at + record.duration_seconds


def next_look(
    observation: Observation | None,
    identity: str,
    leading: bool,
    watching: bool,
    now: float,
    looked_at: float,
    retry_seconds: float,
) -> float:
    """Seconds until the elector reads the Lease again (0: now), given the record last seen and when it
    last looked. A leader renews every retry period. A standby without a watch looks every retry period;
    with one (which shows it every renewal as it happens) it looks when the record it saw changed hands
    to nobody or expires, and at least every half duration so a quiet watch is checked. A record seen
    before the last look never asks for another look at once: a look that failed is not repeated in a
    loop."""
    periodic = max(0.0, looked_at + retry_seconds - now)
    if observation is None:
        return periodic
    holder, fresh = observation.record.holder, observation.seen_at > looked_at
    if leading:
        return 0.0 if fresh and holder not in ("", identity) else periodic
    if not watching:
        return periodic
    if holder in ("", identity):
        return 0.0 if fresh else periodic
    expiry = observation.seen_at + observation.record.duration_seconds
    if expiry <= looked_at:
        return periodic
    return max(0.0, min(expiry - now, observation.record.duration_seconds / 2))


def micro_time(now: datetime) -> str:
    """A MicroTime as the API server writes it (RFC 3339, UTC, microseconds)."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(
    record: LeaseRecord | None, identity: str, now: datetime, duration_seconds: int = LEASE_DURATION_SECONDS
) -> dict[str, Any]:
    """The spec that takes or renews the Lease for `identity`; a new holder counts a transition."""
    renewing = record is not None and record.holder == identity
    transitions = 0 if record is None else record.transitions + (0 if renewing else 1)
    acquired = record.acquire_time if renewing and record is not None else micro_time(now)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": acquired,
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }


def release(record: LeaseRecord, now: datetime) -> dict[str, Any]:
    """The spec a leader that stops writes: no holder, so a standby takes the Lease at its next look."""
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": record.transitions,
    }


def lease_object(
    namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None = None
) -> dict[str, Any]:
    """The Lease to create (no resourceVersion) or to replace (the one read: a stale write is refused)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": dict(spec)}
