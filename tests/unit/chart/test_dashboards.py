"""The chart's Grafana dashboard and PrometheusRule: off by default, rendered when enabled, and every
query names only metrics the operator or a gateway exports, with labels those metrics have (no typos)."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from tests.monitoring import DASHBOARD, dashboard_queries, rule_queries
from tests.unit.chart.test_alerts import ALERTS
from tests.unit.chart.test_chart_render import HELM, render

from harness_operator.controller import metrics
from harness_operator.gateway.rules import render_metrics
from harness_operator.modelgateway.server import build_request_counter

pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not built yet: tests/cluster/build-bins builds it (make test does)"
)

# What Prometheus adds to every series of a target: the ServiceMonitor's job (the Service) and the instance
# (the operator's own `namespace`, on series without one, is a target label too).
TARGET_LABELS = {"job", "instance", "namespace"}
SUFFIXES = {"Counter": ("_total",), "Histogram": ("_bucket", "_sum", "_count"), "Gauge": ("",)}


def exported() -> dict[str, set[str]]:
    """Every series name the operator and the two gateways export, with its labels."""
    names: dict[str, set[str]] = {}
    egress = render_metrics({("ns", "api.example:443", "allowed"): 1}).splitlines()[-1]
    name, labels = re.fullmatch(r"(\w+)\{(.*)\} \d+", egress).groups()  # type: ignore[union-attr]
    names[name] = set(re.findall(r'(\w+)="', labels))
    names["up"] = set()  # Prometheus's own, of each target
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
    names = set(re.findall(r"\bharness_[a-z_]+\b|\bup(?=\{)", query))
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
    assert alerts == ALERTS
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
        has = known[name] | TARGET_LABELS | {"le"}
        assert labels <= has, f"{title}: {name} has no label(s) {labels - has}"


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


def test_the_dashboard_opens_on_a_stat_row_of_the_selected_release_and_teams():
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "release", "namespace", "provider"]
    # The release is picked from the operators' jobs (<release>-metrics), one at a time.
    assert variables["release"]["regex"] == "/^(.+)-metrics$/"
    assert not variables["release"]["multi"] and not variables["release"]["includeAll"]
    assert 'job="$release-metrics"' in variables["namespace"]["definition"]
    first = [p for p in dashboard["panels"] if p["gridPos"]["y"] < 5]
    assert first[0] == {**first[0], "type": "row", "title": "Overview"}
    stats = {p["title"]: p for p in first[1:]}
    assert [p["type"] for p in stats.values()] == ["stat"] * 6
    assert list(stats) == [
        "Cost today",
        "Success rate",
        "Budget left",
        "Tightest budget left",
        "Runs in flight",
        "Runs queued",
    ]
    assert stats["Cost today"]["timeFrom"] == "now/d"  # since midnight, whatever the dashboard's range
    assert "[$__range]" in stats["Cost today"]["targets"][0]["expr"]
    assert sum(p["gridPos"]["w"] for p in stats.values()) == 24


def test_every_panel_reads_only_the_selected_release_and_teams():
    """Each target selects its release's job; a target of a metric that carries the tenant's namespace
    filters by the namespace variable (the operator's own series carry the operator's namespace)."""
    known = exported()
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            names, _ = referenced(expr)
            jobs = set(re.findall(r'job="\$release-(metrics|egress|model)"', expr))
            assert len(jobs) == 1, f"{panel['title']}: {expr} selects no one release job"
            for name in names:
                assert f'{name}{{job="$release-' in expr, f"{panel['title']}: {name} unfiltered"
                if "namespace" in known[name]:
                    assert 'namespace=~"$namespace"' in expr, f"{panel['title']}: {name} of all teams"
                else:
                    assert "$namespace" not in expr, f"{panel['title']}: {name} has no tenant namespace"
