"""The chart's dashboard and alerts against a real Prometheus (Debian's, on loopback): it scrapes the
operator while runs succeed, fail and fall back on the real cluster; `promtool check rules` passes on the
rendered PrometheusRule, every rule evaluates without error, and every panel's and alert's query returns
series (the alerts rendered with thresholds at 0, so that their expressions must match)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring import CHART, dashboard_queries, rule_queries, rules_file

from .conftest import Api, wait_until
from .operator_env import OperatorProcess, free_port, run_body
from .test_budgets import create_budget

LOOSE = ("failureRatio=0", "costPerHourUSD=0", "stuckMinutes=0", "reconcileErrors=0")


def ensure_prometheus() -> tuple[str, str]:
    """Debian's prometheus and promtool, installed with apt when missing (a fresh CI machine)."""
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
            check=True,
            capture_output=True,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert prometheus and promtool
    return prometheus, promtool


def rendered_rule(cluster_bin_dir: Path) -> dict[str, Any]:
    sets = ["metrics.prometheusRule.enabled=true", *(f"metrics.prometheusRule.{s}" for s in LOOSE)]
    out = subprocess.run(
        [
            str(cluster_bin_dir / "helm"),
            "template",
            "h",
            str(CHART),
            "--show-only",
            "templates/prometheusrule.yaml",
        ]
        + [arg for s in sets for arg in ("--set", s)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(yaml.safe_load(out.stdout))


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("query", query=expr)["result"])


@pytest.fixture(scope="module")
def prometheus(
    operator: OperatorProcess, cluster_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, dict[str, Any]]]:
    """Prometheus on loopback scraping the operator every second, with the chart's alert rules."""
    binary, promtool = ensure_prometheus()
    folder = tmp_path_factory.mktemp("prometheus")
    rule = rendered_rule(cluster_bin_dir)
    (folder / "rules.yml").write_text(rules_file(rule))
    checked = subprocess.run(
        [promtool, "check", "rules", str(folder / "rules.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(folder / "rules.yml")],
        "scrape_configs": [
            {
                "job_name": "harness-operator",
                "static_configs": [{"targets": [f"127.0.0.1:{operator.metrics_port}"]}],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = Prometheus(port)

    def scraping() -> bool:
        try:
            targets = prom.get("targets")["activeTargets"]
        except OSError:
            return False
        return any(t["health"] == "up" for t in targets)

    try:
        wait_until(scraping, timeout=60, what="Prometheus to scrape the operator")
        yield prom, rule
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_every_panel_and_alert_query_returns_series(
    api: Api, fake: Callable[..., None], prometheus: tuple[Prometheus, dict[str, Any]]
) -> None:
    prom, rule = prometheus
    fake("good", "ok")
    fake("bad", "fail")
    # A budget covering the runs: the budget panels read its gauges.
    create_budget(
        api, "mon", {"period": "daily", "limits": {"maxCostUSD": 100}, "defaultReservationUSD": 0.01}
    )
    # One after another: the namespace's queue limit (2 in these tests) is not what this test is about.
    for name, spec in (
        ("mon-ok", {"provider": "good", "prompt": "p"}),
        ("mon-fallback", {"provider": "bad", "prompt": "p", "fallback": [{"provider": "good"}]}),
        ("mon-fail", {"provider": "bad", "prompt": "p"}),
    ):
        api.create(run_body(name, spec))
        api.wait_finished(name)
    # Prometheus has scraped every ended run, twice (rate and increase need two samples of a series).
    wait_until(
        lambda: len(
            prom.query("min(count_over_time(harness_runs_total[5m])) >= 2 and sum(harness_runs_total) >= 3")
        ),
        timeout=60,
        what="Prometheus to scrape the three ended runs twice",
    )
    # A labelled counter is born at its first increment, which increase() cannot see: a second failure,
    # once the series exists, is what makes the failure ratio defined (as in any real week of runs).
    api.create(run_body("mon-fail-2", {"provider": "bad", "prompt": "p"}))
    api.wait_finished("mon-fail-2")
    wait_until(
        lambda: len(prom.query('sum(increase(harness_runs_total{phase="Failed"}[5m])) > 0')),
        timeout=60,
        what="Prometheus to see the second failure",
    )
    queries = dashboard_queries() + rule_queries(rule)
    empty = [(title, q) for title, q in queries if not prom.query(q)]
    assert not empty, f"queries with no series: {empty}"

    def rules() -> list[dict[str, Any]]:
        return [r for g in prom.get("rules")["groups"] for r in g["rules"]]

    def all_active() -> list[dict[str, Any]] | None:
        # With thresholds at 0 every alert's condition holds, so each becomes pending or firing.
        current = rules()
        return current if current and all(r["state"] in ("pending", "firing") for r in current) else None

    evaluated = wait_until(
        all_active,
        timeout=30,
        what="every alert rule to be pending or firing",
        diagnose=lambda: str([(r["name"], r["state"], r["health"], r.get("lastError")) for r in rules()]),
    )
    assert {r["name"]: r["health"] for r in evaluated} == {name: "ok" for name, _ in rule_queries(rule)}
    print(
        f"\nmeasured: {len(queries)} queries ({len(dashboard_queries())} panel targets) all returned series"
    )
