"""Prometheus metrics; labels are closed sets (provider, model, phase, reason, type) or the run's namespace
(the tenant, what cost is charged to), never run names or UIDs; budget gauges carry the budget's namespace
and name (a platform team has few). The chart's ServiceMonitor honours these labels, so `namespace` is the
tenant's, and `job` (the release's metrics Service) tells two releases' series apart."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from contextlib import suppress
from datetime import datetime
from functools import partial

from prometheus_client import Counter, Gauge, Histogram

from harness_operator.api.v1alpha1 import (
    HarnessBudgetSpec,
    HarnessBudgetStatus,
    HarnessRun,
    HarnessRunStatus,
)

MODEL_LABEL_CHARS = 64
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]*")

RUNS = Counter(
    "harness_runs_total",
    "Runs that ended, by namespace, provider, phase and reason.",
    ["namespace", "provider", "phase", "reason"],
)
DURATION = Histogram(
    "harness_run_duration_seconds",
    "From the first attempt's start to the run's end.",
    ["provider"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
)
RUN_COST = Histogram(
    "harness_run_cost_usd",
    "A run's cost in USD, all its attempts, once it ended.",
    ["provider"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50),
)
TOKENS = Counter(
    "harness_tokens_total", "Tokens reported by agent CLIs.", ["provider", "model", "type", "namespace"]
)
COST = Counter(
    "harness_cost_usd_total", "Cost in USD, reported or computed.", ["provider", "model", "namespace"]
)
FALLBACKS = Counter(
    "harness_fallbacks_total",
    "Fallback attempts started, by namespace and the provider that failed.",
    ["namespace", "provider"],
)
RETRIES = Counter(
    "harness_retries_total",
    "Retry attempts started (spec.retry), by namespace and the provider that failed.",
    ["namespace", "provider"],
)
LEADER = Gauge("harness_operator_leader", "1 while this replica holds the leader-election Lease, else 0.")
IN_FLIGHT = Gauge(
    "harness_runs_in_flight", "Runs with an attempt Job that has not ended, by namespace.", ["namespace"]
)
FORGE_REPORTS = Counter(
    "harness_forge_reports_total",
    "Reports of triggers' runs on their forge: reported, retried (a failed try, tried again) or failed "
    "(given up).",
    ["result"],
)
RECONCILE_ERRORS = Counter("harness_reconcile_errors_total", "Reconciles that failed, by kind.", ["kind"])
# Per budget: a platform team's few HarnessBudgets, not per run, so their names are a bounded label.
_BUDGET = ["namespace", "budget"]
BUDGET_SPENT = Gauge("harness_budget_spent_usd", "USD spent by finished runs this period.", _BUDGET)
BUDGET_RESERVED = Gauge("harness_budget_reserved_usd", "USD reserved by runs in flight.", _BUDGET)
BUDGET_REMAINING = Gauge("harness_budget_remaining_usd", "USD left this period (maxCostUSD only).", _BUDGET)
BUDGET_LIMIT = Gauge("harness_budget_limit_usd", "The budget's maxCostUSD per period.", _BUDGET)
BUDGET_TOKENS = Gauge("harness_budget_tokens", "Tokens of this period's runs.", _BUDGET)
BUDGET_RUNS = Gauge("harness_budget_runs", "Runs started this period.", _BUDGET)
_BUDGET_GAUGES = (BUDGET_LIMIT, BUDGET_SPENT, BUDGET_RESERVED, BUDGET_REMAINING, BUDGET_TOKENS, BUDGET_RUNS)


def record_budget(namespace: str, name: str, spec: HarnessBudgetSpec, status: HarnessBudgetStatus) -> None:
    """The budget's current period, as its status shows it, and its USD limit."""
    for gauge, value in (
        (BUDGET_LIMIT, spec.limits.max_cost_usd),
        (BUDGET_SPENT, status.spent_usd),
        (BUDGET_RESERVED, status.reserved_usd),
        (BUDGET_REMAINING, status.remaining_usd),
        (BUDGET_TOKENS, status.tokens),
        (BUDGET_RUNS, status.runs),
    ):
        if value is not None:
            gauge.labels(namespace=namespace, budget=name).set(value)
        else:  # a limit removed: its alert must not hold on
            with suppress(KeyError):
                gauge.remove(namespace, name)


