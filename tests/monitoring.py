"""The chart's dashboard and alert queries, as PromQL a Prometheus can evaluate (shared by the unit check
of names and labels and by the check against a real Prometheus)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHART = Path(__file__).resolve().parents[1] / "charts" / "harness-operator"
DASHBOARD = CHART / "dashboards" / "harness-operator.json"
# What Grafana puts in place of $__rate_interval (at least four scrape intervals).
RATE_INTERVAL = "5m"
# The release the checks render and scrape: its operator's metrics are the scrape job RELEASE-metrics.
RELEASE = "h-harness-operator"
# What the release variable holds, the namespace and provider variables when All is picked, and the
# dashboard's (or, for `Cost today`, the day's) range.
VARIABLES = {"$release": RELEASE, "$namespace": ".*", "$provider": ".*", "$__range": "1d"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, Grafana's variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            queries.append((panel["title"], expr))
    return queries


# The metric each gateway exports; every other metric a panel reads is the operator's.
GATEWAY_METRICS = {
    "egress": "harness_gateway_requests_total",
    "model": "harness_model_gateway_requests_total",
}


def dashboard_queries_by_source() -> dict[str, list[tuple[str, str]]]:
    """The panel targets by what exports their metric: `operator`, `egress` or `model`."""
    found: dict[str, list[tuple[str, str]]] = {"operator": [], **{source: [] for source in GATEWAY_METRICS}}
    for title, expr in dashboard_queries():
        source = next((s for s, metric in GATEWAY_METRICS.items() if metric in expr), "operator")
        found[source].append((title, expr))
    return found


def rule_queries(prometheus_rule: dict[str, Any]) -> list[tuple[str, str]]:
    """(alert name, PromQL) of a rendered PrometheusRule."""
    return [
        (rule["alert"], rule["expr"])
        for group in prometheus_rule["spec"]["groups"]
        for rule in group["rules"]
    ]


def rules_file(prometheus_rule: dict[str, Any]) -> str:
    """The PrometheusRule's groups as a Prometheus rules file (what `promtool check rules` reads)."""
    return json.dumps({"groups": prometheus_rule["spec"]["groups"]})
