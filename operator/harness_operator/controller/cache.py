"""Watch caches of our Jobs and Pods: server-side selected list+watch, slim copies, per-run lookup.

kopf's `labels=` filter works on the client: the operator would still receive and decode every Job and
Pod of the namespaces it watches. Here the API server filters (`app.kubernetes.io/managed-by`), each
object is kept as a slim projection of the fields the reconciler reads (never managedFields, specs or
env), and the store keeps, per namespace, the runs holding an unfinished Job: the queue's in-flight count
without a LIST.

One thread per watch (kind x namespace, or kind cluster-wide): the reconciler and the kubernetes client
are synchronous, and a thread keeps the watch independent of kopf's event loop and of slow reconciles
(changes go to a `KeyedQueue` whose workers reconcile; a key pending already is not queued twice, so a
burst of events of one run costs one reconcile).
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import structlog

from harness_operator.controller.kube import Kube
from harness_operator.controller.kube_streams import WATCH_TIMEOUT_SECONDS
from harness_operator.core.objects.naming import (
    AGENT_CONTAINER,
    ANNOTATION_RUN,
    CLONE_CONTAINER,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY,
    PUBLISH_CONTAINER,
    RUNNER_CONTAINER,
    label_value,
)
from harness_operator.core.queue.kueue import is_kueue_managed
from harness_operator.core.status.observed import is_job_finished

log = structlog.get_logger("harness_operator")
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
KINDS = ("Job", "Pod")
MAX_BACKOFF_SECONDS = 30.0
SYNC_WAIT_SECONDS = 30.0


def _slim_meta(meta: dict[str, Any]) -> dict[str, Any]:
    annotations = meta.get("annotations") or {}
    kept = {k: v for k, v in annotations.items() if k == ANNOTATION_RUN}
    keys = ("name", "namespace", "uid", "labels", "ownerReferences", "creationTimestamp", "finalizers")
    slim: dict[str, Any] = {key: meta[key] for key in keys if key in meta}
    return {**slim, "annotations": kept}


def slim_job(job: dict[str, Any]) -> dict[str, Any]:
    """What the reconciler reads of a Job: identity, owner, suspend, its manager (MultiKueue), start time
    and conditions."""
    status = job.get("status") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
    ]
    return {
        "kind": "Job",
        "metadata": _slim_meta(job.get("metadata") or {}),
        "spec": {k: v for k, v in (job.get("spec") or {}).items() if k in ("suspend", "managedBy")},
        "status": {"startTime": status.get("startTime"), "conditions": conditions},
    }


def _slim_states(statuses: list[dict[str, Any]], read: tuple[str, ...]) -> list[dict[str, Any]]:
    """The states of the containers named in `read`, and of any other container while it waits (why a
    pod has not started: core/status/observed.describe_pod_wait)."""
    return [
        {"name": s["name"], "state": s.get("state") or {}}
        for s in statuses
        if s.get("name") in read or "waiting" in (s.get("state") or {})
    ]


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the reconciler reads of a Pod: identity, owner, phase, the states of the runner's and the
    agent's containers, of the workspace's clone and of the publisher (and of any container waiting),
    which init containers the pod has (by name: whether it publishes), and its PodScheduled condition
    (why it is not placed, or when it was)."""
    status = pod.get("status") or {}
    # The publisher is a regular container in an approved change's publish pod.
    read = (RUNNER_CONTAINER, AGENT_CONTAINER, PUBLISH_CONTAINER)
    agent = _slim_states(status.get("containerStatuses") or [], read)
    init = _slim_states(status.get("initContainerStatuses") or [], (CLONE_CONTAINER, PUBLISH_CONTAINER))
    # Unscheduled: why (the run says so); scheduled: when (the attempt's trace has its schedule step).
    scheduling = [
        {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled"
    ]
    names = [{"name": c.get("name")} for c in (pod.get("spec") or {}).get("initContainers") or []]
    return {
        "kind": "Pod",
        "metadata": _slim_meta(pod.get("metadata") or {}),
        "spec": {"initContainers": names},
        "status": {
            "phase": status.get("phase"),
            "conditions": scheduling,
            "containerStatuses": agent,
            "initContainerStatuses": init,
        },
    }


SLIM = {"Job": slim_job, "Pod": slim_pod}


def _takes_slot(job: dict[str, Any]) -> bool:
    """An unfinished Job takes a slot of its namespace, unless Kueue decides when it runs."""
    return not is_job_finished(job) and not is_kueue_managed(job["metadata"].get("labels"))


@dataclass(frozen=True)
class Change:
    """A Job or Pod of run `run` (full name, from its annotation) changed; `slot_freed`: a Job of the
    namespace that was in flight finished or went away, so a slot of the queue freed."""

    namespace: str
    run: str | None
    slot_freed: bool


class ChildStore:
    """Slim Jobs and Pods by (kind, namespace, run label); thread-safe; runs with an unfinished Job."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in KINDS}
        self._by_run: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._active: dict[str, set[str]] = defaultdict(set)
        # Runs this process created a Job for that no Job event has shown yet: in flight all the same,
        # or a burst would see free slots that its own creates took.
        self._started: dict[str, set[str]] = defaultdict(set)
        self._held: dict[str, set[str]] = defaultdict(set)  # runs waiting out a retry's backoff
        self._synced = {k: threading.Event() for k in KINDS}

    # --- reads ---------------------------------------------------------------------------------------

    def wait_synced(self, timeout: float = SYNC_WAIT_SECONDS) -> None:
        """Block until both caches hold a first full list; a TimeoutError (temporary) otherwise."""
        for kind, event in self._synced.items():
            if not event.wait(timeout):
                raise TimeoutError(f"the watch cache of {kind}s has not synced yet")

    def synced(self) -> bool:
        """Both caches hold a first full list (a worker cluster's may not have been reached yet)."""
        return all(event.is_set() for event in self._synced.values())

    def children(self, kind: str, namespace: str, run: str) -> list[dict[str, Any]]:
        """The run's Jobs or Pods (by the run label, as a label selector would find them)."""
        self.wait_synced()
        with self._lock:
            names = self._by_run.get((kind, namespace, label_value(run)), set())
            return [self._objects[kind][(namespace, n)] for n in sorted(names)]

    def run_of_job(self, namespace: str, job: str) -> str | None:
        """The run (full name, from its annotation) of our Job `job`, if held."""
        with self._lock:
            held = self._objects["Job"].get((namespace, job))
        return None if held is None else held["metadata"]["annotations"].get(ANNOTATION_RUN)

    def in_flight(self, namespace: str) -> set[str]:
        """Run labels of the namespace with an unfinished Job that takes a slot (not one Kueue manages),
        or one this process just created, or one waiting out a retry's backoff."""
        self.wait_synced()
        with self._lock:
            started = self._started.get(namespace, set())
            return self._active.get(namespace, set()) | started | self._held.get(namespace, set())

    def note_started(self, namespace: str, run: str) -> None:
        with self._lock:
            self._started[namespace].add(label_value(run))

    def hold(self, namespace: str, run: str) -> None:
        """The run keeps its slot with no Job in flight (a retry's backoff) until `release`."""
        with self._lock:
            self._held[namespace].add(label_value(run))

    def release(self, namespace: str, run: str) -> None:
        with self._lock:
            held = self._held.get(namespace)
            if held is not None:
                held.discard(label_value(run))
                if not held:
                    del self._held[namespace]

    def forget_started(self, namespace: str, run: str) -> None:
        """The Job noted as started was not created after all."""
        with self._lock:
            self._started.get(namespace, set()).discard(label_value(run))

    # --- writes (from the watch threads) -------------------------------------------------------------

    def apply(self, kind: str, type_: str, obj: dict[str, Any]) -> Change:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        slim = SLIM[kind](obj)
        meta = slim["metadata"]
        key = (meta.get("namespace") or "", meta.get("name") or "")
        with self._lock:
            active_before = self._is_active(kind, key)
            self._remove(kind, key)
            if type_ != "DELETED":
                self._add(kind, key, slim)
            freed = active_before and not self._is_active(kind, key)
        return Change(key[0], meta["annotations"].get(ANNOTATION_RUN), freed)

    def replace(self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]) -> list[Change]:
        """A full list of `kind` in `namespace` (None: all): the changes against what was held, so that
        what changed while the watch was down is reconciled (a Job deleted then is found lost)."""
        slims = {
            (s["metadata"].get("namespace") or "", s["metadata"]["name"]): s for s in map(SLIM[kind], items)
        }
        with self._lock:
            held = {k: v for k, v in self._objects[kind].items() if namespace is None or k[0] == namespace}
            changes = []
            for key in held.keys() | slims.keys():
                old, new = held.get(key), slims.get(key)
                if old == new:
                    continue
                active_before = self._is_active(kind, key)
                self._remove(kind, key)
                if new is not None:
                    self._add(kind, key, new)
                run = (new or old or {}).get("metadata", {}).get("annotations", {}).get(ANNOTATION_RUN)
                changes.append(Change(key[0], run, active_before and not self._is_active(kind, key)))
            self._synced[kind].set()
        return changes

    def _is_active(self, kind: str, key: tuple[str, str]) -> bool:
        """A Job held and not finished: it takes a slot of its namespace (unless Kueue manages it)."""
        job = self._objects[kind].get(key)
        return kind == "Job" and job is not None and _takes_slot(job)

    def _run_label(self, obj: dict[str, Any]) -> str:
        return str((obj["metadata"].get("labels") or {}).get(LABEL_RUN, ""))

    def _remove(self, kind: str, key: tuple[str, str]) -> None:
        old = self._objects[kind].pop(key, None)
        if old is None:
            return
        run_key = (kind, key[0], self._run_label(old))
        self._by_run[run_key].discard(key[1])
        if not self._by_run[run_key]:
            del self._by_run[run_key]
        if kind == "Job":
            self._refresh_active(key[0], run_key[2])

    def _add(self, kind: str, key: tuple[str, str], slim: dict[str, Any]) -> None:
        self._objects[kind][key] = slim
        label = self._run_label(slim)
        self._by_run[(kind, key[0], label)].add(key[1])
        if kind == "Job":
            self._started[key[0]].discard(label)
            if not self._started[key[0]]:
                del self._started[key[0]]
            self._refresh_active(key[0], label)

    def _refresh_active(self, namespace: str, label: str) -> None:
        names = self._by_run.get(("Job", namespace, label), set())
        jobs = self._objects["Job"]
        if any(_takes_slot(jobs[(namespace, n)]) for n in names):
            self._active[namespace].add(label)
        else:
            self._active[namespace].discard(label)
            if not self._active[namespace]:
                del self._active[namespace]


class KeyedQueue:
    """Work by key for a few worker threads; a key already waiting is not queued again."""

    def __init__(self, work: Callable[[tuple[str, str]], None], workers: int) -> None:
        self._work = work
        self._pending: deque[tuple[str, str]] = deque()
        self._queued: set[tuple[str, str]] = set()
        self._ready = threading.Condition()
        for index in range(workers):
            threading.Thread(target=self._serve, name=f"reconcile-{index}", daemon=True).start()

    def put(self, key: tuple[str, str]) -> None:
        with self._ready:
            if key in self._queued:
                return
            self._queued.add(key)
            self._pending.append(key)
            self._ready.notify()

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._pending:
                    self._ready.wait()
                key = self._pending.popleft()
                self._queued.discard(key)
            try:
                self._work(key)
            except Exception:  # the worker must survive; the work function logs its own errors
                log.exception("Reconcile from the watch cache failed", run=f"{key[0]}/{key[1]}")


ChangeT = TypeVar("ChangeT")
ChangeT_co = TypeVar("ChangeT_co", covariant=True)


class Store(Protocol[ChangeT_co]):
    """What a Watcher keeps its objects in (ChildStore, run_cache.RunStore, reference_cache's)."""

    def apply(self, kind: str, type_: str, obj: dict[str, Any]) -> ChangeT_co: ...

    def replace(
        self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]
    ) -> Iterable[ChangeT_co]: ...


