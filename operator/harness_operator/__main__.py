"""harness-operator entrypoint and composition root: builds every collaborator and passes it in (nothing
is assigned to an object after it is built); logging, metrics, the watch caches, the Lease, then kopf
with our settings in a thread of its own; the main thread keeps the signals."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import secrets
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from prometheus_client import start_http_server

from harness_operator.controller import handlers
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import KINDS, ChildStore, Watcher
from harness_operator.controller.definitions import DefinitionReconciler
from harness_operator.controller.forge_reports import ForgeReporter
from harness_operator.controller.grants import Grants
from harness_operator.controller.health import HealthServer, readiness
from harness_operator.controller.kube import Kube
from harness_operator.controller.kueue_cache import KINDS as KUEUE_KINDS
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.leader import LeaderElector
from harness_operator.controller.logs import setup_logging
from harness_operator.controller.metering import AttemptMetering
from harness_operator.controller.metrics import LEADER
from harness_operator.controller.pipelines import PipelineReconciler
from harness_operator.controller.progress import ProgressReader
from harness_operator.controller.reconcile import wire_reconciler
from harness_operator.controller.reference_cache import (
    BUDGET_KIND,
    CLUSTER_DEFINITION_KIND,
    DEFINITION_KIND,
    ReferenceStore,
)
from harness_operator.controller.retention import ExpiryQueue, compute_expiry
from harness_operator.controller.run_cache import RUN_KIND, RunStore
from harness_operator.controller.run_trace import RunTracing
from harness_operator.controller.schedules import ScheduleReconciler
from harness_operator.controller.wiring import CachedBudgets, CachedDefinitions, CachedQueue, Controller
from harness_operator.controller.workers import Workers
from harness_operator.core.access.confinement import find_api_server_address
from harness_operator.core.config import AWAIT_OFF, FQDN_AUTO, FQDN_CILIUM, FQDN_NONE, OperatorConfig
from harness_operator.core.leadership import holder_identity
from harness_operator.core.objects.naming import LABEL_TRIGGER
from harness_operator.core.queue.kueue import KUEUE_GROUP
from harness_operator.telemetry import build_traces


def clock() -> datetime:
    """The operator's one wall clock, handed to every reconciler."""
    return datetime.now(UTC)


SERVICE = "harness-operator"  # the operator's spans' service.name


@dataclass(frozen=True)
class Parts:
    """What `main` starts: the Controller, and the caches and queues its watches and timers fill."""

    controller: Controller
    children: ChildStore
    kueue: KueueStore
    workers: Workers
    references: ReferenceStore
    retention: ExpiryQueue
    reporter: ForgeReporter


