"""The trigger receiver's API calls (I/O): its own reads, Events and status, its marks on runs whose checks
changed, and the runs it creates and deletes as a trigger's ServiceAccount (impersonated, so admission and
RBAC judge them as that account's)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness_operator.api.common import GROUP, VERSION
from harness_operator.core.forge.triggering import PIPELINE, RUN
from harness_operator.core.objects.events import build_event
from harness_operator.core.objects.naming import as_service_account, with_author

TRIGGERS = "harnesstriggers"
RUNS = "harnessruns"
PIPELINES = "harnesspipelines"
PLURALS = {RUN: RUNS, PIPELINE: PIPELINES}
FIELD_MANAGER = "harness-trigger-receiver"
# A forge waits about 10 s for an answer: each call gets a few seconds, never the client's default (none).
TIMEOUT = (3.0, 5.0)
CONNECTIONS = 16


def load_api_client() -> client.ApiClient:
    """In a pod its ServiceAccount; elsewhere $KUBECONFIG (the integration tests give it one)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    settings = client.Configuration.get_default_copy()
    settings.connection_pool_maxsize = CONNECTIONS
    return client.ApiClient(settings)


class ReceiverKube:
    """Every call the receiver makes; an ApiException propagates for the server to classify."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # --- as the receiver -----------------------------------------------------------------------------

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, TRIGGERS, name, _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """A Secret's value (None: no such Secret or key); 403 propagates (the team did not grant it)."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = secret.data or {}
        return base64.b64decode(data[key]) if key in data else None

    def list_runs(self, namespace: str, selector: str, kind: str = RUN) -> list[dict[str, Any]]:
        """The runs (or pipelines) the label selector matches."""
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[kind], label_selector=selector, _request_timeout=TIMEOUT
        )
        return list(cast(dict[str, Any], listed).get("items") or [])

    def patch_run_annotations(self, namespace: str, name: str, uid: str, annotations: dict[str, str]) -> None:
        """Merge-patch the run's annotations while it is still the run of `uid` (gone or re-created under
        its name: nothing done). The receiver's own right: `patch` on harnessruns."""
        body = {"metadata": {"uid": uid, "annotations": annotations}}  # a uid that differs fails: 409
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                RUNS,
                name,
                body,
                field_manager=FIELD_MANAGER,
                _request_timeout=TIMEOUT,
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def ready(self, namespace: str | None) -> None:
        """Raises unless the API server answers and lets this identity list HarnessTriggers (in
        `namespace`; None: everywhere)."""
        if namespace:
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, TRIGGERS, limit=1, _request_timeout=TIMEOUT
            )
        else:
            self.custom.list_cluster_custom_object(
                GROUP, VERSION, TRIGGERS, limit=1, _request_timeout=TIMEOUT
            )

    def create_event(
        self, trigger: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> None:
        """A core/v1 Event on the trigger (`kubectl describe htrigger`); one `name`d is posted once."""
        meta = trigger["metadata"]
        now = datetime.now(UTC)
        # The client sends a dict as it is: the body is the one core/objects/events.py builds.
        body: Any = build_event(trigger, "HarnessTrigger", type_, reason, message, FIELD_MANAGER, now, name)
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if not (name and exc.status == 409):
                raise

    def patch_trigger_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the trigger's status (its other fields are the operator's)."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            TRIGGERS,
            name,
            {"status": status},
            field_manager=FIELD_MANAGER,
            _request_timeout=TIMEOUT,
        )

    # --- as the trigger's ServiceAccount ---------------------------------------------------------------

    def create_as(self, service_account: str, obj: dict[str, Any]) -> None:
        """Create the run (or pipeline) as the ServiceAccount, recorded as its author (admission takes no
        other); 409 (the name taken: the same delivery) propagates."""
        namespace = obj["metadata"]["namespace"]
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURALS[obj["kind"]],
            with_author(obj, service_account),
            field_manager=FIELD_MANAGER,
            _request_timeout=TIMEOUT,
            _headers=as_service_account(namespace, service_account),
        )

    def delete_as(self, service_account: str, namespace: str, kind: str, name: str) -> None:
        """Delete a run (or pipeline, with its runs) as the ServiceAccount (gone already: nothing to do)."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURALS[kind],
                name,
                _request_timeout=TIMEOUT,
                _headers=as_service_account(namespace, service_account),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
