"""kube-apiserver restarted, then etcd stopped briefly, during a burst of runs that each fall back once:
every run ends exactly once, no Job twice, nothing lost; the cluster is brought back by `tests/cluster/up`
whatever happens. Slow: HARNESS_RELIABILITY=1."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import OperatorProcess
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
from .cluster import bring_up, pid_of, stop

RUNS = int(os.environ.get("HARNESS_RELIABILITY_CONTROL_PLANE_RUNS", "40"))

pytestmark = pytest.mark.reliability


def test_apiserver_restart_and_etcd_stop_during_a_burst(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator(HARNESS_MAX_RUNS_PER_NAMESPACE="10")
    make_fallback_providers(api, images["test"])
    names = [f"c{i}" for i in range(RUNS)]
    started = time.monotonic()
    outages: dict[str, float] = {}
    try:
        with Recorder(api) as recorder:
            create_burst(api, names)
            for component, at in (("kube-apiserver", RUNS // 4), ("etcd", RUNS // 2)):
                wait_until(lambda a=at: finished(recorder, names) >= a, timeout=600, what=f"{at} runs ended")
                old = pid_of(component)
                down = time.monotonic()
                stop(component)
                bring_up()
                outages[component] = time.monotonic() - down
                assert pid_of(component) not in (None, old), f"{component} was not restarted"
            wait_all_ended(recorder, names)
            problems = exactly_once(api, recorder, names, jobs_per_run=2)
    finally:
        bring_up()  # a healthy cluster for whoever comes next, even when the test failed midway
    print(
        f"\nmeasured: {RUNS} runs in {time.monotonic() - started:.0f}s; outages (stop -> up healthy) "
        f"{ {k: round(v, 1) for k, v in outages.items()} }; watches re-opened {recorder.rewatches} times"
    )
    # One list, so a failure shows every kind of problem found, not only the first.
    assert problems + burst_losses(api, names) + log_problems(operator.log_path.read_text()) == []
