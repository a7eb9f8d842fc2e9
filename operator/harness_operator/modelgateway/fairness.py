"""The requests a replica has in flight to the vendors, bounded per attempt, per namespace, by a fair
share of the pool, and by the pool itself (pure).

The upstream connection pool is shared by every tenant the replica serves. Each limit is below its size,
so one attempt, or one namespace's many attempts, never holds the whole pool; and when several
namespaces are busy, each may take at most the pool divided among them and one more, so tenants that
come while others flood still find connections. A request over a limit, or one the pool has no connection for,
is refused at once (429), before its body is read or anything is reserved in its meter: it costs next to
nothing, and never waits for a connection (which would end in a 502 after the connect timeout); the
sandbox's CLI retries a 429 as it does the vendor's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import aiohttp

DEFAULT_MAX_PER_ATTEMPT = 8
DEFAULT_MAX_PER_NAMESPACE = 32
# A connection to a vendor is a socket and a few buffers: 512 hold at well under the 200 MiB a replica is
# given (bench/RESULTS.md), and leave the fair share room to be useful (a namespace's 32 with 15 others).
DEFAULT_UPSTREAM_CONNECTIONS = 512


@dataclass(frozen=True)
class Limits:
    per_attempt: int = DEFAULT_MAX_PER_ATTEMPT
    per_namespace: int = DEFAULT_MAX_PER_NAMESPACE
    upstream_connections: int = DEFAULT_UPSTREAM_CONNECTIONS


def check_limits(limits: Limits) -> str | None:
    """Why the limits cannot hold (a message naming the settings), or None."""
    if limits.per_attempt < 1 or limits.per_namespace < 1:
        return (
            "HARNESS_MAX_IN_FLIGHT_PER_ATTEMPT and HARNESS_MAX_IN_FLIGHT_PER_NAMESPACE must be at least 1 "
            "(modelGateway.maxInFlightPerAttempt, modelGateway.maxInFlightPerNamespace in the chart)"
        )
    if limits.per_attempt > limits.per_namespace or limits.per_namespace >= limits.upstream_connections:
        return (
            f"the in-flight limits must be per attempt ({limits.per_attempt}) <= per namespace "
            f"({limits.per_namespace}) < the upstream connections ({limits.upstream_connections}), so one "
            "tenant never holds the whole pool: lower modelGateway.maxInFlightPerNamespace or raise "
            "modelGateway.upstreamConnections in the chart"
        )
    return None


@dataclass(frozen=True)
class Slot:
    """A request's place in flight: give it back with InFlight.leave."""

    namespace: str
    attempt: tuple[str, str]


@dataclass
class InFlight:
    """The requests in flight on this replica, by attempt (run uid, attempt number) and by namespace."""

    limits: Limits
    attempts: Counter[tuple[str, str]] = field(default_factory=Counter)
    namespaces: Counter[str] = field(default_factory=Counter)
    total: int = 0  # every namespace's together

    def share(self, namespace: str) -> int:
        """What `namespace` may hold now: the pool divided among the busy namespaces (counting it) and
        one more, so a newcomer always finds connections free."""
        busy = len(self.namespaces) + (0 if namespace in self.namespaces else 1)
        return max(1, self.limits.upstream_connections // (busy + 1))

    def enter(self, namespace: str, run_uid: str, attempt: str) -> Slot | str:
        """A slot for the request, or why it is refused (the limit met and the setting that raises it)."""
        key = (run_uid, attempt)
        if self.attempts[key] >= self.limits.per_attempt:
            return (
                f"harness model gateway: this attempt already has {self.limits.per_attempt} requests in "
                "flight on this replica (modelGateway.maxInFlightPerAttempt); wait for one to end and retry"
            )
        if self.namespaces[namespace] >= self.limits.per_namespace:
            return (
                f"harness model gateway: namespace {namespace} already has {self.limits.per_namespace} "
                "requests in flight on this replica (modelGateway.maxInFlightPerNamespace); wait for one "
                "to end and retry"
            )
        if self.total >= self.limits.upstream_connections:
            return (
                f"harness model gateway: all {self.limits.upstream_connections} connections of this replica "
                "to the vendors are in use (modelGateway.upstreamConnections); retry shortly"
            )
        share = self.share(namespace)
        if self.namespaces[namespace] >= share:
            return (
                f"harness model gateway: {len(self.namespaces)} namespaces share this replica's "
                f"connections to the vendors, and namespace {namespace} holds its share of {share}; "
                "wait for one of its requests to end and retry"
            )
        self.attempts[key] += 1
        self.namespaces[namespace] += 1
        self.total += 1
        return Slot(namespace, key)

    def leave(self, slot: Slot) -> None:
        self.total -= 1
        self.attempts[slot.attempt] -= 1
        if self.attempts[slot.attempt] <= 0:
            del self.attempts[slot.attempt]
        self.namespaces[slot.namespace] -= 1
        if self.namespaces[slot.namespace] <= 0:
            del self.namespaces[slot.namespace]


def is_unsent(exc: BaseException) -> bool:
    """Whether an error of the upstream request came before the request was sent: no connection made
    (refused, DNS, TLS), or none free in the pool nor made within the connect timeout. The vendor never
    saw such a request, so it costs nothing."""
    return isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))
