"""The operator SIGKILLed at ten random instants of a burst of runs that each fall back once, and the
leader of two replicas killed three times: every run ends exactly once, no Job is created twice, no
output, usage or cost is lost. Slow: HARNESS_RELIABILITY=1."""

from __future__ import annotations

import contextlib
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from kubernetes import client

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import RELEASE_NAMESPACE, OperatorProcess
from .checks import (
    Recorder,
    burst_losses,
    create_burst,
    exactly_once,
    finished,
    log_problems,
    make_fallback_providers,
    wait_all_ended,
)

RUNS = int(os.environ.get("HARNESS_RELIABILITY_RUNS", "200"))
KILLS = 10
LEASE = "harness-operator"  # the chart's: its Role lets the operator update this Lease only

pytestmark = pytest.mark.reliability


def test_operator_killed_ten_times_during_a_burst(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator(HARNESS_MAX_RUNS_PER_NAMESPACE="20")
    make_fallback_providers(api, images["test"])
    names = [f"k{i}" for i in range(RUNS)]
    # Random instants, spread by progress rather than by the clock: a kill once this many runs ended.
    rng = random.Random(int(os.environ.get("HARNESS_RELIABILITY_SEED", "10")))
    thresholds = sorted(rng.sample(range(RUNS * 9 // 10), KILLS))
    started = time.monotonic()
    with Recorder(api) as recorder:
        create_burst(api, names)
        for threshold in thresholds:
            wait_until(
                lambda t=threshold: finished(recorder, names) >= t,
                timeout=600,
                what=f"{threshold} runs to end before the next kill",
            )
            operator.kill()
            operator.start()
        wait_all_ended(recorder, names)
        problems = exactly_once(api, recorder, names, jobs_per_run=2)
    print(
        f"\nmeasured: {RUNS} runs, {KILLS} SIGKILLs at {thresholds} runs ended, "
        f"{time.monotonic() - started:.0f}s, watches re-opened {recorder.rewatches} times"
    )
    # One list, so a failure shows every kind of problem found, not only the first.
    assert problems + burst_losses(api, names) + log_problems(operator.log_path.read_text()) == []


LEADER_KILLS = 3


def test_the_leader_killed_during_a_burst_while_a_standby_takes_over(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess], kube: client.ApiClient
) -> None:
    """Two replicas electing on the chart's Lease: the leader SIGKILLed three times with 50 runs in
    flight, each time restarted as the standby. Every run ends exactly once, and the takeover (kill ->
    the next Job created, which only a leader creates) is measured against the default 15 s Lease."""
    with contextlib.suppress(client.ApiException):  # no Lease of an earlier test: its holder is gone
        client.CoordinationV1Api(kube).delete_namespaced_lease(LEASE, RELEASE_NAMESPACE)
    election = {
        "HARNESS_MAX_RUNS_PER_NAMESPACE": "50",
        "HARNESS_LEADER_ELECTION_LEASE": LEASE,
        "HARNESS_LEADER_ELECTION_NAMESPACE": RELEASE_NAMESPACE,
    }
    replicas = [start_operator(HARNESS_POD_NAME=f"replica-{i}", **election) for i in range(2)]
    make_fallback_providers(api, images["test"])
    names = [f"l{i}" for i in range(RUNS)]
    thresholds = [RUNS * (k + 1) // (LEADER_KILLS + 2) for k in range(LEADER_KILLS)]
    takeovers: list[float] = []
    with Recorder(api) as recorder:
        create_burst(api, names)
        for threshold in thresholds:
            wait_until(
                lambda t=threshold: finished(recorder, names) >= t,
                timeout=600,
                what=f"{threshold} runs to end before the next kill",
            )
            (leader,) = [r for r in replicas if readyz(r) == "leader"]
            killed = time.monotonic()
            leader.kill()
            (standby,) = [r for r in replicas if r is not leader]
            wait_until(lambda s=standby: readyz(s) == "leader", timeout=60, what="the standby to lead")
            jobs = sum(len(uids) for uids in recorder.job_uids.values())  # not one the dead leader sent
            wait_until(
                lambda j=jobs: sum(len(uids) for uids in recorder.job_uids.values()) > j,
                timeout=60,
                what="a Job created by the new leader",
            )
            takeovers.append(time.monotonic() - killed)
            leader.start()  # back as the standby: the other replica holds the Lease
            assert readyz(leader) == "standby"
        wait_all_ended(recorder, names)
        problems = exactly_once(api, recorder, names, jobs_per_run=2)
    print(
        f"\nmeasured: {RUNS} runs, leader SIGKILLed at {thresholds} runs ended; kill -> next Job "
        f"{', '.join(f'{t:.1f}s' for t in takeovers)} (lease 15 s, goal <= 20 s)"
    )
    logs = "".join(r.log_path.read_text() for r in replicas)
    assert problems + burst_losses(api, names) + log_problems(logs) == []
    assert max(takeovers) <= 20, takeovers


def readyz(proc: OperatorProcess) -> str:
    """The replica's role as its readiness endpoint names it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/readyz", timeout=2) as resp:
            return str(resp.read().decode().strip())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode().strip())
