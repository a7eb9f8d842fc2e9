"""KubeReader, the Reader resolution reads a run's references through on the API server (I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_operator.api.v1alpha1 import SessionStatus
from harness_operator.contract.frame import SESSION, FrameError, decode_frame
from harness_operator.controller.errors import Permanent, classify
from harness_operator.controller.kube import Kube
from harness_operator.core.objects.naming import output_config_map_name
from harness_operator.core.objects.ownership import is_run_output
from harness_operator.core.resolve.resolution import DefinitionReader, NotTheOutput, Unreadable


class FreshDefinitions:
    """A run's first resolution: its namespaced definitions as the API server holds them now. The watch
    caches are separate, so a HarnessDefinition made just before the run, shadowing a cluster one, may
    not be in the namespaced cache while the cluster's is: the run would start with the cluster's. A
    namespaced miss is read once more with a GET (a 404 for most runs, once: later reconciles keep the
    attempt's definition, and the caches have caught up)."""

    def __init__(self, cached: DefinitionReader, kube: Kube) -> None:
        self.cached = cached
        self.kube = kube

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        found = self.cached.definition(namespace, name)
        if found is None and namespace:
            return self.kube.fetch_definition_object("harnessdefinitions", namespace, name)
        return found


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