def forget_budget(namespace: str, name: str) -> None:
    """A deleted budget's series go (its alert with them)."""
    for gauge in _BUDGET_GAUGES:
        with suppress(KeyError):
            gauge.remove(namespace, name)


for _kind in ("Temporary", "Permanent"):  # present at 0 from the start, so rates and alerts see a series
    RECONCILE_ERRORS.labels(kind=_kind)
QUEUED = Gauge(
    "harness_runs_queued", "Runs waiting for a slot (maxRunsPerNamespace), by namespace.", ["namespace"]
)
OLDEST_IN_FLIGHT = Gauge(
    "harness_run_oldest_in_flight_seconds",
    "Age of the namespace's longest-running run in flight (0 when none).",
    ["namespace"],
)

_NAMESPACES_SEEN: set[str] = set()  # of the in-flight gauges: a platform team's few tenant namespaces


def record_runs(
    in_flight: Collection[tuple[str, str]],
    queued: Collection[tuple[str, str]],
    oldest_seconds: Callable[[str], float],
) -> None:
    """Runs in flight and queued per namespace, from (namespace, name) pairs; a namespace once seen stays
    at 0 when it has none (its series do not vanish under an alert's `for:`). `oldest_seconds(namespace)`
    is read at each scrape."""
    _NAMESPACES_SEEN.update(ns for ns, _ in (*in_flight, *queued))
    for namespace in _NAMESPACES_SEEN:
        IN_FLIGHT.labels(namespace=namespace).set(sum(1 for ns, _ in in_flight if ns == namespace))
        QUEUED.labels(namespace=namespace).set(sum(1 for ns, _ in queued if ns == namespace))
        OLDEST_IN_FLIGHT.labels(namespace=namespace).set_function(partial(oldest_seconds, namespace))


PROGRESS_READS = Counter(
    "harness_progress_log_reads_total", "Pod log tails read to follow in-flight runs' progress."
)
PROGRESS_BYTES = Counter("harness_progress_log_bytes_total", "Bytes of those pod log tails.")
PROGRESS_WRITES = Counter("harness_progress_writes_total", "status.progress writes (figures moved).")


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def build_model_label(model: str | None) -> str:
    """The model a CLI reported, as a label: a model name's characters and at most 64 of them, else
    `other` (a CLI's 2,000-character or odd `model` must not become a series of its own)."""
    if not model:
        return "unknown"
    return model if len(model) <= MODEL_LABEL_CHARS and MODEL_NAME.fullmatch(model) else "other"


def record_finished(run: HarnessRun, status: HarnessRunStatus) -> None:
    """Count one ended run: outcome, duration, and each attempt's tokens and cost."""
    provider = run.spec.provider
    namespace = str(run.metadata.get("namespace") or "")
    RUNS.labels(
        namespace=namespace, provider=provider, phase=str(status.phase), reason=status.reason or ""
    ).inc()
    # A traced run's figures point at its trace (OpenMetrics exemplars: Prometheus keeps them when it
    # scrapes that format with exemplar storage on).
    exemplar = {"trace_id": status.trace_id} if status.trace_id else None
    duration = _seconds(status.start_time, status.completion_time)
    if duration is not None:
        DURATION.labels(provider=provider).observe(duration, exemplar)
    cost = status.usage.cost_usd if status.usage else None
    if cost is not None:
        RUN_COST.labels(provider=provider).observe(cost, exemplar)
    for attempt in status.attempts:
        usage = attempt.usage
        if usage is None:
            continue
        model = build_model_label(attempt.model)
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cacheRead", usage.cache_read_tokens),
            ("cacheWrite", usage.cache_write_tokens),
        ):
            if value:
                TOKENS.labels(provider=attempt.provider, model=model, type=kind, namespace=namespace).inc(
                    value
                )
        if usage.cost_usd:
            COST.labels(provider=attempt.provider, model=model, namespace=namespace).inc(usage.cost_usd)
