"""The requests a replica has in flight to the vendors, bounded per attempt and per namespace (pure).

The upstream connection pool is shared by every tenant the replica serves: each limit is below its size,
so one attempt, or one namespace's many attempts, never holds the whole pool while another tenant's
request waits for a connection. A request over a limit is refused at once, before anything is reserved
in its meter, so it costs nothing; the sandbox's CLI retries a 429 as it does the vendor's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import aiohttp

DEFAULT_MAX_PER_ATTEMPT = 8
DEFAULT_MAX_PER_NAMESPACE = 32
DEFAULT_UPSTREAM_CONNECTIONS = 100  # aiohttp's connector default, said where it is chosen


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
        self.attempts[key] += 1
        self.namespaces[namespace] += 1
        return Slot(namespace, key)

    def leave(self, slot: Slot) -> None:
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
