"""The chart's dashboard and alerts against a real Prometheus (Debian's, on loopback): it scrapes the
operator while runs succeed, fail and fall back on the real cluster; `promtool check rules` passes on the
rendered PrometheusRule, every rule evaluates without error, and every panel's and alert's query returns
series (the alerts rendered with thresholds at 0, so that their expressions must match)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring import (
    CHART,
    RELEASE,
    dashboard_queries,
    dashboard_queries_by_source,
    rule_queries,
    rules_file,
)

from .conftest import Api, wait_until
from .operator_env import OperatorProcess, run_body
from .prometheus import Prometheus, ensure_prometheus
from .prometheus import prometheus as start_prometheus
from .test_budgets import create_budget

LOOSE = ("failureRatio=0", "costPerHourUSD=0", "budgetSpentRatio=0", "stuckMinutes=0", "reconcileErrors=0")
# A second release on the same Prometheus whose operator is gone (its job scrapes nothing).
GONE = "gone-harness-operator"
OPERATOR_NAMESPACE = "harness-system"  # what the ServiceMonitor's target labels would say


def rendered_rule(cluster_bin_dir: Path, release: str = "h") -> dict[str, Any]:
    sets = ["metrics.prometheusRule.enabled=true", *(f"metrics.prometheusRule.{s}" for s in LOOSE)]
    out = subprocess.run(
        [
            str(cluster_bin_dir / "helm"),
            "template",
            release,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            "--show-only",
            "templates/prometheusrule.yaml",
        ]
        + [arg for s in sets for arg in ("--set", s)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(yaml.safe_load(out.stdout))


@pytest.fixture(scope="module")
def prometheus(
    operator: OperatorProcess, cluster_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, dict[str, Any]]]:
    """Prometheus on loopback scraping the operator every second as release h's job and as a second
    release's (so the two jobs' series are the same), with the chart's alert rules of release h and of
    release `gone`, whose operator nobody scrapes."""
    _, promtool = ensure_prometheus()
    folder = tmp_path_factory.mktemp("prometheus")
    rule = rendered_rule(cluster_bin_dir)
    files = []
    for release, rendered in (("h", rule), ("gone", rendered_rule(cluster_bin_dir, "gone"))):
        for group in rendered["spec"]["groups"]:
            group["name"] = f"{release}-{group['name']}"
        files.append(folder / f"{release}.yml")
        files[-1].write_text(rules_file(rendered))
        checked = subprocess.run([promtool, "check", "rules", str(files[-1])], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    target = [f"127.0.0.1:{operator.metrics_port}"]
    jobs = {f"{RELEASE}-metrics": target, "other-harness-operator-metrics": target}
    with start_prometheus(folder, jobs, files, labels={"namespace": OPERATOR_NAMESPACE}) as prom:
        yield prom, rule


def test_every_panel_and_alert_query_returns_series(
    api: Api, fake: Callable[..., None], prometheus: tuple[Prometheus, dict[str, Any]]
) -> None:
    prom, rule = prometheus
    fake("good", "ok")
    fake("bad", "fail")
    fake("limited", "rate-limited")
    # A budget covering the runs: the budget panels read its gauges.
    create_budget(
        api, "mon", {"period": "daily", "limits": {"maxCostUSD": 100}, "defaultReservationUSD": 0.01}
    )
    # One after another: the namespace's queue limit (2 in these tests) is not what this test is about.
    for name, spec in (
        ("mon-ok", {"provider": "good", "prompt": "p"}),
        ("mon-fallback", {"provider": "bad", "prompt": "p", "fallback": [{"provider": "good"}]}),
        ("mon-fail", {"provider": "bad", "prompt": "p"}),
        # Rate limited, retried once, then the fallback: the retry panel reads harness_retries_total.
        (
            "mon-retry",
            {
                "provider": "limited",
                "prompt": "p",
                "retry": {"limit": 1, "backoffSeconds": 1},
                "fallback": [{"provider": "good"}],
            },
        ),
    ):
        api.create(run_body(name, spec))
        api.wait_finished(name)
    # Prometheus has scraped every ended run, twice (rate and increase need two samples of a series).
    wait_until(
        lambda: len(
            prom.query("min(count_over_time(harness_runs_total[5m])) >= 2 and sum(harness_runs_total) >= 4")
        ),
        timeout=60,
        what="Prometheus to scrape the four ended runs twice",
    )
    # A labelled counter is born at its first increment, which increase() cannot see: a second failure,
    # once the series exists, is what makes the failure ratio defined (as in any real week of runs).
    api.create(run_body("mon-fail-2", {"provider": "bad", "prompt": "p"}))
    api.wait_finished("mon-fail-2")
    wait_until(
        # In both jobs' series: they scrape at different moments of the second.
        lambda: len(prom.query('sum by (job) (increase(harness_runs_total{phase="Failed"}[5m])) > 0')) == 2,
        timeout=60,
        what="Prometheus to see the second failure",
    )
    # The gateway panels read the gateways' metrics: their own tests check those (test_egress_gateway,
    # test_model_gateway).
    # (The operator is up and leads: the no-leader and down alerts' queries are rightly empty.)
    healthy = ("HarnessOperatorNoLeader", "HarnessOperatorDown")
    queries = dashboard_queries_by_source()["operator"] + [
        q for q in rule_queries(rule) if q[0] not in healthy
    ]
    empty = prom.empty(queries)
    assert not empty, f"queries with no series: {empty}"

    def rules() -> list[dict[str, Any]]:
        return [r for g in prom.get("rules")["groups"] for r in g["rules"]]

    # With thresholds at 0 every alert of a namespace with runs holds; the operator runs and leads, so
    # release h's NoLeader and Down do not; `gone`'s Down does (pending out its `for:`).
    quiet = {("h", name) for name in healthy}
    quiet |= {("gone", name) for name, _ in rule_queries(rule) if name != "HarnessOperatorDown"}

    def settled() -> list[dict[str, Any]] | None:
        current = rules()
        alerts = {
            (a["labels"]["job"].split("-")[0], a["labels"]["alertname"]) for r in current for a in r["alerts"]
        }
        wanted = {(release, name) for release in ("h", "gone") for name, _ in rule_queries(rule)} - quiet
        return current if alerts == wanted else None

    evaluated = wait_until(
        settled,
        timeout=30,
        what="every alert of release h but NoLeader and Down, and gone's Down, to be pending or firing",
        diagnose=lambda: str([(r["name"], r["state"], r["health"], r.get("lastError")) for r in rules()]),
    )
    assert all(r["health"] == "ok" for r in evaluated), evaluated
    alerts = [a for r in evaluated for a in r["alerts"]]
    # Per namespace, and only release h's job: the same series under `other`'s job raise nothing of h's.
    jobs = {a["labels"]["job"] for a in alerts}
    assert jobs == {f"{RELEASE}-metrics", f"{GONE}-metrics"}, jobs
    tenants = {
        a["labels"]["alertname"]: a["labels"]["namespace"]
        for a in alerts
        if a["labels"]["job"] != f"{GONE}-metrics"
    }
    for name in ("HarnessRunFailureRateHigh", "HarnessCostBurnHigh", "HarnessBudgetNearlySpent"):
        assert tenants[name] == api.ns, (name, tenants)  # the runs' namespace, not the operator's
    assert tenants["HarnessReconcileErrors"] == OPERATOR_NAMESPACE
    print(
        f"\nmeasured: {len(queries)} queries ({len(dashboard_queries())} panel targets) all returned series;"
        f" {len(alerts)} alert instances, all of release h's job or gone's"
    )
