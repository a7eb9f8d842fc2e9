"""Leader election for the operator's replicas: a thread that takes and renews the Lease, and hands it
over when the process stops (I/O; the rules are core/leadership's).

Only the leader runs kopf (its handlers, timers and the writes they make); a standby keeps its watch
caches of Jobs and Pods warm and looks at the Lease every retry period. A leader that cannot renew
within the renew deadline stops leading, and its process exits, as client-go's callers do: a replica
that may have missed renewals never writes again, and the restarted process starts as a standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from harness_operator.controller.kube import Kube
from harness_operator.controller.metrics import LEADER
from harness_operator.core.leadership import (
    LEASE_DURATION_SECONDS,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
    Observation,
    claim,
    lease_object,
    may_take,
    observe,
    release,
)

log = structlog.get_logger("harness_operator")


class LeaderElector:
    """`leading` is set once this replica holds the Lease; `lost` once it stopped leading (never to
    lead again in this process). `stop()` ends the thread and releases a Lease it holds."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        retry_seconds: float = RETRY_PERIOD_SECONDS,
        duration_seconds: int = LEASE_DURATION_SECONDS,
        renew_deadline_seconds: float = RENEW_DEADLINE_SECONDS,
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.clock, self.wall, self.retry_seconds = clock, wall, retry_seconds
        self.duration_seconds, self.renew_deadline_seconds = duration_seconds, renew_deadline_seconds
        self.leading = threading.Event()
        self.lost = threading.Event()
        self.stopping = threading.Event()
        self._decided = threading.Event()  # leading, or asked to stop
        self.observation: Observation | None = None
        self.renewed_at = 0.0
        self.read_at: float | None = None  # when the Lease was last read: a standby that can take over
        self.thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> None:
        LEADER.set(0)
        self.thread.start()

    def wait_to_lead(self) -> bool:
        """Block until this replica leads (True) or `request_stop` was called (False)."""
        self._decided.wait()
        return self.leading.is_set() and not self.stopping.is_set()

    def request_stop(self) -> None:
        """From a signal handler: a standby waiting to lead stops waiting."""
        self.stopping.set()
        self._decided.set()

    def can_take_over(self) -> bool:
        """The Lease was read within its duration: the API server answers this replica."""
        read = self.read_at
        return read is not None and self.clock() - read < self.duration_seconds

    def _run(self) -> None:
        while not self.stopping.is_set():
            held = self._try()
            now = self.clock()
            if held:
                self.renewed_at = now
                if not self.leading.is_set():
                    log.info("Leading: the Lease is ours", lease=self.name, identity=self.identity)
                    LEADER.set(1)
                    self.leading.set()
                    self._decided.set()
            elif self.leading.is_set() and (
                self._taken_by_another() or now - self.renewed_at >= self.renew_deadline_seconds
            ):
                self._lose()
                return
            self.stopping.wait(self.retry_seconds)

    def _taken_by_another(self) -> bool:
        seen = self.observation
        return seen is not None and seen.record.holder not in ("", self.identity)

    def _lose(self) -> None:
        log.error("Stopped leading: the Lease was taken or not renewed in time", lease=self.name)
        LEADER.set(0)
        self.leading.clear()
        self.lost.set()

    def _try(self) -> bool:
        """One look at the Lease: take it or renew it when it may be; True while it is ours."""
        try:
            lease = self.kube.fetch_lease(self.namespace, self.name)
            now = self.clock()
            self.read_at = now
            if lease is None:
                body = lease_object(
                    self.namespace, self.name, claim(None, self.identity, self.wall(), self.duration_seconds)
                )
                return self.kube.write_lease(body)
            self.observation = observe(self.observation, lease, now)
            if not may_take(self.observation, self.identity, now):
                return False
            spec = claim(self.observation.record, self.identity, self.wall(), self.duration_seconds)
            body = lease_object(self.namespace, self.name, spec, self.observation.resource_version)
            return self.kube.write_lease(body)
        except Exception as exc:  # the API server slow or gone: the renew deadline decides
            log.warning("Lease not read or written", lease=self.name, error=str(exc))
            return False

    def stop(self) -> None:
        """End the thread; a leader hands the Lease over (a standby takes it at its next look)."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        if not self.leading.is_set():
            return
        self.leading.clear()
        LEADER.set(0)
        try:
            lease = self.kube.fetch_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            seen = observe(None, lease, self.clock())
            body = lease_object(
                self.namespace, self.name, release(seen.record, self.wall()), seen.resource_version
            )
            if self.kube.write_lease(body):
                log.info("Lease released", lease=self.name)
        except Exception as exc:  # the standby takes over when the Lease expires instead
            log.warning("Lease not released", lease=self.name, error=str(exc))
