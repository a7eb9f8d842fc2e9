"""record_finished: outcome, duration and per-attempt tokens and cost reach the Prometheus registry."""

import pytest
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest

from harness_operator.api.v1alpha1 import HarnessBudgetSpec, HarnessBudgetStatus, HarnessRun, HarnessRunStatus
from harness_operator.controller import metrics
from harness_operator.controller.metrics import build_model_label


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_record_finished() -> None:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "team-a"},
            "spec": {"provider": "metrics-test", "prompt": "p"},
        }
    )
    status = HarnessRunStatus.model_validate(
        {
            "phase": "Succeeded",
            "reason": "Succeeded",
            "startTime": "2026-11-29T12:00:00Z",
            "completionTime": "2026-11-29T12:00:30+00:00",
            "attempts": [
                {
                    "index": 1,
                    "provider": "metrics-test",
                    "model": "m1",
                    "usage": {
                        "inputTokens": 100,
                        "outputTokens": 7,
                        "costUSD": 0.5,
                        "costSource": "reported",
                    },
                }
            ],
        }
    )
    before = value(
        "harness_runs_total",
        namespace="team-a",
        provider="metrics-test",
        phase="Succeeded",
        reason="Succeeded",
    )
    tokens_before = value(
        "harness_tokens_total", provider="metrics-test", model="m1", type="input", namespace="team-a"
    )
    cost_before = value("harness_cost_usd_total", provider="metrics-test", model="m1", namespace="team-a")
    duration_before = value("harness_run_duration_seconds_sum", provider="metrics-test")
    metrics.record_finished(run, status)
    assert (
        value(
            "harness_runs_total",
            namespace="team-a",
            provider="metrics-test",
            phase="Succeeded",
            reason="Succeeded",
        )
        == before + 1
    )
    tokens = value(
        "harness_tokens_total", provider="metrics-test", model="m1", type="input", namespace="team-a"
    )
    assert tokens == tokens_before + 100
    cost = value("harness_cost_usd_total", provider="metrics-test", model="m1", namespace="team-a")
    assert cost == pytest.approx(cost_before + 0.5)
    duration = value("harness_run_duration_seconds_sum", provider="metrics-test")
    assert duration == pytest.approx(duration_before + 30)


@pytest.mark.parametrize(
    ("model", "label"),
    [
        (None, "unknown"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("openai/gpt-5.4@2026-01", "openai/gpt-5.4@2026-01"),
        ("m" * 2000, "other"),  # the red team's CLI
        ('x"} 1\nfake_metric{a="', "other"),
    ],
)
def test_a_model_label_is_a_model_name_or_other(model, label):
    assert build_model_label(model) == label


def test_in_flight_and_queued_are_per_namespace_and_an_emptied_namespace_reads_zero() -> None:
    """Two teams' runs never sum into one series; a team whose runs all ended reads 0, not nothing."""
    oldest = {"mx-a": 120.0, "mx-b": 0.0}
    metrics.record_runs(
        [("mx-a", "r1"), ("mx-a", "r2"), ("mx-b", "r3")], [("mx-b", "r4")], oldest.__getitem__
    )
    assert [value("harness_runs_in_flight", namespace=ns) for ns in ("mx-a", "mx-b")] == [2, 1]
    assert [value("harness_runs_queued", namespace=ns) for ns in ("mx-a", "mx-b")] == [0, 1]
    assert value("harness_run_oldest_in_flight_seconds", namespace="mx-a") == 120
    oldest["mx-a"] = 0.0  # read at the scrape, not when recorded
    metrics.record_runs([("mx-b", "r3")], [], oldest.__getitem__)
    assert REGISTRY.get_sample_value("harness_runs_in_flight", {"namespace": "mx-a"}) == 0
    assert value("harness_run_oldest_in_flight_seconds", namespace="mx-a") == 0
    assert value("harness_runs_queued", namespace="mx-b") == 0


def test_a_budget_exports_its_limit_and_a_deleted_budget_its_series_no_more() -> None:
    spec = HarnessBudgetSpec.model_validate({"period": "daily", "limits": {"maxCostUSD": 50}})
    status = HarnessBudgetStatus.model_validate({"spentUSD": 46, "reservedUSD": 1, "remainingUSD": 3})
    metrics.record_budget("mx-a", "team", spec, status)
    labels = {"namespace": "mx-a", "budget": "team"}
    assert value("harness_budget_limit_usd", **labels) == 50
    assert value("harness_budget_spent_usd", **labels) == 46
    unlimited = HarnessBudgetSpec.model_validate({"period": "daily", "limits": {"maxRuns": 5}})
    metrics.record_budget("mx-a", "team", unlimited, HarnessBudgetStatus.model_validate({"spentUSD": 46}))
    assert REGISTRY.get_sample_value("harness_budget_limit_usd", labels) is None  # no USD limit: no alert
    metrics.forget_budget("mx-a", "team")
    assert REGISTRY.get_sample_value("harness_budget_spent_usd", labels) is None


def test_a_traced_runs_duration_and_cost_point_at_its_trace() -> None:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "team-a"},
            "spec": {"provider": "exemplar-test", "prompt": "p"},
        }
    )
    status = HarnessRunStatus.model_validate(
        {
            "phase": "Succeeded",
            "reason": "Succeeded",
            "startTime": "2026-11-29T12:00:00Z",
            "completionTime": "2026-11-29T12:00:30Z",
            "usage": {"costUSD": 0.2},
            "traceID": "ab" * 16,
        }
    )
    metrics.record_finished(run, status)
    text = generate_latest(REGISTRY).decode()
    duration = [
        line
        for line in text.splitlines()
        if 'harness_run_duration_seconds_bucket{le="30.0",provider="exemplar-test"}' in line
    ]
    cost = [
        line
        for line in text.splitlines()
        if 'harness_run_cost_usd_bucket{le="0.25",provider="exemplar-test"}' in line
    ]
    assert len(duration) == 1 and f'trace_id="{"ab" * 16}"' in duration[0]
    assert len(cost) == 1 and f'trace_id="{"ab" * 16}"' in cost[0]
