"""The MultiKueue worker clusters the operator reaches (core/queue/multikueue): a client and a watch cache of
our Jobs and Pods per worker, what a dispatched attempt's pod needs written there, and the copies'
finalizers.

Each worker's Jobs and Pods are watched as this cluster's are (server-side selected, slim copies), and
their changes reconcile the run they belong to, so a dispatched attempt is followed by events, not polled."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from harness_operator.controller.cache import KINDS, Change, ChildStore, Watcher
from harness_operator.controller.kube import Kube
from harness_operator.core.objects.ownership import describe_conflict, is_expected_child
from harness_operator.core.queue.multikueue import RESULT_FINALIZER, build_remote_child, has_result_finalizer

log = structlog.get_logger("harness_operator")


@dataclass
class Worker:
    """One worker cluster: its client and its watch cache of our Jobs and Pods."""

    name: str
    kube: Kube
    children: ChildStore = field(default_factory=ChildStore)
    # The worker Jobs (by uid) whose pod has what it needs written: written once per copy and process.
    _prepared: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def job(self, namespace: str, run: str, name: str) -> dict[str, Any] | None:
        """The worker's Job `name` of the run (slim), if its watch holds one."""
        return next(
            (j for j in self.children.children("Job", namespace, run) if j["metadata"]["name"] == name), None
        )

    def pods(self, namespace: str, run: str) -> list[dict[str, Any]]:
        return self.children.children("Pod", namespace, run)

    def is_prepared(self, uid: str) -> bool:
        with self._lock:
            return uid in self._prepared

    def prepare(self, remote_job: Mapping[str, Any], children: Iterable[Mapping[str, Any]]) -> str | None:
        """Write `children` (built or read in this cluster) on the worker, owned by `remote_job` (its full
        object, as read there), then hold that Job with the result finalizer. None when done; else why a
        name there is taken by something else."""
        uid = remote_job["metadata"]["uid"]
        for child in children:
            desired = build_remote_child(child, remote_job)
            existing = self.kube.create(desired)
            if existing is not None and not is_expected_child(existing, desired):
                return f'on worker cluster "{self.name}": ' + describe_conflict(
                    existing, desired, remote_job["metadata"]["name"]
                )
        if not has_result_finalizer(remote_job):
            self.kube.add_job_finalizer(
                remote_job["metadata"]["namespace"],
                remote_job["metadata"]["name"],
                RESULT_FINALIZER,
                remote_job["metadata"].get("finalizers") or [],
            )
        with self._lock:
            self._prepared.add(uid)
        return None

    def release(self, namespace: str, run: str, jobs: set[str] | None = None) -> None:
        """Let go of the run's Jobs on this worker (`jobs`: only those names), whose results are read."""
        if not self.children.synced():
            return
        for job in self.children.children("Job", namespace, run):
            meta = job["metadata"]
            if (jobs is None or meta["name"] in jobs) and has_result_finalizer(job):
                self.kube.remove_job_finalizer(namespace, meta["name"], RESULT_FINALIZER, meta["finalizers"])
                with self._lock:
                    self._prepared.discard(meta["uid"])


class Workers:
    """The workers by MultiKueueCluster name."""

    def __init__(self, workers: Iterable[Worker] = ()) -> None:
        self._workers = {w.name: w for w in workers}

    @classmethod
    def from_kubeconfigs(cls, kubeconfigs: Mapping[str, str]) -> Workers:
        """From the operator's config (name -> kubeconfig file)."""
        return cls(Worker(name, _client(name, path)) for name, path in kubeconfigs.items())

    def get(self, name: str) -> Worker | None:
        return self._workers.get(name)

    def kube_of(self, cluster: str | None, here: Kube) -> Kube:
        """The client of the cluster an attempt ran on (`cluster`, None: this one, whose client is `here`)."""
        worker = self._workers.get(cluster) if cluster else None
        return worker.kube if worker is not None else here

    @property
    def names(self) -> list[str]:
        return sorted(self._workers)

    def watch(self, namespaces: Iterable[str | None], on_change: Callable[[Change], None]) -> None:
        """Start the watches of each worker's Jobs and Pods; their changes reconcile the runs."""
        for worker in self._workers.values():
            for kind in KINDS:
                for ns in namespaces:
                    Watcher(worker.kube, worker.children, kind, ns, on_change).start()

    def release(self, namespace: str, run: str, jobs: Mapping[str, set[str]] | None = None) -> None:
        """Let go of the run's Jobs on every worker (`jobs`: by worker, only those names); a worker that
        cannot be reached now is let go of on the run's next event."""
        for worker in self._workers.values():
            if jobs is not None and worker.name not in jobs:
                continue
            try:
                worker.release(namespace, run, None if jobs is None else jobs[worker.name])
            except Exception as exc:  # the run's next event (or its deletion) tries again
                log.warning(
                    "Releasing the run's Jobs on a worker cluster failed",
                    run=f"{namespace}/{run}",
                    cluster=worker.name,
                    error=str(exc),
                )


def _client(name: str, path: str) -> Kube:
    """A client of worker `name`; a missing or bad kubeconfig fails startup, naming it."""
    try:
        return Kube.for_cluster(name, path)
    except Exception as exc:
        raise ValueError(
            f"HARNESS_MULTIKUEUE_WORKERS: the kubeconfig of worker cluster {name!r} ({path}) cannot be "
            f"loaded: {exc}"
        ) from exc
