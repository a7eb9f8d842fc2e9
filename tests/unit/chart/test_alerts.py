"""The chart's alerts, evaluated by Prometheus's own rule engine (`promtool test rules`) over two releases'
series on one Prometheus: each alert fires per namespace, for its own release only, and carries what a
responder needs (severity, summary, description, runbook)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.monitoring import rule_queries
from tests.unit.chart.test_chart_render import CHART, HELM, helm

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    HELM is None or PROMTOOL is None,
    reason="needs helm (tests/cluster/build-bins) and promtool (Debian's prometheus package)",
)
# Two releases, each in its own namespace, serving their own teams.
RELEASES = {"a": "ops-a", "b": "ops-b"}
ALERTS = [
    "HarnessRunFailureRateHigh",
    "HarnessCostBurnHigh",
    "HarnessBudgetNearlySpent",
    "HarnessRunStuck",
    "HarnessReconcileErrors",
    "HarnessOperatorNoLeader",
    "HarnessOperatorDown",
]


def job(release: str) -> str:
    return f"{release}-harness-operator-metrics"


def rendered_rule(release: str, *settings: str) -> dict[str, Any]:
    """`settings`: `key=JSON` (a threshold of 0.6 stays a number)."""
    sets = [arg for s in ("metrics.prometheusRule.enabled=true", *settings) for arg in ("--set-json", s)]
    result = helm(
        "template", release, str(CHART), "--namespace", RELEASES[release], "--show-only",
        "templates/prometheusrule.yaml", *sets,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout))


def series(release: str, name: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in {"job": job(release), **labels}.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


def input_series() -> list[dict[str, str]]:
    """A's team-a is in trouble on every count, a's team-c is fine; b's team-b fails and spends, its
    operator is healthy. Samples every minute for two hours."""
    runs = {"provider": "p", "reason": "r"}
    return [
        # Half of team-a's runs fail; none of team-c's; all of team-b's.
        series("a", "harness_runs_total", "0+1x120", namespace="team-a", phase="Failed", **runs),
        series("a", "harness_runs_total", "0+1x120", namespace="team-a", phase="Succeeded", **runs),
        series("a", "harness_runs_total", "0+1x120", namespace="team-c", phase="Succeeded", **runs),
        series("b", "harness_runs_total", "0+1x120", namespace="team-b", phase="Failed", **runs),
        # 60 USD an hour for team-a and team-b, 6 for team-c.
        series("a", "harness_cost_usd_total", "0+1x120", namespace="team-a", provider="p", model="m"),
        series("a", "harness_cost_usd_total", "0+0.1x120", namespace="team-c", provider="p", model="m"),
        series("b", "harness_cost_usd_total", "0+1x120", namespace="team-b", provider="p", model="m"),
        # team-a's budget 95% spent, team-c's half, team-c's other without a USD limit; b's 95% too.
        series("a", "harness_budget_spent_usd", "95x120", namespace="team-a", budget="q"),
        series("a", "harness_budget_limit_usd", "100x120", namespace="team-a", budget="q"),
        series("a", "harness_budget_spent_usd", "50x120", namespace="team-c", budget="q"),
        series("a", "harness_budget_limit_usd", "100x120", namespace="team-c", budget="q"),
        series("a", "harness_budget_spent_usd", "500x120", namespace="team-c", budget="runs-only"),
        series("b", "harness_budget_spent_usd", "95x120", namespace="team-b", budget="q"),
        series("b", "harness_budget_limit_usd", "100x120", namespace="team-b", budget="q"),
        # team-a's oldest run in flight ages a minute a minute; team-c has none; team-b's is young.
        series("a", "harness_run_oldest_in_flight_seconds", "0+60x120", namespace="team-a"),
        series("a", "harness_run_oldest_in_flight_seconds", "0x120", namespace="team-c"),
        series("b", "harness_run_oldest_in_flight_seconds", "60x120", namespace="team-b"),
        # a's operator: a reconcile error a minute, neither replica leads, its last replica scraped down.
        series("a", "harness_reconcile_errors_total", "0+1x120", namespace="ops-a", kind="Temporary"),
        series("b", "harness_reconcile_errors_total", "0x120", namespace="ops-b", kind="Temporary"),
        series("a", "harness_operator_leader", "0x120", namespace="ops-a", pod="a-0"),
        series("a", "harness_operator_leader", "0x120", namespace="ops-a", pod="a-1"),
        series("b", "harness_operator_leader", "1x120", namespace="ops-b", pod="b-0"),
        series("b", "harness_operator_leader", "0x120", namespace="ops-b", pod="b-1"),
        series("a", "up", "0x120", namespace="ops-a", pod="a-0"),
        series("b", "up", "1x120", namespace="ops-b", pod="b-0"),
        series("b", "up", "1x120", namespace="ops-b", pod="b-1"),
    ]


def expected(release: str) -> dict[str, list[dict[str, str]]]:
    """The labels of each alert firing at 70 minutes, from release's rules."""
    team = {"a": "team-a", "b": "team-b"}[release]
    warn = {"severity": "warning", "job": job(release)}
    crit = {"severity": "critical", "job": job(release), "namespace": RELEASES[release]}
    if release == "b":
        return {
            "HarnessRunFailureRateHigh": [{**warn, "namespace": team}],
            "HarnessCostBurnHigh": [{**warn, "namespace": team}],
            "HarnessBudgetNearlySpent": [{**warn, "namespace": team, "budget": "q"}],
            "HarnessRunStuck": [],
            "HarnessReconcileErrors": [],
            "HarnessOperatorNoLeader": [],
            "HarnessOperatorDown": [],
        }
    return {
        "HarnessRunFailureRateHigh": [{**warn, "namespace": team}],
        "HarnessCostBurnHigh": [{**warn, "namespace": team}],
        "HarnessBudgetNearlySpent": [{**warn, "namespace": team, "budget": "q"}],
        "HarnessRunStuck": [{**warn, "namespace": team}],
        "HarnessReconcileErrors": [{**warn, "namespace": RELEASES[release]}],
        "HarnessOperatorNoLeader": [crit],
        "HarnessOperatorDown": [crit],
    }


