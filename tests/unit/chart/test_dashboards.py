"""The chart's Grafana dashboard and PrometheusRule: off by default, rendered when enabled, and every
query names only metrics the operator or a gateway exports, with labels those metrics have (no typos)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from tests.monitoring import dashboard_queries, rule_queries
from tests.unit.chart.test_chart_render import HELM, render

from harness_operator.controller import metrics
from harness_operator.gateway.rules import render_metrics
from harness_operator.modelgateway.server import build_request_counter

pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not built yet: tests/cluster/build-bins builds it (make test does)"
)

SUFFIXES = {"Counter": ("_total",), "Histogram": ("_bucket", "_sum", "_count"), "Gauge": ("",)}


def exported() -> dict[str, set[str]]:
    """Every series name the operator and the two gateways export, with its labels."""
    names: dict[str, set[str]] = {}
    egress = render_metrics({("ns", "api.example:443", "allowed"): 1}).splitlines()[-1]
    name, labels = re.fullmatch(r"(\w+)\{(.*)\} \d+", egress).groups()  # type: ignore[union-attr]
    names[name] = set(re.findall(r'(\w+)="', labels))
    model = build_request_counter(CollectorRegistry())
    for obj in [*vars(metrics).values(), model]:
        if isinstance(obj, MetricWrapperBase):
            kind = type(obj).__name__
            for suffix in SUFFIXES[kind]:
                extra = {"le"} if suffix == "_bucket" else set()
                names[obj._name + suffix] = set(obj._labelnames) | extra
    return names


def referenced(query: str) -> tuple[set[str], set[str]]:
    """Metric names and label names a query uses."""
    names = set(re.findall(r"\bharness_[a-z_]+\b", query))
    labels = set()
    for group in re.findall(r"\bby \(([^)]*)\)", query):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    for group in re.findall(r"\{([^}]*)\}", query):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", group))
    return names, labels


def rendered(*settings: str) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in render(*settings)}


def all_queries() -> list[tuple[str, str]]:
    if HELM is None:  # collected without helm: the module is skipped
        return []
    rule = rendered("metrics.prometheusRule.enabled=true")["PrometheusRule"]
    return dashboard_queries() + rule_queries(rule)


def test_both_are_off_by_default_and_rendered_when_enabled():
    assert "PrometheusRule" not in rendered()
    assert not any(d["metadata"]["name"].endswith("-dashboard") for d in render() if d["kind"] == "ConfigMap")
    docs = rendered(
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
        "metrics.prometheusRule.costPerHourUSD=3",
    )
    alerts = [name for name, _ in rule_queries(docs["PrometheusRule"])]
    assert alerts == [
        "HarnessRunFailureRateHigh",
        "HarnessCostBurnHigh",
        "HarnessRunStuck",
        "HarnessReconcileErrors",
    ]
    assert dict(rule_queries(docs["PrometheusRule"]))["HarnessCostBurnHigh"].endswith(">= 3")
    dashboard = next(
        d
        for d in render("metrics.grafanaDashboard.enabled=true")
        if d["metadata"]["name"].endswith("-dashboard")
    )
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert '"uid": "harness-operator"' in dashboard["data"]["harness-operator.json"]


@pytest.mark.parametrize(("title", "query"), all_queries(), ids=lambda v: v if " " not in v[:30] else None)
def test_every_query_uses_exported_metrics_and_their_labels(title, query):
    names, labels = referenced(query)
    known = exported()
    assert names, f"{title}: no harness_ metric in {query}"
    for name in names:
        assert name in known, f"{title}: {name} is exported neither by the operator nor by a gateway"
        assert labels <= known[name] | {"le"}, f"{title}: {name} has no label(s) {labels - known[name]}"


def test_the_dashboard_covers_what_the_issue_asks_for():
    text = " ".join(q for _, q in dashboard_queries())
    for needed in (
        "by (phase)",
        "by (reason)",
        "by (provider, model)",
        "by (namespace)",
        "harness_run_duration",
        "harness_fallbacks_total",
        "harness_retries_total",
        "harness_runs_queued",
        "harness_reconcile_errors_total",
    ):
        assert needed in text
