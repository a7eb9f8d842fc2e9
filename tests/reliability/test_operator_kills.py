"""The operator SIGKILLed at ten random instants of a burst of runs that each fall back once: every run
ends exactly once, no Job is created twice, no output, usage or cost is lost. Slow: HARNESS_RELIABILITY=1."""

from __future__ import annotations

import os
import random
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

RUNS = int(os.environ.get("HARNESS_RELIABILITY_RUNS", "200"))
KILLS = 10

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
