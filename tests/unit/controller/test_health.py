"""The operator's probes, served over real HTTP on loopback: liveness answers whatever the API server
does; readiness needs the watch caches listed and, by role, kopf ready (leader) or the Lease read
lately (standby); a replica that stopped leading is not ready."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

from tests.integration.operator_env import free_port

from harness_operator.controller.health import HealthServer, readiness
from harness_operator.controller.leader import LeaderElector


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def watcher(listed: bool) -> Any:
    synced = threading.Event()
    if listed:
        synced.set()
    return SimpleNamespace(synced=synced)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(clock: Clock) -> LeaderElector:
    # Never started: its state is set below as its thread would set it (its Lease I/O is tested against
    # the real API server in tests/integration/test_leader_election.py).
    return LeaderElector(None, "harness-system", "harness-operator", "pod-a", clock=clock)  # type: ignore[arg-type]


def test_liveness_answers_and_readiness_says_the_role() -> None:
    kopf_ready = threading.Event()
    watchers = [watcher(True), watcher(False)]
    port = free_port()
    HealthServer(port, lambda: readiness(watchers, None, kopf_ready)).start()
    assert get(port, "/livez") == (200, "ok")
    assert get(port, "/readyz") == (503, "leader (no election)")  # a cache not listed, kopf not ready
    watchers[1].synced.set()
    assert get(port, "/readyz") == (503, "leader (no election)")
    kopf_ready.set()
    assert get(port, "/readyz") == (200, "leader (no election)")
    assert get(port, "/healthz")[0] == 404


def test_a_standby_is_ready_while_it_reads_the_lease_and_a_leader_once_kopf_is() -> None:
    clock, kopf_ready = Clock(), threading.Event()
    one = elector(clock)
    listed = [watcher(True)]
    assert readiness(listed, one, kopf_ready) == (False, "standby")  # the Lease never read
    one.read_at = clock.now
    assert readiness(listed, one, kopf_ready) == (True, "standby")
    assert readiness([watcher(False)], one, kopf_ready) == (False, "standby")
    clock.now += 15  # the API server has not answered for a lease duration: it could not take over
    assert readiness(listed, one, kopf_ready) == (False, "standby")
    one.leading.set()
    assert readiness(listed, one, kopf_ready) == (False, "leader")
    kopf_ready.set()
    assert readiness(listed, one, kopf_ready) == (True, "leader")
    one.lost.set()
    assert readiness(listed, one, kopf_ready) == (False, "stopped leading")
