"""The only module that talks to the API server: fetch_*, create_*, patch_*, delete_* (I/O)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION, SessionStatus
from harness_operator.contract.frame import SESSION, FrameError, decode_frame
from harness_operator.controller.errors import Permanent, classify
from harness_operator.core.kueue import KUEUE_GROUP, KUEUE_PLURALS, KUEUE_VERSION
from harness_operator.core.naming import (
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY,
    RUNNER_CONTAINER,
    label_value,
    output_config_map_name,
)
from harness_operator.core.ownership import is_run_output
from harness_operator.core.resolution import DefinitionReader, NotTheOutput, Unreadable

FIELD_MANAGER = "harness-operator"
RUNS = "harnessruns"
SCHEDULES = "harnessschedules"
LIST_PAGE_SIZE = 500
OUR_PLURALS = {
    "HarnessRun": RUNS,
    "HarnessDefinition": "harnessdefinitions",
    "ClusterHarnessDefinition": "clusterharnessdefinitions",
    "HarnessBudget": "harnessbudgets",
}
log = structlog.get_logger("harness_operator")
GROUP_RECHECK_SECONDS = 60.0
WATCH_TIMEOUT_SECONDS = 300  # how long the API server keeps one watch open before it is opened again
CONNECTIONS = 32


class Kube:
    """Thin typed wrappers over the official client; every call goes through here."""

    def __init__(self, api_client: client.ApiClient | None = None, cluster: str = "") -> None:
        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            settings = client.Configuration.get_default_copy()
            # Every worker keeps its connection: with the default pool of 10, a burst's workers and
            # watch threads discarded connections and paid a new TLS handshake per request.
            settings.connection_pool_maxsize = CONNECTIONS
            api_client = client.ApiClient(settings)
        self.api = api_client
        self.cluster = cluster  # a MultiKueue worker's name (controller/workers); "": this cluster
        self._served: set[str] = set()
        self._unserved: dict[str, float] = {}
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)

    @classmethod
    def for_cluster(cls, name: str, path: str) -> Kube:
        """A client of another cluster (a MultiKueue worker, `name`) from its kubeconfig file, leaving this
        process's own configuration alone."""
        settings = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=settings)
        settings.connection_pool_maxsize = CONNECTIONS
        return cls(client.ApiClient(settings), cluster=name)

    @classmethod
    def from_kubeconfig(cls, path: str | None, context: str | None) -> tuple[Kube, str]:
        """A client as kubectl would make it (file, context), and that context's namespace."""
        config.load_kube_config(config_file=path, context=context)
        _, active = config.list_kube_config_contexts(config_file=path)
        chosen = active
        if context:
            contexts, _ = config.list_kube_config_contexts(config_file=path)
            chosen = next((c for c in contexts if c.get("name") == context), active)
        namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
        return cls(client.ApiClient()), namespace

    # --- reads -------------------------------------------------------------------------------------

    def fetch_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, RUNS, name)
        )

    def fetch_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULES, name)
        )

    def fetch_definition_object(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One HarnessDefinition (namespace given) or ClusterHarnessDefinition, as stored."""
        if namespace:
            return _none_if_missing(
                lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            )
        return _none_if_missing(lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))

    def fetch_config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        cm = self.fetch_config_map(namespace, name)
        return None if cm is None else (cm.get("data") or {}).get(key)

    def fetch_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A whole ConfigMap as a plain dict (metadata included, to check who owns it)."""
        cm = _none_if_missing(lambda: self.core.read_namespaced_config_map(name, namespace))
        return None if cm is None else dict(self.api.sanitize_for_serialization(cm))

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        secret = _none_if_missing(lambda: self.core.read_namespaced_secret(name, namespace))
        if secret is None or key not in (secret.data or {}):
            return None
        return base64.b64decode(secret.data[key]).decode("utf-8", errors="replace")

    def fetch_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Secret as stored (None when it does not exist): a run's own, to copy to a worker cluster."""
        secret = _none_if_missing(lambda: self.core.read_namespaced_secret(name, namespace))
        return None if secret is None else dict(self.api.sanitize_for_serialization(secret))

    def add_job_finalizer(self, namespace: str, name: str, finalizer: str, current: list[str]) -> None:
        """Add `finalizer` to Job `name`, whose finalizers are `current` (refused if they changed since)."""
        patch: list[dict[str, Any]]
        if current:
            patch = [
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ]
        else:
            patch = [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
        self.batch.patch_namespaced_job(name, namespace, patch)

    def remove_job_finalizer(self, namespace: str, name: str, finalizer: str, current: list[str]) -> None:
        """Remove `finalizer` from Job `name`, whose finalizers are `current` (refused if they changed)."""
        index = current.index(finalizer)
        patch = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        _none_if_missing(lambda: self.batch.patch_namespaced_job(name, namespace, patch))

    def fetch_pods(self, namespace: str, run: str) -> list[dict[str, Any]]:
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={label_value(run)}"
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def watch_run_and_pods(self, namespace: str, run: str, changed: Callable[[], None]) -> None:
        """Call `changed` on every change of the run or of its pods, from two watches in daemon threads
        (each re-opened where the API server ends it, from its last resourceVersion)."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={label_value(run)}"
        streams = (("HarnessRun", "", f"metadata.name={run}"), ("Pod", selector, ""))
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

    def serves_api_group(self, group: str) -> bool:
        """Whether the API server serves `group` (discovery); a yes is kept, a no asked again after
        GROUP_RECHECK_SECONDS (the group may be installed later)."""
        now = time.monotonic()
        if group in self._served or self._unserved.get(group, float("-inf")) > now:
            return group in self._served
        groups = client.ApisApi(self.api).get_api_versions().groups or []
        if any(g.name == group for g in groups):
            self._served.add(group)
            return True
        self._unserved[group] = now + GROUP_RECHECK_SECONDS
        return False

    def fetch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Job as stored (None when it does not exist): the check before an attempt is called lost."""
        job = _none_if_missing(lambda: self.batch.read_namespaced_job(name, namespace))
        return None if job is None else dict(self.api.sanitize_for_serialization(job))

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
        return _none_if_missing(
            lambda: self.core.read_namespaced_pod_log(
                pod, namespace, container=container, _preload_content=True
            )
        )

    def fetch_pod_log_tail(
        self, namespace: str, pod: str, tail_lines: int, limit_bytes: int, container: str = RUNNER_CONTAINER
    ) -> str | None:
        """At most the last `tail_lines` lines of a pod's log, cut at `limit_bytes`: one bounded read."""
        return _none_if_missing(
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

    # --- writes ------------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create `obj`; None when created, else the object that already holds its name (as a plain
        dict) for the caller to check: a name taken is not proof that the object is ours."""
        kind, ns, name = obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]
        body: Any = obj  # the client serialises plain dicts as they are
        readers = {
            "Job": lambda: self.batch.read_namespaced_job(name, ns),
            "Secret": lambda: self.core.read_namespaced_secret(name, ns),
            "ConfigMap": lambda: self.core.read_namespaced_config_map(name, ns),
            "PersistentVolumeClaim": lambda: self.core.read_namespaced_persistent_volume_claim(name, ns),
            "NetworkPolicy": lambda: self.net.read_namespaced_network_policy(name, ns),
            "CiliumNetworkPolicy": lambda: self.custom.get_namespaced_custom_object(
                "cilium.io", "v2", ns, "ciliumnetworkpolicies", name
            ),
            "HarnessRun": lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, RUNS, name),
        }
        creators = {
            "Job": lambda: self.batch.create_namespaced_job(ns, body, field_manager=FIELD_MANAGER),
            "Secret": lambda: self.core.create_namespaced_secret(ns, body, field_manager=FIELD_MANAGER),
            "ConfigMap": lambda: self.core.create_namespaced_config_map(
                ns, body, field_manager=FIELD_MANAGER
            ),
            "PersistentVolumeClaim": lambda: self.core.create_namespaced_persistent_volume_claim(
                ns, body, field_manager=FIELD_MANAGER
            ),
            "NetworkPolicy": lambda: self.net.create_namespaced_network_policy(
                ns, body, field_manager=FIELD_MANAGER
            ),
            "CiliumNetworkPolicy": lambda: self.custom.create_namespaced_custom_object(
                "cilium.io", "v2", ns, "ciliumnetworkpolicies", body, field_manager=FIELD_MANAGER
            ),
            "HarnessRun": lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, RUNS, body, field_manager=FIELD_MANAGER
            ),
        }
        try:
            creators[kind]()
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = _none_if_missing(readers[kind])
            if existing is None:
                raise  # deleted in between: a conflict worth retrying
            return dict(self.api.sanitize_for_serialization(existing))
        return None

    def fetch_serves_cilium_policies(self) -> bool:
        """Whether the cluster serves Cilium's CiliumNetworkPolicy (its CRD exists)."""
        crd = _none_if_missing(
            lambda: self.extensions.read_custom_resource_definition("ciliumnetworkpolicies.cilium.io")
        )
        return crd is not None

    def apply_grant(self, grant: dict[str, Any]) -> None:
        """Create a gateway's grant ConfigMap, or replace the one a deleted run of the same name left (or
        this run's, with an ended attempt taken out): the gateways' namespace is the operator's own, so
        what holds the name there is ours."""
        self._create_or_replace(
            grant, self.core.create_namespaced_config_map, self.core.replace_namespaced_config_map
        )

    def apply_key_secret(self, body: dict[str, Any]) -> None:
        """Create the runs' own keys' Secret in the model gateway's namespace, or replace the one a
        deleted run of the same name left (that namespace is the operator's own)."""
        self._create_or_replace(body, self.core.create_namespaced_secret, self.core.replace_namespaced_secret)

    def _create_or_replace(self, body: dict[str, Any], create: Any, replace: Any) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        sent: Any = body  # the client serialises plain dicts as they are
        try:
            create(ns, sent, field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(name, ns, sent, field_manager=FIELD_MANAGER)

    def fetch_kueue_object(self, plural: str, name: str) -> dict[str, Any] | None:
        """One cluster-scoped Kueue object (a ClusterQueue, AdmissionCheck, MultiKueueConfig or
        MultiKueueCluster); None when it does not exist."""
        found = _none_if_missing(
            lambda: self.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
        )
        return None if found is None else dict(found)

    def fetch_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The leader-election Lease as raw JSON (missing: None), as its watch shows it: the client's
        models write a MicroTime back in another form, so a record read and the same record watched
        would never compare equal."""
        response = _none_if_missing(
            lambda: self.coordination.read_namespaced_lease(name, namespace, _preload_content=False)
        )
        return None if response is None else dict(json.loads(response.data))

    def write_lease(self, body: dict[str, Any]) -> bool:
        """Create the Lease, or replace it at the resourceVersion read; False when another replica
        wrote first (409: the write is refused, nothing changed)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        sent: Any = body
        try:
            if body["metadata"].get("resourceVersion"):
                self.coordination.replace_namespaced_lease(name, ns, sent, field_manager=FIELD_MANAGER)
            else:
                self.coordination.create_namespaced_lease(ns, sent, field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
        return True

    def delete_secret(self, namespace: str, name: str) -> None:
        """Delete a Secret (gone: nothing to do)."""
        _none_if_missing(lambda: self.core.delete_namespaced_secret(name, namespace))

    def delete_grant(self, namespace: str, name: str) -> None:
        """Delete a run's grant: the gateway refuses its credentials from then on."""
        self.delete_config_map(namespace, name)

    def write_config_map(self, body: dict[str, Any]) -> str | None:
        """Create the ConfigMap, or replace it if its metadata.resourceVersion is still the server's: the
        new resourceVersion, or None when another write came first (409: read it again, redo the change)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        sent: Any = body  # the client serialises plain dicts as they are
        try:
            if body["metadata"].get("resourceVersion"):
                written = self.core.replace_namespaced_config_map(name, ns, sent, field_manager=FIELD_MANAGER)
            else:
                written = self.core.create_namespaced_config_map(ns, sent, field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        assert written.metadata is not None
        return str(written.metadata.resource_version)

    def delete_config_map(self, namespace: str, name: str) -> None:
        """Delete a ConfigMap (gone: nothing to do)."""
        _none_if_missing(lambda: self.core.delete_namespaced_config_map(name, namespace))

    def cancel_run(self, namespace: str, name: str) -> bool:
        """Set the run's spec.cancel (the one field of its spec that may change); False when it is gone."""
        found = _none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, RUNS, name, {"spec": {"cancel": True}}
            )
        )
        return found is not None

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a HarnessRun (metadata.generateName allowed); the object as stored."""
        ns = body["metadata"]["namespace"]
        created: Any = self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, RUNS, body)
        return dict(created)

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the run's status through the status subresource (spec is never touched)."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, RUNS, name, {"status": status}
        )

    def patch_definition_status(
        self, plural: str, namespace: str | None, name: str, status: dict[str, Any]
    ) -> None:
        """Merge-patch a definition's status through its status subresource."""
        if namespace:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": status}
            )
        else:
            self.custom.patch_cluster_custom_object_status(GROUP, VERSION, plural, name, {"status": status})

    def patch_schedule_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch a HarnessSchedule's status through its status subresource (gone: nothing to do)."""
        _none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, SCHEDULES, name, {"status": status}
            )
        )

    def patch_budget_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch a HarnessBudget's status through its status subresource (gone: nothing to do)."""
        _none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "harnessbudgets", name, {"status": status}
            )
        )

    def delete_job(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a Job and its pods in the background; the pods get their termination grace period."""
        try:
            self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", grace_period_seconds=grace_seconds
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete_run(self, namespace: str, name: str, uid: str) -> None:
        """Delete a run if it is still the one with `uid` (gone, or re-created under its name: nothing
        done); the garbage collector then deletes its children through their ownerReferences."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                RUNS,
                name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"
                ),
            )
        except ApiException as exc:
            if exc.status not in (404, 409):  # 409: the uid precondition failed
                raise

    def create_event(
        self, run: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> None:
        """A core/v1 Event on the run (or the object of another kind of ours that `run` is), as `kubectl
        describe` shows them; one `name`d is posted once (it exists already: 409, ignored)."""
        meta = run["metadata"]
        now = datetime.now(UTC)
        names = {"name": name} if name else {"generate_name": f"{meta['name']}."}
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(namespace=meta["namespace"], **names),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind=run.get("kind") or "HarnessRun",
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER,
        )
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as exc:
            if not (name and exc.status == 409):
                raise
            return
        # Each Event is a log line too, so the operator's log at INFO tells each run's story.
        log.info(
            "Event posted",
            run=f"{meta['namespace']}/{meta['name']}",
            type=type_,
            reason=reason,
            message=message,
        )