class Watcher(Generic[ChangeT]):
    """List, then watch from the list's resourceVersion; relist on 410 Gone; bounded backoff on errors.
    `selector`: the label selector the API server filters by (our Jobs and Pods; "" for every object).
    The first list's changes are not notified: a new leader acts on every object it holds."""

    def __init__(
        self,
        kube: Kube,
        store: Store[ChangeT],
        kind: str,
        namespace: str | None,
        on_change: Callable[[ChangeT], None],
        selector: str = SELECTOR,
    ) -> None:
        self.kube, self.store, self.kind, self.namespace = kube, store, kind, namespace
        self.on_change, self.selector = on_change, selector
        self.stopped = threading.Event()
        self.synced = threading.Event()  # listed once: the store holds this kind (readiness)
        where = namespace or "all"
        self.thread = threading.Thread(target=self._run, name=f"watch-{kind}-{where}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        backoff = 1.0
        first = True
        while not self.stopped.is_set():
            try:
                items, version = self.kube.list_objects(self.kind, self.namespace, self.selector)
                changes = self.store.replace(self.kind, self.namespace, items)
                if not first:
                    self._notify(changes)
                first = False
                self.synced.set()
                while not self.stopped.is_set():
                    version = self._follow(version)
                    backoff = 1.0
            except _Gone:
                log.info("Watch expired; listing again", kind=self.kind, namespace=self.namespace)
            except Exception as exc:  # the API server restarting or unreachable: list again, later
                if getattr(exc, "status", None) == 410:
                    continue  # refused at the start of a watch: as expired
                where = self.namespace or "all namespaces"
                log.warning(
                    "Watch failed; retrying",
                    kind=self.kind,
                    namespace=where,
                    cluster=self.kube.cluster or None,
                    error=str(exc),
                )
                self.stopped.wait(backoff)
                backoff = min(MAX_BACKOFF_SECONDS, backoff * 2)

    def _follow(self, version: str) -> str:
        for event in self.kube.watch_objects(
            self.kind, self.namespace, self.selector, version, WATCH_TIMEOUT_SECONDS
        ):
            type_, obj = event.get("type"), event.get("object") or {}
            if type_ == "ERROR":
                if obj.get("code") == 410:
                    raise _Gone
                raise RuntimeError(f"watch error: {obj.get('message')}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if type_ != "BOOKMARK":
                self._notify([self.store.apply(self.kind, str(type_), obj)])
        return version

    def _notify(self, changes: Iterable[ChangeT]) -> None:
        for change in changes:
            self.on_change(change)


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""
