"""Shared fakes of the controller's unit tests: an API server that keeps what the reconcilers write, the
watch caches' views (definitions, the queue, budgets), and the run reconciler wired over them as
__main__ wires it."""

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.controller.budgets import BudgetReconciler
from harness_operator.controller.cache import ChildStore
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.controller.kueue_cache import KueueStore
from harness_operator.controller.metering import AttemptMetering
from harness_operator.controller.reconcile import Reconciler, wire_reconciler
from harness_operator.controller.run_cache import RunStore
from harness_operator.controller.run_trace import RunTracing
from harness_operator.controller.workers import Workers
from harness_operator.core.config import OperatorConfig
from harness_operator.core.queue.budget import BudgetRef, RunCharge
from harness_operator.core.queue.fairqueue import QueueEntry
from harness_operator.telemetry import Traces


class ApiServer:
    """What the API server holds: runs (whose status patches it applies), Jobs and Pods, and what the
    reconciler created; it counts the reads the reconciler makes past its caches."""

    def __init__(self, jobs: list[dict[str, Any]], pods: list[dict[str, Any]], *runs: HarnessRun) -> None:
        self.jobs, self.pods = jobs, pods
        self.runs = {r.metadata["name"]: r.to_api() for r in runs}
        self.reads: list[str] = []
        self.created: list[str] = []
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.run_reads = 0
        self.version = 1
        for body in self.runs.values():
            body["metadata"]["resourceVersion"] = "1"

    def fetch_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.run_reads += 1
        return self.runs.get(name)

    def write_run(self, name: str, change: Callable[[dict[str, Any]], None]) -> str:
        """Someone else's write to run `name` (a user's, another client's); its new resourceVersion."""
        change(self.runs[name])
        self.version += 1
        self.runs[name]["metadata"]["resourceVersion"] = str(self.version)
        return str(self.version)

    def fetch_namespace(self, name: str) -> dict[str, Any] | None:
        self.reads.append(f"namespace {name}")
        return self.namespaces.get(name)

    def fetch_definition_object(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """No namespaced definitions (the caches' Definitions hold the cluster's)."""
        self.reads.append(f"{plural} {namespace}/{name}")
        return None

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        def patch(run: dict[str, Any]) -> None:
            run["status"] = {**(run.get("status") or {}), **status}

        self.write_run(name, patch)
        return json.loads(json.dumps(self.runs[name]))

    def fetch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(f"job {name}")
        return next((j for j in self.jobs if j["metadata"]["name"] == name), None)

    def fetch_pods(self, namespace: str, run: str) -> list[dict[str, Any]]:
        self.reads.append("pods")
        return self.pods

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self.created.append(f"{obj['kind']} {obj['metadata']['name']}")
        if obj["kind"] == "Job":
            self.jobs.append(
                {**obj, "metadata": {**obj["metadata"], "uid": f"{obj['metadata']['name']}-uid"}}
            )
        return None

    def create_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def delete_job(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        pass

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.runs[name].get("status") or {})


class Definitions:
    """The definitions the watch caches would hold: a ClusterHarnessDefinition per provider."""

    def definition(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        if namespace is not None:
            return None
        spec = {"binary": name, "image": f"harness.local/sandbox-{name}:0.1.0"}
        return {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "ClusterHarnessDefinition",
            "metadata": {"name": name},
            "spec": spec,
        }


class Queue:
    """The run cache's queue of a namespace: fixed entries."""

    def __init__(self, entries: list[QueueEntry] | None = None) -> None:
        self._entries = entries or []

    def entries(self, namespace: str) -> list[QueueEntry]:
        return self._entries


class Budgets:
    """The budgets' and the runs' watch caches: fixed budgets and charges."""

    def __init__(self, budgets: list[BudgetRef] | None = None, runs: list[RunCharge] | None = None) -> None:
        self._budgets, self._runs = budgets or [], runs or []

    def budgets(self, namespace: str) -> list[BudgetRef]:
        return list(self._budgets)

    def runs(self, namespace: str) -> list[RunCharge]:
        return list(self._runs)


def wire(
    api: Any,
    config: OperatorConfig,
    clock: Callable[[], datetime],
    children: ChildStore,
    queue: Queue | None = None,
    workers: Workers | None = None,
    kueue: KueueStore | None = None,
    budgets: Budgets | None = None,
    traces: Traces | None = None,
    runs: RunStore | None = None,
) -> Reconciler:
    """The run reconciler over the fake `api`, wired as __main__ wires it (no budget, no worker, an empty
    queue and an empty run cache unless given)."""
    kube: Kube = api
    grants = Grants(kube, config)
    return wire_reconciler(
        kube,
        config,
        clock,
        children,
        kueue or KueueStore(children),
        workers or Workers(),
        BudgetReconciler(kube, config.ledger_namespace, clock, budgets or Budgets()),
        grants,
        AttemptMetering(kube, config, grants),
        Definitions(),
        queue or Queue(),
        RunTracing(traces, config, clock, kube, workers or Workers()),
        runs,
    )


class ConfigMapApi:
    """An API server's ConfigMaps by (namespace, name), each with a resourceVersion (a write with a stale
    one is refused, as a 409); the status patches of budgets and runs, and the Events posted."""

    def __init__(self) -> None:
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.budget_status: dict[tuple[str, str], dict[str, Any]] = {}
        self.run_status: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []
        self.version = 0

    def fetch_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.config_maps.get((namespace, name))
        return json.loads(json.dumps(found)) if found else None

    def write_config_map(self, body: dict[str, Any]) -> str | None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        held = self.config_maps.get(key)
        if (held is None) != (not meta.get("resourceVersion")):
            return None
        if held is not None and held["metadata"]["resourceVersion"] != meta["resourceVersion"]:
            return None
        self.version += 1
        self.config_maps[key] = {**body, "metadata": {**meta, "resourceVersion": str(self.version)}}
        return str(self.version)

    def delete_config_map(self, namespace: str, name: str) -> None:
        self.config_maps.pop((namespace, name), None)

    def patch_budget_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.budget_status[(namespace, name)] = status

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.run_status[(namespace, name)] = {**self.run_status.get((namespace, name), {}), **status}

    def create_event(self, body: Any, type_: str, reason: str, message: str, *args: Any) -> None:
        self.events.append((reason, message))
