"""Leader election for the operator's replicas: a thread that takes and renews the Lease, and hands it
over when the process stops (I/O; the rules are core/leadership's).

Only the leader acts (the Controller's queues and ticks, and kopf's handlers of budgets, schedules and
definitions) and writes; a standby keeps its watch caches warm and watches the Lease, so it sees each
renewal when it is written and takes the Lease the moment it expires or is released (without the
watch, it looks every retry period). A leader that cannot renew within the renew deadline stops
leading, and its process exits, as client-go's callers do: a replica that may have missed renewals
never writes again, and the restarted process starts as a standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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
    next_look,
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
        self._wake = threading.Event()  # the watch saw the Lease change, or asked to stop
        self._lock = threading.Lock()  # the observation, written by both threads
        self.observation: Observation | None = None
        self.watching = False  # the watch of the Lease is open and has shown it
        self.renewed_at = 0.0
        self.looked_at = 0.0
        self.read_at: float | None = None  # when the Lease was last read: a standby that can take over
        self.thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self.follower = threading.Thread(target=self._follow, name="leader-lease-watch", daemon=True)

    def start(self) -> None:
        LEADER.set(0)
        self.follower.start()
        self.thread.start()

    def wait_to_lead(self) -> bool:
        """Block until this replica leads (True) or `request_stop` was called (False)."""
        self._decided.wait()
        return self.leading.is_set() and not self.stopping.is_set()

    def request_stop(self) -> None:
        """From a signal handler: a standby waiting to lead stops waiting."""
        self.stopping.set()
        self._decided.set()
        self._wake.set()

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
            self._pause()

    def _pause(self) -> None:
        """Until the next look: woken by the watch to weigh each change it shows."""
        while not self.stopping.is_set():
            self._wake.clear()
            with self._lock:
                wait = next_look(
                    self.observation,
                    self.identity,
                    self.leading.is_set(),
                    self.watching,
                    self.clock(),
                    self.looked_at,
                    self.retry_seconds,
                )
            if wait <= 0 or not self._wake.wait(wait):
                return

    def _follow(self) -> None:
        """Watch the one Lease (its name as field selector, which the Role's resourceNames allow) and
        record each version of it; open the watch again whenever it ends."""
        while not self.stopping.is_set():
            try:
                for event in self.kube.watch_objects(
                    "Lease", self.namespace, "", "", 300, field_selector=f"metadata.name={self.name}"
                ):
                    if self.stopping.is_set():
                        return
                    kind, lease = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        break
                    if kind in ("ADDED", "MODIFIED"):
                        self._observe(lease, watched=True)
                    elif kind == "DELETED":
                        with self._lock:
                            self.observation = None
                    self._wake.set()
            except Exception as exc:  # the API server slow or gone: look every retry period meanwhile
                log.warning("Lease not watched", lease=self.name, error=str(exc))
            with self._lock:
                self.watching = False
            self._wake.set()
            self.stopping.wait(self.retry_seconds)

    def _observe(self, lease: dict[str, Any], watched: bool = False) -> None:
        with self._lock:
            now = self.clock()
            self.observation = observe(self.observation, lease, now)
            self.read_at = now
            self.watching = self.watching or watched

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
        self.looked_at = self.clock()
        try:
            lease = self.kube.fetch_lease(self.namespace, self.name)
            if lease is None:
                self.read_at = self.clock()
                body = lease_object(
                    self.namespace, self.name, claim(None, self.identity, self.wall(), self.duration_seconds)
                )
                return self.kube.write_lease(body)
            self._observe(lease)
            with self._lock:
                seen = self.observation
            if seen is None or not may_take(seen, self.identity, self.clock()):
                return False
            spec = claim(seen.record, self.identity, self.wall(), self.duration_seconds)
            body = lease_object(self.namespace, self.name, spec, seen.resource_version)
            return self.kube.write_lease(body)
        except Exception as exc:  # the API server slow or gone: the renew deadline decides
            log.warning("Lease not read or written", lease=self.name, error=str(exc))
            return False

    def stop(self) -> None:
        """End the thread; a leader hands the Lease over (a watching standby takes it at once)."""
        self.stopping.set()
        self._wake.set()
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
