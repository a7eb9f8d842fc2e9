"""The operator's API client, Kube: its reads and writes of single objects, fetch_*, create, apply_*,
patch_*, delete_*, and its Events (I/O); lists, watches and logs in kube_streams.py."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.kube_connection import FIELD_MANAGER, RUNS, none_if_missing
from harness_operator.controller.kube_streams import KubeStreams
from harness_operator.core.objects.events import build_event
from harness_operator.core.objects.naming import ANNOTATION_CANCELLED_BY, as_service_account, with_author
from harness_operator.core.queue.kueue import KUEUE_GROUP, KUEUE_VERSION

SCHEDULES = "harnessschedules"
TRIGGERS = "harnesstriggers"
PIPELINES = "harnesspipelines"
log = structlog.get_logger("harness_operator")
# A write whose answer is unused: the answer is read to its end (the connection goes back to the pool)
# but not turned into the client's models (a Job create's client CPU: 1.3-1.7 ms instead of 1.8-2.2).
UNREAD: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_preload_content": False}


def drain(answer: Any) -> None:
    """An UNREAD write's answer (urllib3's response) read to its end."""
    answer.drain_conn()


class Kube(KubeStreams):
    """Thin typed wrappers over the official client; every call goes through here (its connection from
    KubeConnection, its lists, watches and logs from KubeStreams)."""

    # --- reads -------------------------------------------------------------------------------------

    def fetch_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, RUNS, name)
        )

    def fetch_namespace(self, name: str) -> dict[str, Any] | None:
        """One Namespace as stored: its annotations hold the platform's rules for it."""
        found = none_if_missing(lambda: self.core.read_namespace(name))
        return None if found is None else dict(self.api.sanitize_for_serialization(found))

    def fetch_username(self) -> str:
        """Who the API server takes this client for (a SelfSubjectReview): the name admission sees."""
        review: Any = client.AuthenticationV1Api(self.api).create_self_subject_review(
            client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
        )
        return str(review.status.user_info.username)

    def fetch_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        return none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULES, name)
        )

    def fetch_pipeline(self, namespace: str, name: str) -> dict[str, Any] | None:
        return none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PIPELINES, name)
        )

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        return none_if_missing(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, TRIGGERS, name)
        )

    def fetch_definition_object(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One HarnessDefinition (namespace given) or ClusterHarnessDefinition, as stored."""
        if namespace:
            return none_if_missing(
                lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            )
        return none_if_missing(lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))

    def fetch_config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        cm = self.fetch_config_map(namespace, name)
        return None if cm is None else (cm.get("data") or {}).get(key)

    def fetch_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A whole ConfigMap as a plain dict (metadata included, to check who owns it)."""
        cm = none_if_missing(lambda: self.core.read_namespaced_config_map(name, namespace))
        return None if cm is None else dict(self.api.sanitize_for_serialization(cm))

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        secret = none_if_missing(lambda: self.core.read_namespaced_secret(name, namespace))
        if secret is None or key not in (secret.data or {}):
            return None
        return base64.b64decode(secret.data[key]).decode("utf-8", errors="replace")

    def fetch_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Secret as stored (None when it does not exist): a run's own, to copy to a worker cluster."""
        secret = none_if_missing(lambda: self.core.read_namespaced_secret(name, namespace))
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
        none_if_missing(lambda: self.batch.patch_namespaced_job(name, namespace, patch))

    def fetch_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Job as stored (None when it does not exist): the check before an attempt is called lost."""
        job = none_if_missing(lambda: self.batch.read_namespaced_job(name, namespace))
        return None if job is None else dict(self.api.sanitize_for_serialization(job))

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
            "HarnessPipeline": lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, PIPELINES, name
            ),
        }
        creators = {
            "Job": lambda: self.batch.create_namespaced_job(ns, body, **UNREAD),
            "Secret": lambda: self.core.create_namespaced_secret(ns, body, **UNREAD),
            "ConfigMap": lambda: self.core.create_namespaced_config_map(ns, body, **UNREAD),
            "PersistentVolumeClaim": lambda: self.core.create_namespaced_persistent_volume_claim(
                ns, body, **UNREAD
            ),
            "NetworkPolicy": lambda: self.net.create_namespaced_network_policy(ns, body, **UNREAD),
            "CiliumNetworkPolicy": lambda: self.custom.create_namespaced_custom_object(
                "cilium.io", "v2", ns, "ciliumnetworkpolicies", body, **UNREAD
            ),
            "HarnessRun": lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, RUNS, body, **UNREAD
            ),
            "HarnessPipeline": lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PIPELINES, body, **UNREAD
            ),
        }
        try:
            drain(creators[kind]())
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = none_if_missing(readers[kind])
            if existing is None:
                raise  # deleted in between: a conflict worth retrying
            return dict(self.api.sanitize_for_serialization(existing))
        return None

    def fetch_serves_cilium_policies(self) -> bool:
        """Whether the cluster serves Cilium's CiliumNetworkPolicy (its CRD exists)."""
        crd = none_if_missing(
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
            drain(create(ns, sent, **UNREAD))
        except ApiException as exc:
            if exc.status != 409:
                raise
            drain(replace(name, ns, sent, **UNREAD))

    def fetch_kueue_object(self, plural: str, name: str) -> dict[str, Any] | None:
        """One cluster-scoped Kueue object (a ClusterQueue, AdmissionCheck, MultiKueueConfig or
        MultiKueueCluster); None when it does not exist."""
        found = none_if_missing(
            lambda: self.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
        )
        return None if found is None else dict(found)

    def fetch_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The leader-election Lease as raw JSON (missing: None), as its watch shows it: the client's
        models write a MicroTime back in another form, so a record read and the same record watched
        would never compare equal."""
        response = none_if_missing(
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
        none_if_missing(lambda: self.core.delete_namespaced_secret(name, namespace))

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
        none_if_missing(lambda: self.core.delete_namespaced_config_map(name, namespace))

    def cancel(self, namespace: str, name: str, plural: str = RUNS, user: str | None = None) -> bool:
        """Set the run's (or pipeline's) spec.cancel, the one field of its spec that may change, with who
        asked (`user`, their username: agentharness.dev/cancelled-by, which admission holds to the requester
        and keeps once set); False when it is gone."""
        patch: dict[str, Any] = {"spec": {"cancel": True}}
        if user is not None:
            patch["metadata"] = {"annotations": {ANNOTATION_CANCELLED_BY: user}}
        found = none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, patch)
        )
        return found is not None

    def create_run_as(self, service_account: str, run: dict[str, Any]) -> dict[str, Any] | None:
        """Create the run as the ServiceAccount of its namespace, recorded as its author, so admission
        judges it as any run the ServiceAccount creates; None when created, else the run that holds the
        name (409). A refusal (400, 403, 422) propagates."""
        ns, name = run["metadata"]["namespace"], run["metadata"]["name"]
        body: Any = with_author(run, service_account)
        try:
            self.custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                ns,
                RUNS,
                body,
                field_manager=FIELD_MANAGER,
                _headers=as_service_account(ns, service_account),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = none_if_missing(
                lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, RUNS, name)
            )
            if existing is None:
                raise  # deleted in between: a conflict worth retrying
            return dict(existing)
        return None

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a HarnessRun (metadata.generateName allowed); the object as stored."""
        ns = body["metadata"]["namespace"]
        created: Any = self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, RUNS, body)
        return dict(created)

    def patch_run_metadata(self, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> bool:
        """Merge-patch the run's labels and annotations (the forge report's), only while it is still the
        run of `uid`; False when it is gone or re-created under its name."""
        metadata = {**patch["metadata"], "uid": uid}  # a uid that differs fails the patch: 409
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, RUNS, name, {**patch, "metadata": metadata}
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the run's status through the status subresource (spec is never touched); the run
        as stored after it."""
        stored: Any = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, RUNS, name, {"status": status}
        )
        return dict(stored)

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
        none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, SCHEDULES, name, {"status": status}
            )
        )

    def patch_pipeline_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch a HarnessPipeline's status through its status subresource (gone: nothing to do)."""
        none_if_missing(
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PIPELINES, name, {"status": status}
            )
        )

    def patch_budget_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch a HarnessBudget's status through its status subresource (gone: nothing to do)."""
        none_if_missing(
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

    def list_pipelines(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The pipelines of the namespace matching `selector` (a schedule's: a few)."""
        listed: Any = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PIPELINES, label_selector=selector
        )
        return [dict(item) for item in listed.get("items") or []]

    def delete_run(self, namespace: str, name: str, uid: str, plural: str = RUNS) -> None:
        """Delete a run (or a pipeline: `plural`) if it is still the one with `uid` (gone, or re-created
        under its name: nothing done); the garbage collector then deletes its children through their
        ownerReferences."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"
                ),
            )
        except ApiException as exc:
            if exc.status not in (404, 409):  # 409: the uid precondition failed
                raise

    def fetch_events(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The Events about the object of `uid`: by uid, never by name, so a run re-created under a deleted
        run's name is not told the old run's story."""
        listed = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}")
        return [dict(self.api.sanitize_for_serialization(e)) for e in listed.items]

    def create_event(
        self, run: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> None:
        """A core/v1 Event on the run (or the object of another kind of ours that `run` is), as `kubectl
        describe` shows them; one `name`d is posted once (it exists already: 409, ignored)."""
        meta = run["metadata"]
        kind = run.get("kind") or "HarnessRun"
        # The client sends a dict as it is: the body is the one core/objects/events.py builds.
        body: Any = build_event(run, kind, type_, reason, message, FIELD_MANAGER, datetime.now(UTC), name)
        try:
            drain(self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False))
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
