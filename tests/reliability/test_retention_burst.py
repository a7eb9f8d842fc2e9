"""Retention under a burst: with the operator's default TTL, a burst of finished runs and every child
leave etcd again (counted in etcd itself), and each run ended exactly once before it went."""

from __future__ import annotations

from collections.abc import Callable

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import OperatorProcess, definition_body, run_body
from .checks import Recorder, log_problems, terminal_events
from .cluster import namespace_counts

BURST = 20


def test_burst_of_finished_runs_leaves_etcd(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator(
        HARNESS_DEFAULT_TTL_SECONDS_AFTER_FINISHED="2", HARNESS_MAX_RUNS_PER_NAMESPACE="10"
    )
    api.create(definition_body("fake", images["test"], "ok"))
    before = namespace_counts(api.ns)
    names = [f"r{i}" for i in range(BURST)]
    peak: dict[str, int] = {}
    with Recorder(api) as recorder:
        for name in names:
            api.create(run_body(name, {"provider": "fake", "prompt": f"prompt of {name}"}))

        def all_finished_or_gone() -> bool:
            counts = namespace_counts(api.ns)
            for kind, n in counts.items():
                peak[kind] = max(peak.get(kind, 0), n)
            return all(h and h[-1][0] == "Succeeded" for h in (recorder.run_history.get(n) for n in names))

        wait_until(all_finished_or_gone, timeout=300, what=f"{BURST} runs to succeed")
        ended = terminal_events(api, dict.fromkeys(names, "Succeeded"))
        wait_until(
            lambda: namespace_counts(api.ns) == before,
            timeout=120,
            what="etcd to hold no more of the namespace's objects than before the burst",
            diagnose=lambda: f"before {before}, now {namespace_counts(api.ns)}, peak {peak}",
        )
    print(f"\nmeasured: etcd keys before {before}, peak {peak}, after {namespace_counts(api.ns)}")
    assert peak["harnessruns"] > before["harnessruns"] and peak["jobs"] > 0  # the burst was seen in etcd
    assert recorder.problems() == []
    # Events are not owned by the run: each run's one terminal Event outlives it.
    assert sorted(n for n in names if ended.get(n) == ["Succeeded"]) == sorted(names), ended
    assert log_problems(operator.log_path.read_text()) == []
