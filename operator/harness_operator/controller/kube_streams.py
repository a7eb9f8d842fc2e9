"""The API server's streamed reads: lists in pages, watches, pod logs (I/O)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.kube_connection import RUNS, KubeConnection, none_if_missing
from harness_operator.core.objects.naming import (
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY,
    RUNNER_CONTAINER,
    label_value,
)
from harness_operator.core.pipeline.runs import LABEL_PIPELINE
from harness_operator.core.queue.kueue import KUEUE_GROUP, KUEUE_PLURALS, KUEUE_VERSION

LIST_PAGE_SIZE = 500
OUR_PLURALS = {
    "HarnessRun": RUNS,
    "HarnessDefinition": "harnessdefinitions",
    "ClusterHarnessDefinition": "clusterharnessdefinitions",
    "HarnessBudget": "harnessbudgets",
    "HarnessTrigger": "harnesstriggers",
    "HarnessPipeline": "harnesspipelines",
}
WATCH_TIMEOUT_SECONDS = 300  # how long the API server keeps one watch open before it is opened again


class KubeStreams(KubeConnection):
    """Kube's reads that stream: what the watch caches list and watch, a followed run, pod logs."""

    def fetch_pods(self, namespace: str, run: str) -> list[dict[str, Any]]:
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={label_value(run)}"
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def watch_run_and_pods(self, namespace: str, run: str, changed: Callable[[], None]) -> None:
        """Call `changed` on every change of the run or of its pods, from two watches in daemon threads
        (each re-opened where the API server ends it, from its last resourceVersion)."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={label_value(run)}"
        self._watch_all(
            namespace, [("HarnessRun", "", f"metadata.name={run}"), ("Pod", selector, "")], changed
        )

    def watch_pipeline(self, namespace: str, pipeline: str, changed: Callable[[], None]) -> None:
        """Call `changed` on every change of the pipeline or of its runs, as watch_run_and_pods does (a
        run's status says when its pod starts, so its pods need no watch of their own)."""
        selector = f"{LABEL_PIPELINE}={label_value(pipeline)}"
        streams = [("HarnessPipeline", "", f"metadata.name={pipeline}"), ("HarnessRun", selector, "")]
        self._watch_all(namespace, streams, changed)

    def _watch_all(
        self, namespace: str, streams: list[tuple[str, str, str]], changed: Callable[[], None]
    ) -> None:
        """One daemon thread watching each (kind, label selector, field selector) of `streams`."""
        for kind, labels, fields in streams:
            threading.Thread(
                target=self._watch_forever, args=(kind, namespace, labels, fields, changed), daemon=True
            ).start()

    def _watch_forever(
        self, kind: str, namespace: str, labels: str, fields: str, changed: Callable[[], None]
    ) -> None:
        """One watch, re-opened for as long as the process lives; after an error (410 Gone, a dropped
        connection) it starts again from the present, and `changed` makes the follower read afresh."""
        version = ""
        while True:
            try:
                for event in self.watch_objects(
                    kind, namespace, labels, version, WATCH_TIMEOUT_SECONDS, fields
                ):
                    if event.get("type") == "ERROR":
                        raise _Expired
                    version = str(
                        (event.get("object") or {}).get("metadata", {}).get("resourceVersion") or version
                    )
                    changed()
            except (_Expired, ApiException, OSError, urllib3.exceptions.HTTPError):
                version = ""
                changed()
                time.sleep(1)

    def _lister(self, kind: str, namespace: str | None) -> Callable[..., Any]:
        """The list call of `kind` (Job, Pod, one of our kinds, Kueue's Workload or LocalQueue, or a Lease
        in one namespace) in `namespace` (None: all; always all for ClusterHarnessDefinitions), positional
        arguments bound."""
        if kind == "Lease" and namespace is not None:
            return partial(self.coordination.list_namespaced_lease, namespace)
        if kind in OUR_PLURALS:
            plural = OUR_PLURALS[kind]
            if namespace is None or kind == "ClusterHarnessDefinition":
                return partial(self.custom.list_cluster_custom_object, GROUP, VERSION, plural)
            return partial(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, plural)
        if kind in KUEUE_PLURALS:
            plural = KUEUE_PLURALS[kind]
            if namespace is None:
                return partial(self.custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, plural)
            return partial(
                self.custom.list_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, namespace, plural
            )
        if kind == "Job":
            batch = self.batch
            return (
                batch.list_job_for_all_namespaces
                if namespace is None
                else partial(batch.list_namespaced_job, namespace)
            )
        core = self.core
        return (
            core.list_pod_for_all_namespaces
            if namespace is None
            else partial(core.list_namespaced_pod, namespace)
        )

    def list_objects(
        self, kind: str, namespace: str | None, selector: str
    ) -> tuple[Iterator[dict[str, Any]], str]:
        """Jobs, Pods or our objects matching `selector` (server side), in one namespace or all, as raw
        JSON (no model objects: decoding thousands of them is the cost a watch cache exists to avoid),
        with the list's resourceVersion to watch from. Read in pages of LIST_PAGE_SIZE as the items are
        consumed (one consistent snapshot; the API server ends a token that has waited too long with 410,
        and the caller lists again), so a list of 10,000 runs never holds them all decoded at once."""
        lister = self._lister(kind, namespace)

        def page(token: str | None) -> dict[str, Any]:
            response = lister(
                label_selector=selector or None, limit=LIST_PAGE_SIZE, _continue=token, _preload_content=False
            )
            listed: dict[str, Any] = json.loads(response.data)
            return listed

        pages = [page(None)]

        def items() -> Iterator[dict[str, Any]]:
            while pages:
                listed = pages.pop()
                token = (listed.get("metadata") or {}).get("continue")
                yield from listed.get("items") or []
                if token:
                    pages.append(page(token))

        return items(), str(pages[0]["metadata"]["resourceVersion"])

    def watch_objects(
        self,
        kind: str,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
    ) -> Iterator[dict[str, Any]]:
        """The watch events ({type, object}, raw JSON) of objects of `kind` matching `selector` (and
        `field_selector`) after `resource_version` (empty: every object now, then changes), until the
        server ends the watch (at most `timeout_seconds`)."""
        response = self._lister(kind, namespace)(
            label_selector=selector or None,
            field_selector=field_selector or None,
            watch=True,
            resource_version=resource_version or None,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(10, timeout_seconds + 30),
        )
        pending = b""
        try:
            for chunk in response.stream(64 * 1024):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def fetch_pod_log(self, namespace: str, pod: str, container: str = RUNNER_CONTAINER) -> str | None:
        return none_if_missing(
            lambda: self.core.read_namespaced_pod_log(
                pod, namespace, container=container, _preload_content=True
            )
        )

    def fetch_pod_log_tail(
        self, namespace: str, pod: str, tail_lines: int, limit_bytes: int, container: str = RUNNER_CONTAINER
    ) -> str | None:
        """At most the last `tail_lines` lines of a pod's log, cut at `limit_bytes`: one bounded read."""
        return none_if_missing(
            lambda: self.core.read_namespaced_pod_log(
                pod, namespace, container=container, tail_lines=tail_lines, limit_bytes=limit_bytes
            )
        )

    def fetch_pod_log_lines(
        self, namespace: str, pod: str, follow: bool, container: str = RUNNER_CONTAINER
    ) -> Iterator[str]:
        """A pod's log line by line, as the API server streams it; with `follow`, until the container ends."""
        response: Any = self.core.read_namespaced_pod_log(
            pod, namespace, container=container, follow=follow, _preload_content=False
        )
        pending = b""
        try:
            for chunk in response.stream(64 * 1024):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")
        finally:
            response.release_conn()


class _Expired(Exception):
    """The API server ended a watch with an ERROR event (410 Gone): watch again from the present."""
