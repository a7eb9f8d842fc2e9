"""Watch cache of Kueue's Workloads and LocalQueues: why a run's Job waits, and whether Kueue took it back.

Workloads carry no label of ours (Kueue names them and labels them with the Job's uid only), so the watch
is of every Workload in the watched namespaces, each kept as a slim copy (core/queue/kueue.slim_workload) by
the Job that owns it. A Workload's change reconciles the run of that Job, found in the Job cache (no
read); a LocalQueue's change reconciles nothing (its ClusterQueue and pending count are read with the
next Workload change). The watch starts once the cluster serves Kueue's API and a run names a queue (or
at start when it already does), so a cluster without Kueue pays nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from harness_operator.controller.cache import SYNC_WAIT_SECONDS, Change, ChildStore
from harness_operator.core.queue.kueue import LOCAL_QUEUE_KIND, WORKLOAD_KIND, slim_local_queue, slim_workload

KINDS = (WORKLOAD_KIND, LOCAL_QUEUE_KIND)


class KueueStore:
    """Slim Workloads by (namespace, owning Job) and LocalQueues by (namespace, name); thread-safe."""

    def __init__(self, children: ChildStore) -> None:
        self._children = children
        self._lock = threading.Lock()
        self._workloads: dict[tuple[str, str], dict[str, Any]] = {}
        self._job_of: dict[tuple[str, str], str] = {}  # (namespace, Workload) -> owning Job
        self._queues: dict[tuple[str, str], dict[str, Any]] = {}
        self._synced = {kind: threading.Event() for kind in KINDS}
        self._start: Callable[[], None] | None = None
        self._started = False

    def on_first_use(self, start: Callable[[], None]) -> None:
        """`start` begins the watches; called once, by the first `ensure_watching`."""
        self._start = start

    def ensure_watching(self) -> None:
        """Start the watches if they have not started (the cluster serves Kueue's API now)."""
        with self._lock:
            if self._started or self._start is None:
                return
            self._started = True
        self._start()

    @property
    def watching(self) -> bool:
        return self._started

    # --- reads ---------------------------------------------------------------------------------------

    def _wait_synced(self) -> None:
        for kind, event in self._synced.items():
            if not event.wait(SYNC_WAIT_SECONDS):
                raise TimeoutError(f"the watch cache of Kueue {kind}s has not synced yet")

    def workload(self, namespace: str, job: str) -> dict[str, Any] | None:
        """The Workload Kueue made for Job `job` (None: none yet, or Kueue is not watched)."""
        if not self._started:
            return None
        self._wait_synced()
        with self._lock:
            return self._workloads.get((namespace, job))

    def local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The LocalQueue `name` of the namespace (None: it does not exist, or Kueue is not watched)."""
        if not self._started:
            return None
        self._wait_synced()
        with self._lock:
            return self._queues.get((namespace, name))

    # --- writes (from the watch threads) -------------------------------------------------------------

    def apply(self, kind: str, type_: str, obj: dict[str, Any]) -> Change:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        with self._lock:
            return self._put(kind, obj, deleted=type_ == "DELETED")

    def replace(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> list[Change]:
        """A full list of `kind` in `namespace` (None: all): a change for each Workload that differs."""
        with self._lock:
            held = self._workloads if kind == WORKLOAD_KIND else self._queues
            before = {k: v for k, v in held.items() if namespace is None or k[0] == namespace}
            if kind == WORKLOAD_KIND:
                for key, workload in before.items():
                    self._job_of.pop((key[0], str(workload["metadata"]["name"])), None)
            for key in before:
                del held[key]
            changes = [self._put(kind, obj, deleted=False) for obj in items]
            gone = [
                Change(key[0], self._children.run_of_job(*key), False)
                for key in before
                if kind == WORKLOAD_KIND and key not in self._workloads
            ]
            self._synced[kind].set()
        return [c for c in changes + gone if c.run]

    def _put(self, kind: str, obj: dict[str, Any], deleted: bool) -> Change:
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if kind == LOCAL_QUEUE_KIND:
            if deleted:
                self._queues.pop((namespace, name), None)
            else:
                self._queues[(namespace, name)] = slim_local_queue(obj)
            return Change(namespace, None, False)
        job = self._job_of.pop((namespace, name), None)
        if job is not None:
            self._workloads.pop((namespace, job), None)
        slim = slim_workload(obj)
        owner = slim["metadata"]["job"]
        if owner is None:  # not a Job's Workload: nothing of ours
            return Change(namespace, None, False)
        if not deleted:
            self._workloads[(namespace, owner)] = slim
            self._job_of[(namespace, name)] = owner
        return Change(namespace, self._children.run_of_job(namespace, owner), False)