class KubeReader:
    """resolution.Reader over the API server. A refusal that retrying cannot change (400, 422, a 403
    at the handler's `retry` `RETRY["forbidden"]`) is Unreadable, so the run fails with the reason; other
    errors go back to the handler's retry."""

    def __init__(self, kube: Kube, definitions: DefinitionReader | None = None, retry: int = 0) -> None:
        self.kube = kube
        self.definitions = definitions
        self.retry = retry

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """From `definitions` (the operator's watch caches) when given, else one GET."""
        if self.definitions is not None:
            return self.definitions.definition(namespace, name)
        plural = "harnessdefinitions" if namespace else "clusterharnessdefinitions"
        return self.kube.fetch_definition_object(plural, namespace, name)

    def config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        return _refusable(self.retry, lambda: self.kube.fetch_config_map_key(namespace, name, key))

    def secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return _refusable(self.retry, lambda: self.kube.fetch_secret_key(namespace, name, key))

    def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _refusable(self.retry, lambda: self.kube.fetch_run(namespace, name))

    def run_output(self, run: Mapping[str, Any]) -> str | None:
        """The run's output ConfigMap's text, only when the run owns it and its text is what the run's
        status reports: a ConfigMap made by anyone else is never read."""
        name = output_config_map_name(run["metadata"]["name"])
        cm = _refusable(self.retry, lambda: self.kube.fetch_config_map(run["metadata"]["namespace"], name))
        if cm is None:
            return None
        if not is_run_output(cm, run):
            raise NotTheOutput(name)
        return str(cm["data"]["output"])

    def session_archive(
        self, run: Mapping[str, Any], session: SessionStatus
    ) -> tuple[bytes | None, str | None]:
        """The session archive framed in the log of the run's attempt pod, only when it is the one the
        run's status names (its SHA-256): whatever else a log holds is never used."""
        attempts = (run.get("status") or {}).get("attempts") or []
        pod = next((a.get("podName") for a in attempts if a.get("index") == session.attempt), None)
        if not pod:
            return None, f"attempt {session.attempt} has no pod on record"
        log = _refusable(self.retry, lambda: self.kube.fetch_pod_log(run["metadata"]["namespace"], pod))
        if log is None:
            return None, f"pod {pod} of attempt {session.attempt} is gone, and its log with it"
        decoded = decode_frame(log, session.sha256, SESSION)
        if isinstance(decoded, FrameError):
            return None, f"the log of pod {pod} holds no session that is its own: {decoded.message}"
        return decoded, None


def _refusable(retry: int, call: Any) -> Any:
    try:
        return call()
    except Exception as exc:
        verdict = classify(exc, retry)
        if isinstance(verdict, Permanent):
            raise Unreadable(verdict.message) from exc
        raise


def _none_if_missing(call: Any) -> Any:
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


class _Expired(Exception):
    """The API server ended a watch with an ERROR event (410 Gone): watch again from the present."""
