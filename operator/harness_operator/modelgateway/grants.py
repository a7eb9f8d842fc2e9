"""The live grants: ConfigMaps labelled agentharness.dev/model-grant=true in the gateway's namespace, kept by
a watch, read with the pod's ServiceAccount (a Role that may list, watch and get ConfigMaps there, and
get Secrets: the runs' own keys the operator copies there) (I/O).

The operator adds an attempt to its run's grant as it starts it (before its Job) and rewrites the grant
without it once it has ended, so a token works from its attempt's first request, never before its start,
and is refused as soon as the watch delivers the change. A token whose grant, or whose attempt in it, the
watch has not delivered yet is looked up once by name (the server bounds how often).
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

from kubernetes import client, watch
from pydantic import ValidationError

from harness_operator.contract.model_access import (
    LABEL_MODEL_GRANT,
    MODEL_GRANT_KEY,
    ModelAttemptGrant,
    ModelGrant,
)

SELECTOR = f"{LABEL_MODEL_GRANT}=true"
RETRY_SECONDS = 1.0


def parse(config_map: Any) -> ModelGrant | None:
    """A grant ConfigMap's grant (a V1ConfigMap), or None when it is not one."""
    labels = config_map.metadata.labels or {}
    if labels.get(LABEL_MODEL_GRANT) != "true":
        return None
    try:
        return ModelGrant.model_validate_json((config_map.data or {}).get(MODEL_GRANT_KEY, ""))
    except ValidationError:
        return None


class GrantWatch:
    """The namespace's grants by ConfigMap name, updated by a list and watch in a thread."""

    def __init__(self, api: client.CoreV1Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.grants: dict[str, ModelGrant] = {}
        self.synced = threading.Event()
        self._keys: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="grant-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def get(self, name: str, attempt: str | None = None) -> ModelGrant | None:
        """The grant `name`, read by name when the watch has not delivered it, or not yet the change that
        let `attempt` in (an attempt joins as it starts). The caller bounds how often it asks (server.py)."""
        grant = self.grants.get(name)
        stale = grant is not None and attempt is not None and attempt not in grant.attempts
        if (grant is None or stale) and self.synced.is_set():
            grant = self._fetch(name) or grant
        return grant

    def own_key(self, grant: ModelGrant, attempt: ModelAttemptGrant) -> str | None:
        """A run's own key for its attempt, from the Secret the operator copied it into (read once per
        run and attempt; None when it is gone)."""
        if not (attempt.key_secret and attempt.key_field):
            return None
        cached = self._keys.get((grant.uid, attempt.key_field))
        if cached is None:
            try:
                secret = self.api.read_namespaced_secret(
                    attempt.key_secret, self.namespace, _request_timeout=5
                )
            except client.ApiException:
                return None
            data = (secret.data or {}).get(attempt.key_field)
            if data is None:
                return None
            cached = base64.b64decode(data).decode("utf-8", errors="replace")
            self._keys[(grant.uid, attempt.key_field)] = cached
        return cached

    def _fetch(self, name: str) -> ModelGrant | None:
        """A grant the watch has not delivered yet (created a moment ago), read by its name."""
        try:
            grant = parse(self.api.read_namespaced_config_map(name, self.namespace, _request_timeout=5))
        except client.ApiException:
            return None
        if grant is not None:  # the watch's copy, if any, stays: it may be newer than this read by now
            self.grants.setdefault(name, grant)
        return grant

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed: Any = self.api.list_namespaced_config_map(self.namespace, label_selector=SELECTOR)
                self.grants = {
                    item.metadata.name: grant for item in listed.items if (grant := parse(item)) is not None
                }
                self.synced.set()
                self._follow(listed.metadata.resource_version)
            except Exception as exc:  # a dropped connection, an expired version: list again
                print(f"harness-model-gateway: grant watch: {exc!r}; listing again", flush=True)
                time.sleep(RETRY_SECONDS)

    def _follow(self, version: Any) -> None:
        stream = watch.Watch().stream(
            self.api.list_namespaced_config_map,
            self.namespace,
            label_selector=SELECTOR,
            resource_version=version,
            timeout_seconds=300,
        )
        for event in stream:
            if self._stop.is_set():
                return
            item = event["object"]
            name = item.metadata.name
            grant = parse(item) if event["type"] != "DELETED" else None
            if grant is None:
                self.grants.pop(name, None)
            else:
                self.grants[name] = grant