def compose(kube: Kube, config: OperatorConfig) -> Parts:
    """The composition root: every collaborator built once, here, and passed to what uses it."""
    children = ChildStore()
    kueue = KueueStore(children)  # its watches start on first use (main)
    workers = Workers.from_kubeconfigs(config.multikueue_workers)  # MultiKueue's worker clusters
    retention = ExpiryQueue(kube.delete_run, on_error=Controller.log_retention_error)

    def expiry(run: Mapping[str, Any], now: datetime) -> float | None:
        ttl, spare = config.default_ttl_seconds_after_finished, config.default_ttl_spares_applied
        return compute_expiry(run, ttl, now, spare)

    runs = RunStore(expiry)
    references = ReferenceStore()
    budgets = BudgetReconciler(kube, config.ledger_namespace, clock, CachedBudgets(references, runs))
    grants = Grants(kube, config)
    metering = AttemptMetering(kube, config, grants)
    definitions = CachedDefinitions(references, kube)
    traces = build_traces(SERVICE, config.tracing_endpoint, config.tracing_sampling)
    reconciler = wire_reconciler(
        kube,
        config,
        clock,
        children,
        kueue,
        workers,
        budgets,
        grants,
        metering,
        definitions,
        CachedQueue(runs),
        RunTracing(traces, config, clock, kube, workers),
        runs,
    )
    progress = ProgressReader(kube, reconciler.run_lock, clock, workers)
    controller = Controller(
        reconciler,
        DefinitionReconciler(kube, clock),
        retention,
        progress=progress,
        progress_interval=config.progress_interval_seconds,
        schedules=ScheduleReconciler(kube, clock, runs.scheduled),
        pipelines=PipelineReconciler(kube, clock, runs.piped),
        runs=runs,
        budgets=budgets,
        grants=grants,
    )
    return Parts(controller, children, kueue, workers, references, retention, ForgeReporter(kube))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness-operator", description="Reconcile HarnessRuns into Jobs.")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    config = OperatorConfig.from_env()
    kube = Kube()
    if config.fqdn_policy == FQDN_AUTO:
        found = FQDN_CILIUM if kube.fetch_serves_cilium_policies() else FQDN_NONE
        config = dataclasses.replace(config, fqdn_policy=found)
    if not config.api_server_address and config.await_network_policy != AWAIT_OFF:
        address = find_api_server_address(os.environ, kube.api.configuration.host)
        config = dataclasses.replace(config, api_server_address=address)
    parts = compose(kube, config)
    controller, children, kueue, references = parts.controller, parts.children, parts.kueue, parts.references
    retention, reporter = parts.retention, parts.reporter
    namespaces = config.namespaces or (None,)
    watchers: list[Watcher[Any]] = [
        *(Watcher(kube, children, kind, ns, controller.child_changed) for kind in KINDS for ns in namespaces),
        *(Watcher(kube, controller.runs, RUN_KIND, ns, controller.run_changed, "") for ns in namespaces),
        *(
            Watcher(kube, references, kind, ns, lambda _: None, "")
            for kind in (DEFINITION_KIND, BUDGET_KIND)
            for ns in namespaces
        ),
        Watcher(kube, references, CLUSTER_DEFINITION_KIND, None, lambda _: None, ""),
        *(Watcher(kube, reporter.store, RUN_KIND, ns, reporter.changed, LABEL_TRIGGER) for ns in namespaces),
    ]
    for watcher in watchers:
        watcher.start()
    parts.workers.watch(namespaces, controller.child_changed)

    def watch_kueue() -> None:  # once the cluster serves Kueue and a run names a queue (or now)
        for kind in KUEUE_KINDS:
            for ns in namespaces:
                Watcher(kube, kueue, kind, ns, controller.child_changed, "").start()

    kueue.on_first_use(watch_kueue)
    if kube.serves_api_group(KUEUE_GROUP):
        kueue.ensure_watching()
    retention.start()
    start_http_server(config.metrics_port)
    elector = None
    if config.leader_election_lease:
        elector = LeaderElector(
            kube,
            config.leader_election_namespace,
            config.leader_election_lease,
            holder_identity(config.pod_name, secrets.token_hex(4)),
        )
    kopf_ready = threading.Event()
    HealthServer(config.health_port, lambda: readiness(watchers, elector, kopf_ready)).start()
    stopping = threading.Event()  # kopf's stop flag: a signal, or this replica's leadership lost

    def stop(*_: object) -> None:
        controller.stop()  # at once, not once kopf has shut down: a new leader may be acting already
        reporter.stop()
        if elector is not None:
            elector.request_stop()
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    if elector is not None:  # a standby keeps its caches warm; only the leader acts
        elector.start()
        if not elector.wait_to_lead():
            elector.stop()
            return 0
        threading.Thread(
            target=stop_when_lost, args=(elector, controller, reporter, stopping), daemon=True
        ).start()
    else:  # the one replica leads: the no-leader alert reads this gauge
        LEADER.set(1)
    controller.lead()
    reporter.lead()
    # kopf in a thread of its own: it takes the signals only in the main thread, and here they must
    # reach `stop` before kopf begins its shutdown.
    kopf_thread = threading.Thread(
        target=run_kopf, args=(config, stopping, kopf_ready, handlers.memo_for(controller)), name="kopf"
    )
    kopf_thread.start()
    while kopf_thread.is_alive():
        kopf_thread.join(1.0)
    code = 0
    if elector is not None and elector.lost.is_set():
        code = 1  # restarted, this replica starts again as a standby
    elif elector is not None:
        elector.stop()  # a signal stopped kopf: hand the Lease over
    # kopf stopped and everything it wrote is in the API server. The process ends here, its output
    # flushed (kopf's idle executor workers would hold an interpreter shutdown without end).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def stop_when_lost(
    elector: LeaderElector, controller: Controller, reporter: ForgeReporter, stopping: threading.Event
) -> None:
    """Leadership lost: stop acting at once, then stop kopf (the process exits 1)."""
    elector.lost.wait()
    controller.stop()
    reporter.stop()
    stopping.set()


def run_kopf(
    config: OperatorConfig, stopping: threading.Event, ready: threading.Event, memo: kopf.Memo
) -> None:
    """kopf until `stopping` is set. Not asyncio.run: its shutdown of the default executor waits on
    kopf's idle workers without end (seen: SIGTERM, then the kubelet's SIGKILL after the grace period)."""
    loop = asyncio.new_event_loop()
    loop.run_until_complete(
        kopf.operator(
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            standalone=True,  # one kopf at a time: the Lease decides which replica's
            stop_flag=stopping,
            ready_flag=ready,
            memo=memo,
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
