"""A run's pod deleted mid-run, and the node's kubelet restarted mid-run: the run ends with a clear reason
(the fallback proceeds, or it succeeds when its pod survived), exactly once, and nothing stays Running.
The kubelet restart is slow and disruptive: HARNESS_RELIABILITY=1."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import OperatorProcess, definition_body, run_body
from .checks import Recorder, exactly_once, log_problems, terminal_events
from .cluster import bring_up, pid_of, stop


def running_pod(api: Api, run: str) -> str | None:
    pods = api.core.list_namespaced_pod(api.ns, label_selector=f"agentharness.dev/run={run}").items
    return next((p.metadata.name for p in pods if p.status.phase == "Running"), None)


def test_pod_deleted_mid_run_falls_back(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator()
    api.create(definition_body("slow", images["test"], "hang"))
    api.create(definition_body("fake", images["test"], "ok"))
    with Recorder(api) as recorder:
        api.create(
            run_body("victim", {"provider": "slow", "prompt": "p", "fallback": [{"provider": "fake"}]})
        )
        pod = wait_until(
            lambda: running_pod(api, "victim"), timeout=60, what="the first attempt's pod running"
        )
        api.core.delete_namespaced_pod(pod, api.ns, grace_period_seconds=0)
        status = api.wait_finished("victim")
        problems = exactly_once(api, recorder, ["victim"], jobs_per_run=2)
    first, second = status["attempts"]
    print(f"\nmeasured: the deleted pod's attempt: {first}")
    assert (first["provider"], second["provider"], status["phase"]) == ("slow", "fake", "Succeeded"), status
    assert first["reason"] and first.get("message"), first  # a reason and words a user can act on
    assert status["output"]["excerpt"] == "answer from fake-agent: p"
    assert problems == []
    assert log_problems(operator.log_path.read_text()) == []


@pytest.mark.reliability
def test_kubelet_restarted_mid_run(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator()
    api.create(
        definition_body(
            "turns",
            images["test"],
            "turns",
            env=[
                {"name": "FAKE_MODE", "value": "turns"},
                {"name": "FAKE_TURNS", "value": "8"},
                {"name": "FAKE_TURN_SECONDS", "value": "2"},
            ],
        )
    )
    try:
        with Recorder(api) as recorder:
            api.create(run_body("steady", {"provider": "turns", "prompt": "p"}))
            wait_until(lambda: running_pod(api, "steady"), timeout=60, what="the pod running")
            old = pid_of("kubelet")
            down = time.monotonic()
            stop("kubelet")
            bring_up()
            outage = time.monotonic() - down
            assert pid_of("kubelet") not in (None, old), "the kubelet was not restarted"
            status = api.wait_finished("steady", timeout=180)
            problems = exactly_once(api, recorder, ["steady"], jobs_per_run=1)
    finally:
        bring_up()
    print(f"\nmeasured: kubelet down and back in {outage:.1f}s; run {status['phase']} {status.get('reason')}")
    assert status["phase"] == "Succeeded", status  # the container outlives its kubelet
    assert status["output"]["excerpt"] == "all turns done"
    assert status["progress"]["turns"] == 8
    assert problems == []
    assert terminal_events(api) == {"steady": ["Succeeded"]}
    assert log_problems(operator.log_path.read_text()) == []