def promtool_test(folder: Path, release: str) -> subprocess.CompletedProcess[str]:
    """Both releases' rules loaded (as a Prometheus watching both has them), release's alerts checked."""
    files = []
    for name in RELEASES:
        groups = rendered_rule(name)["spec"]["groups"]
        for group in groups:  # annotations are checked below; promtool compares them verbatim
            group["name"] = f"{name}-{group['name']}"
            for rule in group["rules"]:
                rule.pop("annotations")
                if name != release:
                    rule["alert"] = f"{rule['alert']}Other"
        (folder / f"{name}.json").write_text(json.dumps({"groups": groups}))
        files.append(f"{name}.json")
    alerts = expected(release)
    tests = {
        "rule_files": files,
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(),
                "alert_rule_test": [
                    {
                        "eval_time": "70m",
                        "alertname": name,
                        "exp_alerts": [{"exp_labels": labels} for labels in fired],
                    }
                    for name, fired in alerts.items()
                ],
            }
        ],
    }
    (folder / "tests.yml").write_text(yaml.safe_dump(tests))
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], cwd=folder, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("release", list(RELEASES))
def test_each_alert_fires_per_namespace_for_its_own_release_only(release: str, tmp_path: Path) -> None:
    assert sorted(expected(release)) == sorted(ALERTS)
    result = promtool_test(tmp_path, release)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_stay_quiet_below_their_thresholds(tmp_path: Path) -> None:
    """The same series under release a's rules with thresholds above them: nothing of team-a's fires
    (the operator's own alerts, which have no threshold, still do)."""
    high = (
        "failureRatio=0.6",
        "costPerHourUSD=61",
        "budgetSpentRatio=0.96",
        "stuckMinutes=80",
        "reconcileErrors=16",
    )
    groups = rendered_rule("a", *(f"metrics.prometheusRule.{s}" for s in high))["spec"]["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / "a.json").write_text(json.dumps({"groups": groups}))
    quiet = [name for name in ALERTS if name not in ("HarnessOperatorNoLeader", "HarnessOperatorDown")]
    tests = {
        "rule_files": ["a.json"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(),
                "alert_rule_test": [
                    {"eval_time": "70m", "alertname": name, "exp_alerts": []} for name in quiet
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_what_a_responder_needs(tmp_path: Path) -> None:
    rule = rendered_rule("a", 'metrics.prometheusRule.runbookURL="https://docs.example/runbooks.md"')
    assert [name for name, _ in rule_queries(rule)] == ALERTS
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
            assert r["for"], r["alert"]
            assert set(r["annotations"]) == {"summary", "description", "runbook_url"}, r["alert"]
            assert r["annotations"]["runbook_url"] == f"https://docs.example/runbooks.md#{r['alert'].lower()}"
            assert f'job="{job("a")}"' in r["expr"], r["alert"]
    (tmp_path / "rules.json").write_text(json.dumps({"groups": rule["spec"]["groups"]}))
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(tmp_path / "rules.json")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr  # the annotations' templates parse
